"""Marks between the stages of one local-thickness call: the host clock, or CUDA events
(read once, at the end, so that timing does not stall the device between stages)."""

from __future__ import annotations

import time


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
