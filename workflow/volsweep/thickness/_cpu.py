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
import threading
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

import numpy as np

from volsweep.backend import cpu_threads

from . import _tables
from ._clock import PART_DONE
from ._tables import (EXACT_LIMIT, FAR_RIDGE, FAR_STEP, GROUP_SPAN, INT_TABLE_MAX, LEVEL_LUT_MAX,
                      cap_limit, diameter_lut, disc_need_far, disc_need_table, far_columns,
                      far_min_r2, half_table, held_table, level_lut, prune_table, with_far_buckets)

# float32 holds integers exactly up to 2**24: edt's float32 squared output is exact below it.
_F32_EXACT = float(2**24)
# Pruning compares squares of sums of squared lengths: exact in float64 below this length.
_PRUNE_EXACT = float(2**25)


@functools.cache
def _kernels():
    """The module of numba kernels (compiled on first use, cached on disk)."""
    from volsweep.progress import compile_notice

    compile_notice(Path(__file__).with_name("_numba.py"), "local-thickness CPU kernels", "5-15 s")
    from volsweep.thickness import _numba as _thickness_numba

    return _thickness_numba


_POOL_LOCK = threading.Lock()
_POOL: list = []


def _pool(n: int) -> ThreadPoolExecutor:
    with _POOL_LOCK:
        if not _POOL or _POOL[0][0] != n:
            if _POOL:
                _POOL.pop()[1].shutdown(wait=False)
            _POOL.append((n, ThreadPoolExecutor(n, thread_name_prefix="volsweep-thickness")))
        return _POOL[0][1]


def _run(fn, n: int, *args, tasks_per_thread: int = 4) -> list:
    """``[fn(*args, lo, hi) for (lo, hi) in parts of range(n)]``, the parts on a thread pool.

    The kernels are serial and release the GIL; every part writes its own output range,
    so the result does not depend on the number of threads.  The parts are reported as
    they finish to ``_clock.PART_DONE``'s callable, when a call's progress has set one.
    """
    nt = cpu_threads()
    report = PART_DONE.get()
    if nt == 1 or n <= 1:
        out = [fn(*args, 0, n)]
        if report is not None:
            report(1, 1)
        return out
    parts = min(n, nt * tasks_per_thread)
    bounds = [n * p // parts for p in range(parts + 1)]
    pool = _pool(nt)
    futs = [pool.submit(fn, *args, lo, hi) for lo, hi in zip(bounds[:-1], bounds[1:]) if hi > lo]
    if report is not None:
        for done, _ in enumerate(as_completed(futs), 1):
            report(done, len(futs))
    return [f.result() for f in futs]


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
    if method not in ("numba", "edt"):
        raise ValueError(f"method must be 'edt' or 'numba', got method={method!r}")
    phase = np.ascontiguousarray(phase, dtype=bool)
    wx, wy, wz = (float(w) for w in weights)
    if phase.all():
        return np.full(phase.shape, np.inf)
    if method == "edt":
        import edt

        # a uint8 view (no copy): edt is faster on it than on bool
        d2 = edt.edtsq(phase.view(np.uint8), anisotropy=(wx, wy, wz), black_border=False,
                       parallel=cpu_threads()).astype(np.float64)
        if d2.max() >= _F32_EXACT:
            raise ValueError("edt's float32 output is not exact beyond 2**24: use method='numba'")
        return d2
    if max(weights) > 2**31:
        raise ValueError(f"lattice weights {tuple(weights)} too large")
    k = _kernels()
    a = _scratch("edt_axis0", phase.shape, pass_type(phase.shape, weights))
    b = _scratch("edt_d2", phase.shape, np.float64)
    _run(k.edt_axis0, phase.shape[1], phase, wx, a)
    maxima = _run(k.edt_axis12, phase.shape[0], a, wy, wz, b)
    # the largest finite value of this thread's distance map, for candidates()
    _SCRATCH.d2max = (b, max(maxima))
    return b


def pass_type(shape, weights):
    """The float type that holds the distance map between its passes (after axis 0, and
    each plane after axis 1): float32 where every such value and every step term of the
    axis-1 searches, which run in it (``GROUP_SPAN + 1`` weights along axis 1), is an
    integer below 2**24, so exact; float64 otherwise.  Half the bytes to write and read,
    twice the lanes.  (The axis-2 searches run in float64.)

    >>> pass_type((800, 800, 200), (1, 1, 1)).__name__, pass_type((4000, 4000, 9), (1, 1, 1)).__name__
    ('float32', 'float64')
    """
    n0, n1 = shape[0], shape[1]
    w0, w1, w2 = (float(w) for w in weights)
    exact = (((n0 - 1) * w0) ** 2 + ((n1 - 1) * w1) ** 2 < _F32_EXACT
             and ((GROUP_SPAN + 1) * w1) ** 2 < _F32_EXACT)
    return np.float32 if exact else np.float64


def _finite_max(d2: np.ndarray) -> float:
    arr, value = getattr(_SCRATCH, "d2max", (None, 0.0))
    if arr is d2:
        return value
    fin = d2[np.isfinite(d2)]
    return float(fin.max()) if fin.size else 0.0


def centre_r2(d2: np.ndarray, cand: np.ndarray, extra=None) -> np.ndarray:
    """``d2`` at the flat indices ``cand`` (``d2.reshape(-1)[cand]``, on the thread pool).

    ``extra``: :func:`candidates`' saturated map, where given: read first (an eighth of
    the bytes), and ``d2`` only where it is saturated.
    """
    out = np.empty(cand.size, d2.dtype)
    if extra is None:
        _run(_kernels().take, cand.size, d2.reshape(-1), cand, out)
    else:
        _run(_kernels().take_unsaturated, cand.size, d2.reshape(-1), extra.reshape(-1), cand,
             out)
    return out


def candidates(d2: np.ndarray, weights, box_lo, box_hi, r2keep: float):
    """Flat indices (sorted) of the ball centres that survive pruning, and ``d2``
    saturated to :func:`saturated_type` (written as pruning reads ``d2``), from which the
    max painter reads the centres' neighbours: an eighth of the bytes to move.

    (The GPU's candidates return the flat indices and None; its painters read each
    centre's uphill neighbours from ``d2``.)  The map is this thread's work array,
    overwritten by the next call.
    """
    k = _kernels()
    wx, wy, wz = (float(w) for w in weights)
    r2need = _finite_max(d2)
    levels, need, r2cap = prune_table(r2need, weights)
    levlut = level_lut(levels, r2cap, weights)
    # the continuous containment test beyond the table is exact below _PRUNE_EXACT; above,
    # a relative slack makes it prune only balls that are certainly contained
    eps = 0.0 if r2need < _PRUNE_EXACT else 1e-9
    # balls inside a farther ball on their ray (a solid with few pores keeps most voxels
    # as centres otherwise) are dropped by prune itself (far_container); each task keeps
    # the containers of a plane's row before in the plane of its first row (the others
    # are never touched, so np.zeros maps no memory for them)
    # likewise each task's rows of its neighbours' largest D2 (_numba._row_actions)
    mask = _scratch("prune_mask", d2.shape, np.uint8)
    d2sat = _scratch("d2_saturated", d2.shape, saturated_type(weights))
    _run(k.prune, d2.shape[0], d2, wx, wy, wz, eps, *[int(v) for v in box_lo],
         *[int(v) for v in box_hi], float(r2keep), levels, need, r2cap, levlut,
         held_table(levels, need, levlut, r2need), far_min_r2(weights),
         far_min_r2(weights, _tables.FAR_FIRST_RADIUS), FAR_STEP, FAR_RIDGE,
         cap_limit(weights), np.zeros((d2.shape[0], d2.shape[2], 3), np.int32),
         np.zeros((d2.shape[0], _PRUNE_ROWS, d2.shape[2]), np.float64), mask, d2sat)
    counts = np.zeros(d2.shape[0] + 1, np.int64)
    _run(k.count_kept, d2.shape[0], mask, counts[1:])
    offsets = np.cumsum(counts)
    cand = np.empty(int(offsets[-1]), np.int64)
    _run(k.gather_kept, d2.shape[0], mask, offsets, cand)
    return cand, d2sat


# Output planes per slab of the painter (one slab per task): BITS_SLAB, or fewer (down to
# MIN_SLAB) where that leaves each thread fewer than SLABS_PER_THREAD slabs.
BITS_SLAB = 16
MIN_SLAB = 4
SLABS_PER_THREAD = 2
# Slabs of fewer planes list only the balls with a visible disc in them (slab_lists), and
# so do slabs of any size where the balls reach more than MASKED_LISTS_ABOVE slabs each on
# average (slabs_per_ball): at 11.8 and 26.1 slabs a ball (solids with 6 pores of 256^3 and
# 800x800x200) that made whole calls 1.06-1.09x and 1.21-1.25x faster on 2 cores, at 3.4-6.5 (the
# 128^3 cases, 192^3 spheres) 0.97-0.99x.
MASKED_LISTS_BELOW = BITS_SLAB
MASKED_LISTS_ABOVE = 8.0
# The ordered painter marks a slab's background voxels assigned (_numba._mark_background,
# a read of its distance map), so that the planes, rows and slab holding them finish,
# only where the slab lists a ball for at most this many of its voxels: one of few balls
# finishes no sooner for it (PoreSpy's 250^3 blobs at 0.6 / 1 and 0.5 / 1, 6,943 and 885
# large balls, ran 0.94x and 0.88x as fast with every slab marked).
MARK_VOXELS_PER_BALL = 64
# The slab lists are counted and filled in up to this many parts of the balls per thread.
LIST_PARTS_PER_THREAD = 4


def _slab_planes(planes: int) -> int:
    """Planes per slab of the painter for a box of ``planes`` output planes."""
    return max(MIN_SLAB, min(BITS_SLAB, -(-planes // (SLABS_PER_THREAD * cpu_threads()))))


# Rank maps that only the max painter paints are of the smallest of these unsigned types
# that holds every rank (a narrower map is less memory for its rows to sweep).
MAX_PAINTER_RANKS = (np.uint8, np.uint16, np.uint32)
# Balls of a smaller radius (in finest lattice weights) are painted by max in memory order
# (paint_max), after the larger ones in painting order: below it, sorting a ball and its
# assigned bits cost more than the max painter's rows, which its row window (up to 31
# voxels a row, so radii below 16) makes cheap.
MAX_PAINT_RADIUS = 16
# int64 work values a max painter's task keeps (its best D2 per neighbour class, its row
# clips), one row per output plane (the task starting there takes it)
_MAX_PAINTER_WORK = 12 + 6


def paint(d2: np.ndarray, cand: np.ndarray, weights, box_lo, box_hi, extra=None, *, r2s=None):
    """Rank map of the box [lo, hi) and the sorted distinct D2 values it indexes.

    The map is uint32, or where the max painter alone paints (every ball below
    ``MAX_PAINT_RADIUS``) the narrowest of ``MAX_PAINTER_RANKS`` that holds every rank.

    ``out[x] = r`` means the largest D2(p) among the candidate balls covering x is
    ``values[r - 1]``; 0 = not covered.  Balls are painted in decreasing D2 with one
    "assigned" bit per voxel and a count of unassigned voxels per node: balls over
    finished nodes are skipped whole, and discs inside an uphill neighbour's disc are
    skipped (the uphill neighbours read from ``d2``, or by the max painter from ``extra``,
    :func:`candidates`' saturated map, where given).  ``r2s``:
    ``d2`` at ``cand``, when the caller has it.  The result is this thread's work array,
    overwritten by the next call.
    """
    k = _kernels()
    wi = tuple(int(w) for w in weights)
    shape = tuple(int(h - l) for l, h in zip(box_lo, box_hi))
    cand = np.ascontiguousarray(cand, dtype=np.int64)
    if r2s is None:
        r2s = centre_r2(d2, cand)
    small = cand.size and r2s.max() < EXACT_LIMIT
    if small:
        r2i = r2s.astype(np.int64)
        # the tables indexed by squared length stop at INT_TABLE_MAX; the kernels compute
        # the values beyond them (large lattice weights put even small balls there)
        # exact integers: rank_lut[B] = how many values are <= B, by counting (no sort)
        # up to the tables' end; the values past it, if any, by a sort
        top = int(r2i.max())
        within = top < INT_TABLE_MAX  # every squared radius inside the tables
        present = np.zeros(top + 1 if within else INT_TABLE_MAX, np.bool_)
        present[r2i if within else r2i[r2i < present.size]] = True
        rank_lut = np.cumsum(present, dtype=np.uint32)
        if within:
            values = np.flatnonzero(present).astype(np.float64)
        else:
            values = np.unique(r2s)
    else:
        values, ranks = np.unique(r2s, return_inverse=True)
        ranks = (ranks.ravel() + 1).astype(np.uint32)
    if cand.size == 0 or math.prod(shape) == 0:
        out = _scratch("paint_ranks", shape, np.uint32)
        out[...] = 0
        return out, values
    n0, n1, n2 = d2.shape
    lo = [int(v) for v in box_lo]
    hi = [int(v) for v in box_hi]
    g = _slab_planes(hi[0] - lo[0])
    if not small:
        # squared radii beyond exact integers: half-widths by search, no disc skip
        ci, rem = np.divmod(cand, n1 * n2)
        cj, ck = np.divmod(rem, n2)
        ext = _half_extent(r2s, wi[0])
        order = k.paint_order(ranks, np.zeros(cand.size, np.uint8), int(values.size))
        ci, cj, ck, r2s, ranks, ext = (a[order] for a in (ci, cj, ck, r2s, ranks, ext))
        # no disc masks here: each ball paints every slab it reaches
        start, lists = slab_lists(ci, ext, lo[0], hi[0], g)
        out = _scratch("paint_ranks", shape, np.uint32)
        _run(k.paint_bits, start.size - 1, start, lists, ext, ci, cj, ck, r2s, ranks,
             *(float(w) for w in wi), *lo, *hi, g, out, tasks_per_thread=start.size - 1)
        return out, values
    rmax = int(values[-1])
    tab = min(rmax, rank_lut.size - 1)  # the tables' last squared length
    need2 = disc_need_table(tab, wi[1], wi[2])
    vals = values.astype(np.int64)
    # past the tables (large lattice weights put even small balls there) the disc needs
    # come from the far table with its bucket index (_tables.with_far_buckets)
    far = None
    if rmax > tab:
        far = with_far_buckets(disc_need_far(rmax, wi[1], wi[2], (n1, n2)))
    # the thresholds of the balls of < 32 slices (at most TH_MAX_VALUES)
    nsmall = int(np.searchsorted(vals, (32 * wi[0]) ** 2, side="right"))
    nsmall = min(nsmall, TH_MAX_VALUES)
    th = disc_thresholds(vals[:nsmall], need2, wi[0], far)
    # small balls (with thresholds) are max-painted in memory order, the others in
    # painting order
    r2lim = min((MAX_PAINT_RADIUS * min(wi)) ** 2, int(vals[nsmall - 1]) + 1 if nsmall else 0)
    # the max painter alone: the narrowest ranks that fit
    out = _scratch("paint_ranks", shape, _rank_type(values.size) if rmax < r2lim else np.uint32)
    if rmax >= r2lim:
        big = r2i >= r2lim
        everything = bool(big.all())
        # the ordered painter's masks take thresholds within the tables only (past them its
        # plane-by-plane test is faster on a solid with pores)
        ntab = int(np.searchsorted(vals[:nsmall], tab, side="right"))
        _paint_ordered(d2, cand if everything else cand[big], r2i if everything else r2i[big],
                       rank_lut, vals, th[:ntab], need2, tab, far, wi, lo, hi, out)
        if everything:
            return out, values
    else:
        out[...] = 0
    hmax = int(_half_extent(np.array([min(rmax, r2lim - 1)], np.float64), wi[0])[0])
    near = d2 if extra is None else extra  # where the centres' neighbours are read
    _run(k.paint_max, out.shape[0], near, cand, r2i, r2lim, rank_lut, vals,
         half_table(min(tab, r2lim - 1), wi[0]), half_table(tab, wi[1]), half_table(tab, wi[2]),
         far, th, disc_mask_lut(wi, MASK_LUT_BYTES), wi[0], wi[1], wi[2], *lo, *hi, hmax, out,
         np.empty((out.shape[0], _MAX_PAINTER_WORK), np.int64),
         tasks_per_thread=max_painter_tasks(out.shape[0], hmax, cpu_threads()))
    return out, values


def saturated_type(weights):
    """The integer type of the saturated distance map that the max painter reads
    (:func:`candidates`' second result): the narrowest that holds every squared radius
    it paints, below ``(MAX_PAINT_RADIUS * min(weights))**2``, up to uint16.  Its largest
    value stands for itself and anything above: a neighbour read lower than it is looks
    smaller or not uphill, which hides fewer discs, so the map is exact at any type.

    >>> saturated_type((1, 1, 1)).__name__, saturated_type((2, 2, 3)).__name__
    ('uint8', 'uint16')
    """
    r2lim = (MAX_PAINT_RADIUS * min(int(w) for w in weights)) ** 2
    return np.uint8 if r2lim - 1 <= np.iinfo(np.uint8).max else np.uint16


def _rank_type(nvalues: int):
    """The narrowest of MAX_PAINTER_RANKS that holds the ranks 0..nvalues.

    >>> _rank_type(255).__name__, _rank_type(256).__name__
    ('uint8', 'uint16')
    """
    return next(t for t in MAX_PAINTER_RANKS if nvalues <= np.iinfo(t).max)


def max_painter_tasks(planes: int, hmax: int, threads: int) -> int:
    """Tasks per thread of the max painter over ``planes`` output planes on ``threads``
    threads, its balls' half extent at most ``hmax`` planes.

    A task sets up every ball that reaches its planes, so a ball is set up once per task
    it reaches: two tasks a thread balance the load where each still holds at least the
    2 hmax + 1 planes a ball spans, one elsewhere (many threads, thin tasks).

    Examples
    --------
    >>> max_painter_tasks(250, 10, 2), max_painter_tasks(250, 10, 16)  # 62 or 8 planes a task
    (2, 1)
    """
    return 2 if planes >= 2 * threads * (2 * hmax + 1) else 1


def _paint_ordered(d2, cand, r2i, rank_lut, vals, th, need2, tab, far, wi, lo, hi, out):
    """Paint the balls of ``cand`` into ``out`` (all of it written) in decreasing D2 with
    assigned bits (paint_bits_int), skipping the discs inside uphill neighbours' discs.
    ``tab``: the tables' last squared length (``rank_lut``'s, which ``need2`` covers);
    ``far``: the disc needs past it (with its bucket row), None when ``vals`` stay within
    it."""
    k = _kernels()
    n0, n1, n2 = d2.shape
    rmax = int(vals[-1])
    if rmax <= tab:
        ci, cj, ck, ext = (np.empty(cand.size, np.int64) for _ in range(4))
        ranks = np.empty(cand.size, np.uint32)
        _run(k.centre_arrays, cand.size, cand, r2i, rank_lut, half_table(rmax, wi[0]), n1, n2,
             ci, cj, ck, ranks, ext)
    else:
        ci, rem = np.divmod(cand, n1 * n2)
        cj, ck = np.divmod(rem, n2)
        ranks = (np.searchsorted(vals, r2i) + 1).astype(np.uint32)
        ext = _half_extent(r2i.astype(np.float64), wi[0])
    # discs inside uphill neighbours' discs (one bit per plane of each ball), and the
    # balls whose every disc is (not painted at all)
    moff = np.zeros(cand.size + 1, np.int64)
    np.cumsum((2 * ext + 64) // 64, out=moff[1:])
    masks = np.empty(int(moff[-1]), np.uint64)
    hidden = np.empty(cand.size, np.uint8)
    _run(k.disc_skip_masks_bits, cand.size, d2, ci, cj, ck, ext, ranks, vals, th,
         disc_mask_lut(wi, MASK_LUT_BYTES), need2, far, wi[0], wi[1], wi[2], lo[0], hi[0], moff,
         masks, hidden)
    # the painted centres' arrays in painting order, and the slab lists that index them
    order = k.paint_order(ranks, hidden, int(vals.size))
    src = (ci, cj, ck, r2i, ranks, ext, moff)
    dst = tuple(np.empty(order.size, v.dtype) for v in src)
    _run(k.gather_order, order.size, order, *src, *dst)
    ci, cj, ck, r2i, ranks, ext, moff = dst
    g = _slab_planes(hi[0] - lo[0])
    # thin slabs (many threads) or large balls: a ball reaches many slabs, and the lists'
    # test of its masks saves the painter more than it costs; otherwise the painter tests
    # them cheaper
    masked = (g < MASKED_LISTS_BELOW
              or slabs_per_ball(ci, ext, lo[0], hi[0], g) > MASKED_LISTS_ABOVE)
    start, lists = (slab_lists(ci, ext, lo[0], hi[0], g, masks, moff) if masked
                    else slab_lists(ci, ext, lo[0], hi[0], g))
    nslab = start.size - 1
    _run(k.paint_bits_int, nslab, start, lists, ext, ci, cj, ck, r2i, ranks, wi[0], wi[1], wi[2],
         half_table(tab, wi[1]), half_table(tab, wi[2]), far, masks, moff, d2,
         MARK_VOXELS_PER_BALL, *lo, *hi, g, bool(ext.size and ext.max() >= k.TRACK_EXT), out,
         tasks_per_thread=nslab)


def slabs_per_ball(ci, ext, lo0, hi0, g) -> float:
    """The mean number of slabs of ``g`` planes from ``lo0`` (up to ``hi0``) that the balls
    (centre planes ``ci``, half extents ``ext``) reach: the entries per ball of unmasked
    slab lists.

    >>> slabs_per_ball(np.array([3, 5, 20]), np.array([4, 0, -1]), 0, 8, 4)  # 2, 1 and 0
    1.0
    """
    if ci.size == 0:
        return 0.0
    first = np.maximum(ci - ext, lo0)
    last = np.minimum(ci + ext, hi0 - 1)
    reach = (last - lo0) // g - (first - lo0) // g + 1
    return float(np.where((ext >= 0) & (first <= last), reach, 0).mean())


def slab_lists(ci, ext, lo0, hi0, g, masks=None, moff=None):
    """Per slab of ``g`` output planes, the positions of the centres whose ball reaches it.

    ``lists[start[sl]:start[sl + 1]]`` holds slab sl's balls, increasing (the centre arrays
    are in painting order).  ``ext`` is each ball's half extent along axis 0.  With disc
    masks (``moff[t]``: ball t's first word in ``masks``, a bit per plane set when its
    disc is hidden, as from disc_skip_masks_bits) a ball is listed only in the slabs where
    a disc of it is visible; without, in every slab it reaches.  The balls are counted
    and listed in parts on the thread pool; the slabs take the parts in order.

    Examples
    --------
    Ball 0 (planes 0-7) reaches both slabs of 4 planes, ball 1 (plane 5) the second:

    >>> start, lists = slab_lists(np.array([3, 5]), np.array([4, 0]), 0, 8, 4)
    >>> start.tolist(), lists.tolist()
    ([0, 1, 3], [0, 0, 1])

    Ball 0's discs in planes 0-3 are hidden (bits 1-4 of its mask: bit d + 4 for plane offset d),
    so the first slab does not list it:

    >>> masks, moff = np.array([0b11110, 0], np.uint64), np.array([0, 1])
    >>> slab_lists(np.array([3, 5]), np.array([4, 0]), 0, 8, 4, masks, moff)[1].tolist()
    [0, 1]
    """
    if moff is None:
        masks, moff = np.empty(0, np.uint64), np.empty(0, np.int64)
    k = _kernels()
    n = ci.size
    nslab = max((hi0 - lo0 + g - 1) // g, 0)
    parts = max(min(n, LIST_PARTS_PER_THREAD * cpu_threads()), 1)
    bounds = np.array([n * p // parts for p in range(parts + 1)], np.int64)
    counts = np.zeros((parts, nslab), np.int64)
    args = (ci, ext, lo0, hi0, g, masks, moff, bounds)
    _run(k.slab_counts, parts, *args, counts)
    # position of part p's first ball in slab sl: the slabs before sl, then sl's parts before p
    order = counts.T.ravel()
    start = np.zeros(nslab + 1, np.int64)
    np.cumsum(counts.sum(axis=0), out=start[1:])
    fill = (np.cumsum(order) - order).reshape(nslab, parts).T.copy()
    lists = np.empty(int(start[-1]), np.int64)
    _run(k.slab_fill, parts, *args, fill, lists)
    return start, lists


def _half_extent(r2s: np.ndarray, w: int) -> np.ndarray:
    """The largest h >= 0 with (h*w)^2 < r2 for each exact-integer r2 (-1 if none), int64."""
    h = np.floor(np.sqrt(r2s) / w).astype(np.int64)
    for _ in range(2):
        up = ((h + 1) * float(w)) ** 2 < r2s
        h += up
        h -= (h * float(w)) ** 2 >= r2s
    return np.maximum(h, -1)


def disc_thresholds(vals: np.ndarray, need2: np.ndarray, w: int, far=None) -> np.ndarray:
    """th[r, c, d + h]: the disc at plane offset d of a ball of D2 = vals[r] (h < 32 its half
    extent) lies inside the disc of a neighbour of class c = (ex + 1) * 4 + |ey| * 2 + |ek|
    iff D2(q) > th (see the kernel disc_skip_masks_bits); 0 past the ball's planes.  Needs
    past ``need2``'s end come from ``far`` (``_tables.with_far_buckets``), which a ``vals``
    past the table requires.

    Examples
    --------
    >>> from volsweep.thickness._tables import disc_need_table
    >>> th = disc_thresholds(np.array([4]), disc_need_table(4, 1, 1), 1)
    >>> th[0, 0, :4].tolist()  # D2 = 4 (h = 1); class 0: the neighbour one plane behind
    [2, 3, 6, 0]
    """
    vals = np.ascontiguousarray(vals, dtype=np.int64)
    th = np.empty((vals.size, 12, 64), np.int64)
    h = _half_extent(vals.astype(np.float64), w)
    if far is None and vals.size and vals[-1] >= need2.shape[1]:
        raise ValueError(f"disc_thresholds: vals up to {int(vals[-1])} past the table's "
                         f"{need2.shape[1]} columns need far")
    _run(_kernels().disc_thresholds, vals.size, vals, h, need2, far, int(w), th)
    return th


# Bytes of the disc-mask table (disc_mask_lut): it stays in a core's L2 cache.
MASK_LUT_BYTES = 512 * 1024
# Distinct squared radii with disc thresholds (disc_thresholds: 6 KiB each); balls past
# them take the masks' plane-by-plane test and the ordered painter.
TH_MAX_VALUES = 4096


@functools.lru_cache(maxsize=16)
def disc_mask_lut(weights, nbytes: int | None = None) -> np.ndarray:
    """lut[a, c, δ]: the discs of a ball of D2 = a hidden by its uphill neighbours of
    class c when their largest D2 is a + δ, as the mask bits (d + h) of disc_thresholds.

    The masks only grow with δ: column w - 1 holds every disc the class can hide (larger
    δ read it) and the last column, w, is 0 (no neighbour of the class).  The table covers
    the a < A of the largest A whose table fits ``nbytes`` (``MASK_LUT_BYTES``); the
    kernels test the thresholds for larger balls.

    Examples
    --------
    A ball of D2 = 5 spans 5 planes; its neighbour one plane ahead (class 8) with the
    same D2 hides the two discs ahead of the centre, one with D2 = 6 the centre's too:

    >>> lut = disc_mask_lut((1, 1, 1))
    >>> bin(lut[5, 8, 0]), bin(lut[5, 8, 1])
    ('0b11000', '0b11100')
    """
    nbytes = MASK_LUT_BYTES if nbytes is None else nbytes
    w0 = int(weights[0])
    amax = min((32 * w0) ** 2, nbytes // (12 * 8 * 3))
    if amax < 2:
        return np.zeros((0, 12, 1), np.uint64)
    need2 = disc_need_table(amax - 1, int(weights[1]), int(weights[2]))
    a = np.arange(amax, dtype=np.int64)
    th = disc_thresholds(a, need2, w0)
    h = _half_extent(a.astype(np.float64), w0)
    valid = np.arange(64)[None, :] <= 2 * h[:, None]
    # per a, the columns its masks need: delta up to the largest threshold - a
    width = np.where(valid[:, None, :], th - a[:, None, None], 0).max(axis=(1, 2)) + 2
    width = np.maximum.accumulate(width)
    fits = a * 12 * (width + 1) * 8 <= nbytes
    count = int(np.flatnonzero(fits)[-1]) if fits.any() else 0
    w = int(width[max(count - 1, 0)])
    rq = a[:count, None] + np.arange(w)[None, :]                      # (A, w)
    hid = (rq[:, None, :, None] > th[:count, :, None, :]) & valid[:count, None, None, :]
    lut = np.zeros((count, 12, w + 1), np.uint64)
    lut[:, :, :w] = (hid.astype(np.uint64) << np.arange(64, dtype=np.uint64)).sum(axis=-1)
    return lut


def finish(ranks: np.ndarray, values: np.ndarray, scale: float = 1.0) -> np.ndarray:
    """Float32 diameter from a rank map (``_tables.diameter_lut``), 0 where rank is 0."""
    lut = diameter_lut(values, scale)
    out = np.empty(ranks.shape, np.float32)
    _run(_kernels().finish_lut, ranks.shape[0], ranks, lut, out)
    return out


def memory_bytes(shape, weights=(1, 1, 1)) -> int:
    """Peak host memory of a call on a ``shape`` block, bound for any phase (see
    ``thickness.thickness_memory_bytes``): per voxel the bool input, the distance map
    between its passes (:func:`pass_type`) and after them (float64), the uint8 prune
    mask, the saturated distance map (at most uint16), the rank map (at most uint32), the
    float32 result and the kept centres' arrays (every voxel kept), plus the tables
    (bounded by their caps) and the disc needs past them (``_tables.far_columns`` of the
    lattice ``weights``)."""
    n = math.prod(shape)
    passes = np.dtype(pass_type(shape, weights)).itemsize
    per_voxel = 1 + passes + 8 + 1 + 2 + 4 + 4 + _PER_CENTRE
    return int(n * per_voxel + _TABLE_BYTES + _FAR_COLUMN_BYTES * far_columns(shape, weights)
               + 8 * _MAX_PAINTER_WORK * shape[0] + 8 * _PRUNE_ROWS * shape[0] * shape[2])


# Bytes per kept centre in paint: flat index, three coordinates, D2, integer D2 (int64);
# rank, slab-list entry and extent; disc-skip mask (uint64).
_PER_CENTRE = 8 * 6 + 4 * 3 + 8
# float64 rows per plane of prune's work (_numba._row_actions: x of three rows, y, z, the
# actions, the columns left to the per-voxel tests)
_PRUNE_ROWS = 7
# Painting tables at their largest (INT_TABLE_MAX): disc thresholds (9 rows) and two
# half-width tables, int64; the pruning table (level lookup, and its build) and its
# inverse (held_table: 7 rows, 2 more while it is built); the disc masks; the disc
# thresholds.
_TABLE_BYTES = (8 * 11 * (INT_TABLE_MAX + 1) + 8 * LEVEL_LUT_MAX + _tables.PRUNE_TABLE_BUILD_BYTES
                + 8 * (7 + 2) * _tables.HELD_TABLE_MAX + MASK_LUT_BYTES
                + 8 * 12 * 64 * TH_MAX_VALUES)
# disc_need_far: building it takes its 6 int64 rows and the quarter disc's sorts (12 rows at
# the peak, one more for the arrays' headers and small temporaries); adding the bucket index
# (far_buckets) holds the 6 rows, the 7 of the copy and 2 of temporaries.
_FAR_COLUMN_BYTES = 8 * 15
