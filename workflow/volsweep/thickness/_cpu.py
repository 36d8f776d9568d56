"""CPU kernels of exact local thickness: squared EDT, centre pruning, ball painting.

Every length is measured on the integer lattice of ``_tables.lattice``
(the spacing divided by its common scale): the squared length of an offset
``(di, dj, dk)`` is the integer ``((di*w0)**2 + (dj*w1)**2) + (dk*w2)**2``, exact
in float64.  The distance transform, the pruning and the painting all compare
such integers, and so do the GPU kernels and the test oracle, so the CPU and GPU
results are bit-identical and ties are decided exactly.

numba and edt are imported lazily: the GPU path needs neither.
"""

from __future__ import annotations

import functools
import math
import os
import threading
from pathlib import Path

import numpy as np

from ._tables import (INT_TABLE_MAX, diameter_lut, disc_need_table, half_table,
                                level_lut, prune_table)

# float32 holds integers exactly up to 2**24: edt's float32 squared output is exact below it.
_F32_EXACT = float(2**24)
# Pruning compares squares of sums of squared lengths: exact in float64 below this length.
_PRUNE_EXACT = float(2**25)


def _threads() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


@functools.cache
def _kernels():
    """The module of numba kernels (compiled once, cached on disk)."""
    import numba

    from volsweep.progress import compile_notice

    compile_notice(Path(__file__).with_name("_numba.py"), "local-thickness CPU kernels", "about 30 s")
    from volsweep.thickness import _numba as _thickness_numba

    numba.set_num_threads(min(numba.config.NUMBA_NUM_THREADS, _threads()))
    return _thickness_numba


# Work arrays reused from call to call (per thread, one set for the last shape): a fresh
# 125 MB array costs about 0.1 s of page faults at 250^3, and callers in a loop (an
# optimisation calling ~10^5 times) call with one shape.  Only arrays that never leave a call
# (the intermediate distance pass, the prune mask) live here.
_SCRATCH = threading.local()


def _scratch(name: str, shape, dtype) -> np.ndarray:
    store = getattr(_SCRATCH, "arrays", None)
    if store is None:
        store = _SCRATCH.arrays = {}
    key = (tuple(int(n) for n in shape), np.dtype(dtype).str)
    arr = store.get(name)
    if arr is None or (arr.shape, arr.dtype.str) != key:
        store.pop(name, None)
        arr = store[name] = np.empty(key[0], key[1])
    return arr


def edt_sq(phase: np.ndarray, weights, *, method: str = "numba") -> np.ndarray:
    """Squared lattice distance (float64 exact integers) to the nearest background voxel.

    Background voxels get 0; without any background in the array every voxel is
    ``inf``.  ``method="numba"`` (the default) runs the separable passes of this
    module; ``"edt"`` the edt package (exact only while every value is below 2**24,
    checked).  The result is this thread's work array, overwritten by the next call.

    Examples
    --------
    >>> edt_sq(np.array([[[False, True, True]]]), (1, 1, 2))[0, 0].tolist()
    [0.0, 4.0, 16.0]
    """
    phase = np.ascontiguousarray(phase, dtype=bool)
    wx, wy, wz = (float(w) for w in weights)
    if not (~phase).any():
        return np.full(phase.shape, np.inf)
    if method == "edt":
        import edt

        d2 = edt.edtsq(phase, anisotropy=(wx, wy, wz), black_border=False,
                       parallel=_threads()).astype(np.float64)
        if d2.max() >= _F32_EXACT:
            raise ValueError("edt's float32 output is not exact beyond 2**24: use method='numba'")
        return d2
    if method != "numba":
        raise ValueError(f"method must be 'edt' or 'numba', got method={method!r}")
    k = _kernels()
    a = _scratch("edt_axis0", phase.shape, np.float64)
    b = _scratch("edt_d2", phase.shape, np.float64)
    k.edt_axis0(phase, wx, a)
    k.edt_axis12(a, wy, wz, b)
    return b


def candidates(d2: np.ndarray, weights, box_lo, box_hi, r2keep: float):
    """Flat indices (sorted) of the ball centres that survive pruning, and their uphill bits.

    The bits mark each centre's 26-neighbours before it in the order (D2 descending,
    flat index ascending), for :func:`paint`.
    """
    k = _kernels()
    wx, wy, wz = (float(w) for w in weights)
    r2need = float(k.finite_max(d2))
    levels, need, r2cap = prune_table(r2need, weights)
    levlut = level_lut(levels, r2cap, weights)
    # the continuous containment test beyond the table is exact below _PRUNE_EXACT; above,
    # a relative slack makes it prune only balls that are certainly contained
    eps = 0.0 if r2need < _PRUNE_EXACT else 1e-9
    mask = _scratch("prune_mask", d2.shape, np.uint32)
    k.prune(d2, wx, wy, wz, eps, *[int(v) for v in box_lo],
            *[int(v) for v in box_hi], float(r2keep), levels, need, r2cap, levlut, mask)
    return k.kept_centres(mask)


# Output planes per slab of the painter (one slab per task).
BITS_SLAB = 16


def paint(d2: np.ndarray, cand: np.ndarray, weights, box_lo, box_hi, uphill=None):
    """Rank map (uint32) of the box [lo, hi) and the sorted distinct D2 values it indexes.

    ``out[x] = r`` means the largest D2(p) among the candidate balls covering x is
    ``values[r - 1]``; 0 = not covered.  Balls are painted in decreasing D2 with one
    "assigned" bit per voxel; discs inside an uphill neighbour's disc are skipped
    (``uphill`` from :func:`candidates`, or found here when None).  The result is
    this thread's work array, overwritten by the next call.
    """
    k = _kernels()
    wi = tuple(int(w) for w in weights)
    shape = tuple(int(h - l) for l, h in zip(box_lo, box_hi))
    out = _scratch("paint_ranks", shape, np.uint32)
    k.zero_fill(out)
    r2s = d2.reshape(-1)[cand]
    small = cand.size and r2s.max() < INT_TABLE_MAX
    if small:
        # exact integers: ranks by counting instead of a sort
        r2i = r2s.astype(np.int64)
        present = np.zeros(int(r2i.max()) + 1, np.bool_)
        present[r2i] = True
        values = np.flatnonzero(present).astype(np.float64)
        ranks = np.cumsum(present, dtype=np.uint32)[r2i]
    else:
        values, ranks = np.unique(r2s, return_inverse=True)
        ranks = (ranks.ravel() + 1).astype(np.uint32)
    if cand.size == 0 or out.size == 0:
        return out, values
    n0, n1, n2 = d2.shape
    ci, rem = np.divmod(cand, n1 * n2)
    cj, ck = np.divmod(rem, n2)
    g = BITS_SLAB
    start, lists, ext = k.slab_lists_par(ci, r2s, ranks, values.size, float(wi[0]),
                                         int(box_lo[0]), int(box_hi[0]), g)
    lo = [int(v) for v in box_lo]
    hi = [int(v) for v in box_hi]
    if not small:
        # squared radii beyond the integer tables: half-widths by search, no disc skip
        k.paint_bits(start, lists, ext, ci, cj, ck, r2s, ranks, *(float(w) for w in wi),
                     *lo, *hi, g, out)
        return out, values
    rmax = int(values[-1])
    r2i = r2s.astype(np.int64)
    need2 = disc_need_table(rmax, wi[1], wi[2])
    if uphill is None:
        ustart, ucode = k.uphill_lists(d2, ci, cj, ck)
        skipm = k.disc_skip_masks(ext, r2i, ustart, ucode, need2, wi[0])
    else:
        # balls of < 32 slices use the masks; larger ones test each disc against their
        # lists of uphill neighbours
        skipm = k.disc_skip_masks_bits(d2, ci, cj, ck, uphill, ext, ranks,
                                       values.astype(np.int64), need2, wi[0])
        if ext.size and ext.max() >= 32:
            ustart, ucode = k.uphill_from_bits(d2, ci, cj, ck, uphill)
        else:
            ustart, ucode = np.zeros(cand.size + 1, np.int64), np.zeros(0, np.int64)
    k.paint_bits_int(start, lists, ext, ci, cj, ck, r2i, ranks, wi[0], wi[1],
                     half_table(rmax, wi[1]), half_table(rmax, wi[2]), ustart, ucode, need2,
                     skipm, *lo, *hi, g, out)
    return out, values


def finish(ranks: np.ndarray, values: np.ndarray, scale: float = 1.0) -> np.ndarray:
    """Float32 diameter from a rank map (``_tables.diameter_lut``), 0 where rank is 0."""
    lut = diameter_lut(values, scale)
    return _kernels().finish_lut(ranks, lut, np.empty(ranks.shape, np.float32))


def memory_bytes(shape) -> int:
    """Peak host memory of a call on a ``shape`` block, bound for any phase (see
    ``thickness.thickness_memory_bytes``): per voxel the bool input, two float64
    distance passes, the uint32 prune mask and rank map, the float32 result and the
    kept centres' arrays (every voxel kept), plus the tables (bounded by their caps)."""
    n = math.prod(shape)
    per_voxel = 1 + 8 + 8 + 4 + 4 + 4 + _PER_CENTRE
    return int(n * per_voxel + _TABLE_BYTES)


# Bytes per kept centre in paint: flat index, three coordinates, D2, integer D2 (int64);
# rank, uphill bits, slab-list entry and extent; disc-skip mask (uint64).
_PER_CENTRE = 8 * 6 + 4 * 4 + 8
# Painting tables at their largest (INT_TABLE_MAX): disc thresholds (9 rows) and two
# half-width tables, int64; plus the pruning table (level lookup and offsets).
_TABLE_BYTES = 8 * 11 * (INT_TABLE_MAX + 1) + 8 * (2**24) + 2_000_000 * 40
