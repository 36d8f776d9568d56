"""Test-only fault injection for workflow jobs, loaded through ``PYTHONPATH``.

``VOLSWEEP_FAULT`` holds comma-separated ``step:action[:arg]`` entries:

- ``thickness_chunk:kill``, ``:hang`` or ``:fail-once:PATH`` act after the chunk
  job has written its shard and before its counts file (its completion
  marker): SIGKILL, sleep :data:`HANG_S`, or fail unless PATH exists
  (creating it, so the retry succeeds);
- ``sweep:oom:BYTES`` makes the sweep run out of memory whenever its memory
  limit is unset or above BYTES.

Python imports this module at start-up when its folder is on ``PYTHONPATH``;
without ``VOLSWEEP_FAULT`` it does nothing.  Shipped code has no fault hooks.
"""

import os

FAULT_ENV = "VOLSWEEP_FAULT"
HANG_S = 3600


def _faults(step):
    for spec in filter(None, os.environ.get(FAULT_ENV, "").split(",")):
        name, _, rest = spec.partition(":")
        action, _, arg = rest.partition(":")
        if name == step:
            yield action, arg


def _act(step):
    import logging
    import signal
    import time
    from pathlib import Path

    log = logging.getLogger("volsweep")
    for action, arg in _faults(step):
        if action == "kill":
            log.warning("fault: %s killed midway", step)
            os.kill(os.getpid(), signal.SIGKILL)
        elif action == "hang":
            log.warning("fault: %s hanging midway", step)
            for h in log.handlers:
                h.flush()
            time.sleep(HANG_S)
        elif action == "fail-once":
            marker = Path(arg)
            if not marker.exists():
                marker.touch()
                raise RuntimeError(f"fault: {step} failed once (transient)")


def _install():
    import volsweep.engine as engine
    import volsweep.thickness as thickness

    value_counts = thickness.value_counts

    def value_counts_after_fault(lt):  # the chunk job's shard is written by now
        _act("thickness_chunk")
        return value_counts(lt)

    thickness.value_counts = value_counts_after_fault
    sweep = engine.sweep

    def sweep_with_oom(*args, memory_limit=None, **kwargs):
        for action, arg in _faults("sweep"):
            if action == "oom" and (memory_limit is None or memory_limit > float(arg)):
                raise MemoryError(f"fault: simulated out-of-memory at memory_limit={memory_limit}")
        return sweep(*args, memory_limit=memory_limit, **kwargs)

    engine.sweep = sweep_with_oom


if os.environ.get(FAULT_ENV):
    _install()
