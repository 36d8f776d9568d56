"""Mergeable partial statistics of responses, in float64.

A :class:`Partial` holds, per kernel, the voxel count, Σ G, Σ G², max G and
min G over some voxels.  Partials of disjoint voxel sets merge exactly (sums
in float64, in the order given: merging is deterministic), and
:func:`finalize` turns one into the statistics of docs/definitions.md.

Examples
--------
>>> import numpy as np
>>> g = np.arange(6.0).reshape(1, 6)
>>> p = merge([Partial.of(g[:, :2]), Partial.of(g[:, 2:])])
>>> finalize(p, ("energy", "mean", "max"))["energy"]
array([55.])
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

STATS = ("energy", "std", "max", "mean", "min")


def check_stats(stats) -> tuple[str, ...]:
    """Validated tuple of statistic names (ValueError naming ``stats`` otherwise)."""
    if isinstance(stats, str):
        stats = (stats,)
    try:
        out = tuple(stats)
    except TypeError:
        raise TypeError(f"stats must be a sequence of names, got stats={stats!r}") from None
    bad = [s for s in out if s not in STATS]
    if bad or not out:
        raise ValueError(f"stats must be a non-empty subset of {STATS}, got stats={stats!r}")
    return tuple(dict.fromkeys(out))


@dataclass
class Partial:
    """Partial statistics of ``K`` responses over ``count`` voxels each.

    Attributes are NumPy float64 arrays of shape ``(K,)`` (``count`` an int).
    ``max``/``min`` are ±inf for an empty voxel set.
    """

    count: int
    sum: np.ndarray
    sumsq: np.ndarray
    max: np.ndarray
    min: np.ndarray

    @classmethod
    def empty(cls, k: int) -> "Partial":
        z = np.zeros(k)
        return cls(0, z.copy(), z.copy(), np.full(k, -np.inf), np.full(k, np.inf))

    @classmethod
    def of(cls, g) -> "Partial":
        """Partial of responses ``g`` with shape ``(K, ...)`` (reference implementation)."""
        g = np.asarray(g, dtype=np.float64).reshape(len(g), -1)
        return cls(g.shape[1], g.sum(axis=1), np.einsum("ij,ij->i", g, g), g.max(axis=1), g.min(axis=1))

    @classmethod
    def from_array(cls, count: int, arr) -> "Partial":
        """From a ``(K, 4)`` array of (sum, sumsq, max, min) columns."""
        arr = np.asarray(arr, dtype=np.float64)
        return cls(int(count), arr[:, 0].copy(), arr[:, 1].copy(), arr[:, 2].copy(), arr[:, 3].copy())

    def merge(self, other: "Partial") -> "Partial":
        """This partial followed by ``other`` (disjoint voxels, same kernels)."""
        return Partial(self.count + other.count, self.sum + other.sum, self.sumsq + other.sumsq,
                       np.maximum(self.max, other.max), np.minimum(self.min, other.min))


def merge(parts) -> Partial:
    """Merge partials left to right (a fixed order, hence reproducible)."""
    parts = list(parts)
    if not parts:
        raise ValueError("merge needs at least one partial, got parts=[]")
    out = parts[0]
    for p in parts[1:]:
        out = out.merge(p)
    return out


def finalize(p: Partial, stats=STATS) -> dict[str, np.ndarray]:
    """The statistics (docs/definitions.md) of a partial: energy Σ G², population std, max, mean, min."""
    stats = check_stats(stats)
    n = float(p.count)
    mean = p.sum / n
    out = {}
    for s in stats:
        if s == "energy":
            out[s] = p.sumsq.copy()
        elif s == "mean":
            out[s] = mean
        elif s == "std":
            out[s] = np.sqrt(np.maximum(p.sumsq / n - mean * mean, 0.0))
        elif s == "max":
            out[s] = p.max.copy()
        elif s == "min":
            out[s] = p.min.copy()
    return out
