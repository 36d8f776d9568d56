"""How a workflow script runs one step: its log, its GPU, one call."""

from __future__ import annotations

import contextlib
import logging
import time
from pathlib import Path

log = logging.getLogger("volsweep")


@contextlib.contextmanager
def logged_to(log_path):
    """Send stderr and the ``volsweep`` logger to ``log_path`` for the duration."""
    Path(log_path).parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w") as fh, contextlib.redirect_stderr(fh):
        handler = logging.StreamHandler(fh)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        try:
            yield
        except Exception:
            log.exception("step failed")
            raise
        finally:
            log.removeHandler(handler)


def run_script(func, snakemake_obj, **kwargs):
    """Entry point of the workflow scripts: log to ``log[0]``, run one step.

    A step with a ``device`` gets its own GPU first (:func:`volsweep.devices.claim_gpu`).
    """
    from volsweep.devices import claim_gpu

    start = time.perf_counter()
    with logged_to(snakemake_obj.log[0]), claim_gpu(kwargs.get("device", "cpu")):
        log.info("%s: rule %s, wildcards %s", func.__name__, snakemake_obj.rule,
                 dict(snakemake_obj.wildcards.items()))
        func(**kwargs)
        log.info("%s: done in %.2f s", func.__name__, time.perf_counter() - start)
