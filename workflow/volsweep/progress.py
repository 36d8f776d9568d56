"""Progress that a user sees: a tqdm bar on an interactive terminal, log lines otherwise.

Examples
--------
>>> with progress(3, "kernels", enabled=False) as bar:
...     for _ in range(3):
...         bar.update()
>>> bar.done
3
"""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path

log = logging.getLogger("volsweep")

#: Seconds between progress log lines when stderr is not a terminal.
EVERY_S = 5.0


class _LogProgress:
    """'desc: done/total, rate/s, ETA' on the ``volsweep`` logger, at most every ``every_s``."""

    def __init__(self, total, desc, enabled, every_s=EVERY_S, sync=None, unit="steps"):
        self.total, self.desc, self.enabled, self.every_s = total, desc, enabled, every_s
        self.sync, self.unit = sync, unit
        self.t0 = self.last = time.perf_counter()
        self.done = 0

    def _due(self) -> bool:
        return time.perf_counter() - self.last >= self.every_s or self.done == self.total

    def update(self, n=1):
        self.done += n
        if not self.enabled or not self._due():
            return
        if self.sync is not None:
            self.sync()  # count only the work a device has really finished
        now = self.last = time.perf_counter()
        rate = self.done / max(now - self.t0, 1e-9)
        eta = (self.total - self.done) / rate if rate > 0 and self.total else float("inf")
        log.info("%s: %d/%d %s, %.1f %s/s, ETA %.0f s", self.desc, self.done, self.total, self.unit,
                 rate, self.unit, eta)

    step = update

    def close(self):
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class _TqdmProgress(_LogProgress):
    def __init__(self, total, desc, enabled, every_s=EVERY_S, sync=None, unit="steps"):
        from tqdm.auto import tqdm

        super().__init__(total, desc, enabled, every_s, sync, unit)
        self.bar = tqdm(total=total, desc=desc, unit=unit, file=sys.stderr, leave=False,
                        dynamic_ncols=True)
        self.shown = 0

    def update(self, n=1):
        self.done += n
        if not self._due():
            return
        if self.sync is not None:
            self.sync()
        self.last = time.perf_counter()
        self.bar.update(self.done - self.shown)
        self.shown = self.done

    step = update

    def close(self):
        self.bar.close()


def interactive(stream=None) -> bool:
    """Whether ``stream`` (default stderr) is a terminal or notebook a person watches."""
    stream = sys.stderr if stream is None else stream
    if stream is sys.stderr and "ipykernel" in sys.modules:  # a notebook: tqdm draws a widget
        return True
    return bool(getattr(stream, "isatty", lambda: False)())


def progress(total: int, desc: str, enabled: bool = True, *, every_s: float = EVERY_S, sync=None,
             unit: str = "steps"):
    """A progress counter with ``update(n=1)`` and ``close()``; also a context manager.

    Parameters
    ----------
    total : int
        Steps in all.
    desc : str
        What is counted, e.g. ``"sweep kernels"``.
    enabled : bool
        False: count silently.
    every_s : float
        Seconds between updates shown (log lines, or the bar's refresh).
    sync : callable, optional
        Called before an update is shown, e.g. a device synchronisation, so
        that asynchronous work is counted when it is done.
    unit : str
        What one step is, e.g. ``"kernels"``.

    Returns
    -------
    object
        A tqdm bar on stderr when it is a terminal; otherwise log lines on the
        ``volsweep`` logger (INFO), so job logs show progress too.
    """
    if enabled and interactive():
        try:
            return _TqdmProgress(total, desc, enabled, every_s, sync, unit)
        except ImportError:  # tqdm is a dependency; a bare install still gets log lines
            pass
    return _LogProgress(total, desc, enabled, every_s, sync, unit)


_NOTICED = set()


def numba_cache_warm(module_file) -> bool:
    """Whether numba's on-disk cache holds compiled functions of ``module_file`` (``cache=True``)."""
    path = Path(module_file)
    caches = [path.parent / "__pycache__"]
    return any(caches[0].glob(f"{path.stem}.*.nbi")) if caches[0].is_dir() else False


def compile_notice(module_file, what: str = "CPU kernels", seconds: str = "20-60 s") -> bool:
    """Tell the user, once per process, that a first use compiles ``what`` (numba) and takes a while.

    Prints to stderr when interactive and logs on ``volsweep`` (WARNING, so it
    shows without any logging set-up); nothing when the cache is warm.  Returns
    whether a notice was given.

    Examples
    --------
    >>> compile_notice(__file__)  # this module has no numba functions: nothing cached, notice given once
    True
    >>> compile_notice(__file__)
    False
    """
    key = str(module_file)
    if key in _NOTICED or numba_cache_warm(module_file):
        return False
    _NOTICED.add(key)
    log.warning("compiling the %s with numba (first use only, about %s; cached afterwards)", what, seconds)
    return True
