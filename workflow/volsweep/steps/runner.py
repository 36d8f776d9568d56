"""How a workflow script runs one step: its log, its GPU, one call."""

from __future__ import annotations

import contextlib
import io
import logging
import os
import threading
import time
from pathlib import Path

log = logging.getLogger("volsweep")

#: Set (to any value but 0) to profile each step: the log ends with its
#: functions by cumulative time (cProfile), for finding where a job's time goes.
ENV_PROFILE = "VOLSWEEP_PROFILE"
PROFILE_LINES = 25


# Loggers below ``volsweep`` whose DEBUG lines a step's log carries: each local-thickness
# call's kept centres and stage times (one line per call or chunk).
STEP_DEBUG_LOGGERS = ("volsweep.thickness",)


@contextlib.contextmanager
def logged_to(log_path):
    """Send stderr and the ``volsweep`` logger to ``log_path`` for the duration (INFO, and
    DEBUG from ``STEP_DEBUG_LOGGERS``)."""
    Path(log_path).parent.mkdir(parents=True, exist_ok=True)
    debug = [logging.getLogger(name) for name in STEP_DEBUG_LOGGERS]
    levels = [child.level for child in debug]
    with open(log_path, "w") as fh, contextlib.redirect_stderr(fh):
        handler = logging.StreamHandler(fh)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        for child in debug:
            child.setLevel(logging.DEBUG)
        try:
            yield
        except Exception:
            log.exception("step failed")
            raise
        finally:
            log.removeHandler(handler)
            for child, level in zip(debug, levels):
                child.setLevel(level)


#: Modules a step needs only at its end (its datasets, netCDF): imported in a thread meanwhile.
PREFETCH = ("volsweep.io.datasets",)


def _prefetch():
    import importlib

    for name in PREFETCH:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - the step's own import reports it
            return


def run_script(func, snakemake_obj, *, prefetch_at_start=True, **kwargs):
    """Entry point of the workflow scripts: log to ``log[0]``, run one step.

    A step with a ``device`` gets its own GPU first (:func:`volsweep.devices.claim_gpu`),
    or shares one when its rule takes ``gpu=0`` (the whole-volume thickness).  The modules
    it needs only at its end are imported meanwhile in a thread, unless
    ``prefetch_at_start=False`` (the sweep's engine imports them in its own background,
    while its GPU computes: two threads must not import one package at once).
    """
    from volsweep.devices import claim_gpu

    start = time.perf_counter()
    if prefetch_at_start:
        threading.Thread(target=_prefetch, daemon=True).start()
    shared = getattr(getattr(snakemake_obj, "resources", None), "gpu", 1) == 0
    with logged_to(snakemake_obj.log[0]), claim_gpu(kwargs.get("device", "cpu"), shared=shared):
        log.info("%s: rule %s, wildcards %s", func.__name__, snakemake_obj.rule,
                 dict(snakemake_obj.wildcards.items()))
        if os.environ.get(ENV_PROFILE, "0") not in ("", "0"):
            _profiled(func, kwargs)
        else:
            func(**kwargs)
        log.info("%s: done in %.2f s", func.__name__, time.perf_counter() - start)


def _profiled(func, kwargs):
    import cProfile
    import pstats

    prof = cProfile.Profile()
    try:
        prof.runcall(func, **kwargs)
    finally:
        out = io.StringIO()
        pstats.Stats(prof, stream=out).sort_stats("cumulative").print_stats(PROFILE_LINES)
        log.info("%s: profile (%s)\n%s", func.__name__, ENV_PROFILE, out.getvalue())
