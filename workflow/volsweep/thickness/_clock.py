"""Marks between the stages of one local-thickness call: the host clock, or CUDA events
(read once, at the end, so that timing does not stall the device between stages); and
the progress lines of a long call."""

from __future__ import annotations

import time
from contextvars import ContextVar

#: Called as ``PART_DONE.get()(done, total)`` by the CPU's thread pool as the parts of a
#: kernel finish, while a :class:`CallProgress` is entered; None otherwise.
PART_DONE: ContextVar = ContextVar("volsweep_thickness_part_done", default=None)


class StageClock:
    """``mark()`` after each stage; ``seconds()`` the time between consecutive marks.

    Examples
    --------
    >>> clock = StageClock("cpu")
    >>> clock.mark(); clock.mark()
    >>> len(clock.seconds()), clock.seconds()[0] >= 0
    (1, True)
    """

    def __init__(self, device: str):
        self.device, self.marks = device, []

    def mark(self) -> None:
        if self.device == "cuda":
            import cupy as cp

            event = cp.cuda.Event()
            event.record()
            self.marks.append(event)
        else:
            self.marks.append(time.perf_counter())

    def seconds(self) -> list[float]:
        if self.device == "cuda":
            import cupy as cp

            self.marks[-1].synchronize()
            return [cp.cuda.get_elapsed_time(a, b) / 1e3 for a, b in zip(self.marks, self.marks[1:])]
        return [b - a for a, b in zip(self.marks, self.marks[1:])]


class CallProgress:
    """INFO lines on ``log`` for a call that runs past ``every_s`` seconds (default
    ``volsweep.progress.EVERY_S``): each stage as it ends, and meanwhile the parts of its
    kernels on the thread pool as they finish, at most one line per ``every_s``.  A
    shorter call logs nothing.  Entered, it receives the thread pool's parts
    (``PART_DONE``).

    Examples
    --------
    >>> import logging
    >>> with CallProgress(logging.getLogger("demo"), "a call", ("first", "second"), every_s=0) as p:
    ...     PART_DONE.get()(1, 2)
    ...     p.ended()
    >>> p.stage, p.lines
    ('second', 2)
    """

    def __init__(self, log, what: str, stages, every_s: float | None = None):
        if every_s is None:
            from volsweep.progress import EVERY_S as every_s
        self.log, self.what, self.stages, self.every_s = log, what, tuple(stages), every_s
        self.index = 0  # of the current stage
        self.t0 = self.last = time.perf_counter()
        self.lines = 0

    def _elapsed(self, final: bool):
        """Seconds since the call began when a line is due, else None."""
        now = time.perf_counter()
        if now - self.t0 < self.every_s or (not final and now - self.last < self.every_s):
            return None
        self.last = now
        self.lines += 1
        return now - self.t0

    def parts(self, done: int, total: int) -> None:
        elapsed = self._elapsed(final=False)
        if elapsed is not None:
            self.log.info("%s: %s, %d/%d parts done, %.1f s", self.what, self.stage, done, total,
                          elapsed)

    def ended(self, detail: str = "") -> None:
        """The current stage has ended (``detail``: what it found); the next one begins."""
        elapsed = self._elapsed(final=True)
        if elapsed is not None:
            self.log.info("%s: %s done%s, %.1f s", self.what, self.stage, detail, elapsed)
        self.index = min(self.index + 1, len(self.stages) - 1)

    @property
    def stage(self) -> str:
        return self.stages[self.index]

    def __enter__(self):
        self._token = PART_DONE.set(self.parts)
        return self

    def __exit__(self, *exc):
        PART_DONE.reset(self._token)
