"""CPU kernels of exact local thickness: squared EDT, centre pruning, ball painting.

Every squared distance in volsweep's local thickness is the *canonical* float64
expression of an offset ``(di, dj, dk)`` at spacing ``(sx, sy, sz)``::

    ((di*sx)*(di*sx) + (dj*sy)*(dj*sy)) + (dk*sz)*(dk*sz)

evaluated in exactly this order, with no fused multiply-add.  The distance
transform adds its per-axis terms in the same order (axis 0, then 1, then 2),
the painting compares offsets with the same expression, and so do the GPU
kernels and the test oracle.  At integer spacing every value is an exact
integer; at other spacings ties (``|x - p| == D(p)``) are decided identically
everywhere, so the CPU and GPU results are bit-identical.

numba and edt are imported lazily: the GPU path needs neither.
"""

from __future__ import annotations

import functools
import math
import os
import threading

import numpy as np

# float32 holds integers exactly up to 2**24: edt's float32 squared output is exact below it.
_F32_EXACT = float(2**24)


def _threads() -> int:
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


@functools.cache
def _kernels():
    """The module of numba kernels (compiled once, cached on disk)."""
    import numba

    from volsweep import _thickness_numba

    numba.set_num_threads(min(numba.config.NUMBA_NUM_THREADS, _threads()))
    return _thickness_numba


# Work arrays reused from call to call (per thread, one set for the last shape): a fresh
# 125 MB array costs about 0.1 s of page faults at 250^3, and callers in a loop (the
# simulated-annealing user) call with one shape.  Only arrays that never leave a call
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


def release_scratch() -> None:
    """Drop this thread's reused work arrays (they are rebuilt on the next call)."""
    _SCRATCH.arrays = {}


def is_integer_spacing(spacing) -> bool:
    return all(float(s).is_integer() for s in spacing)


def edt_sq(phase: np.ndarray, spacing, *, method: str = "auto", reuse: bool = False) -> np.ndarray:
    """Canonical squared distance (float64) from each voxel to the nearest background voxel.

    Background voxels get 0; without any background in the array every voxel is ``inf``.
    ``method="edt"`` uses the edt package (exact only at integer spacing with
    values below 2**24); ``"numba"`` (what ``"auto"`` picks) the canonical
    separable passes of this module.  ``reuse=True`` returns this thread's work
    array (overwritten by the next such call): for callers that drop it within the call.
    """
    phase = np.ascontiguousarray(phase, dtype=bool)
    sx, sy, sz = (float(s) for s in spacing)
    bound = sum((n * s) ** 2 for n, s in zip(phase.shape, (sx, sy, sz)))
    if method == "auto":
        # The numba passes are exact at every spacing, and on a 2-core machine they took
        # 0.59-0.76 s of CPU at 250^3 against 1.03-1.13 s for edt (plus its float64 copy).
        method = "numba"
    if not (~phase).any():
        return np.full(phase.shape, np.inf)
    if method == "edt":
        import edt

        d2 = edt.edtsq(phase, anisotropy=(sx, sy, sz), black_border=False,
                       parallel=_threads()).astype(np.float64)
        return d2
    if method != "numba":
        raise ValueError(f"method must be 'auto', 'edt' or 'numba', got method={method!r}")
    k = _kernels()
    a = _scratch("edt_axis0", phase.shape, np.float64)
    b = _scratch("edt_d2", phase.shape, np.float64) if reuse else np.empty(phase.shape, np.float64)
    k.edt_axis0(phase, sx, a)
    k.edt_axis12(a, sy, sz, b)
    return b


def candidates(d2: np.ndarray, spacing, box_lo, box_hi, r2keep: float, eps: float,
               with_uphill: bool = False):
    """Flat indices (sorted) of the ball centres that survive pruning.

    With ``with_uphill``, also each centre's bits of the 26-neighbours before it in
    the order (D2 descending, flat index ascending), for ``paint(..., uphill=)``.
    """
    k = _kernels()
    sx, sy, sz = (float(s) for s in spacing)
    r2need = float(k.finite_max(d2)) if d2.ndim == 3 else float(
        np.max(d2, where=np.isfinite(d2), initial=0.0))
    levels, need, r2cap = prune_table(r2need, spacing)
    levlut = level_lut(levels, r2cap, spacing)
    mask = _scratch("prune_mask", d2.shape, np.uint32)
    k.prune(d2, sx, sy, sz, float(eps), *[int(v) for v in box_lo],
               *[int(v) for v in box_hi], float(r2keep), levels, need, r2cap, levlut, mask)
    cand, bits = k.kept_centres(mask)
    if with_uphill:
        return cand, bits
    return cand


# Which painter ``paint`` uses: "bits" (balls in decreasing D2, one assigned bit per voxel,
# discs inside an uphill neighbour's disc skipped) or "table" (a sparse table of
# power-of-two spans, all balls in any order, pushed down per plane).  Same result.
PAINT = "bits"
# Output planes per slab of the "bits" painter (one slab per task).
BITS_SLAB = 16


def paint(d2: np.ndarray, cand: np.ndarray, spacing, box_lo, box_hi, method=None, uphill=None,
          reuse: bool = False):
    """Rank map (uint32) of the box [lo, hi) and the sorted distinct D2 values it indexes.

    ``out[x] = r`` means the largest D2(p) among the candidate balls covering x is
    ``values[r - 1]``; 0 = not covered.
    """
    method = PAINT if method is None else method
    if method not in ("bits", "table"):
        raise ValueError(f"method must be 'bits' or 'table', got method={method!r}")
    k = _kernels()
    sx, sy, sz = (float(s) for s in spacing)
    shape = tuple(int(h - l) for l, h in zip(box_lo, box_hi))
    if reuse:  # this thread's work array, overwritten by the next reuse=True call
        out = _scratch("paint_ranks", shape, np.uint32)
        k.zero_fill(out)
    else:
        out = np.zeros(shape, np.uint32)
    n0, n1, n2 = d2.shape
    r2s = d2.reshape(-1)[cand]
    if cand.size and is_integer_spacing(spacing) and r2s.max() < _INT_TABLE_MAX:
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
    ci, rem = np.divmod(cand, n1 * n2)
    cj, ck = np.divmod(rem, n2)
    rx = int(math.sqrt(float(values[-1])) / sx) + 2
    # rowstart[ic * n1 + jc]: first candidate of row (ic, jc) (candidates are sorted).
    if method == "bits":
        g = BITS_SLAB
        start, lists, ext = k.slab_lists_par(ci, r2s, ranks, values.size, sx,
                                                int(box_lo[0]), int(box_hi[0]), g)
        if is_integer_spacing(spacing) and values[-1] < _INT_TABLE_MAX:
            si = tuple(int(s) for s in (sx, sy, sz))
            rmax = int(values[-1])
            r2i = r2s.astype(np.int64)
            need2 = disc_need_table(rmax, si[1], si[2])
            if uphill is None:
                ustart, ucode = k.uphill_lists(d2, ci, cj, ck)
                skipm = k.disc_skip_masks(ext, r2i, ustart, ucode, need2, si[0])
            else:
                # balls of < 32 slices (all, at 250^3) use the masks; larger ones test
                # each disc against their lists of uphill neighbours
                skipm = k.disc_skip_masks_bits(d2, ci, cj, ck, uphill, ext, ranks,
                                                  values.astype(np.int64), need2, si[0])
                if ext.size and ext.max() >= 32:
                    ustart, ucode = k.uphill_from_bits(d2, ci, cj, ck, uphill)
                else:
                    ustart, ucode = np.zeros(cand.size + 1, np.int64), np.zeros(0, np.int64)
            k.paint_bits_int(start, lists, ext, ci, cj, ck, r2i, ranks,
                                si[0], si[1], half_table(rmax, si[1]), half_table(rmax, si[2]),
                                ustart, ucode, need2, skipm,
                                *[int(v) for v in box_lo], *[int(v) for v in box_hi], g, out)
        else:
            k.paint_bits(start, lists, ext, ci, cj, ck, r2s, ranks, sx, sy, sz,
                            *[int(v) for v in box_lo], *[int(v) for v in box_hi], g, out)
        return out, values
    rowstart = np.searchsorted(cand, np.arange(n0 * n1 + 1, dtype=np.int64) * n2)
    k.paint(rowstart, n0, n1, cj, ck, r2s, ranks, sx, sy, sz, *[int(v) for v in box_lo],
               *[int(v) for v in box_hi], rx, 4 * _threads(), out)
    return out, values


# Integer tables are used up to this squared radius (larger: the float path).
_INT_TABLE_MAX = float(2**20)


@functools.lru_cache(maxsize=8)
def _disc_need(r2max: int, sy: int, sz: int) -> np.ndarray:
    qa = math.isqrt(r2max) // sy + 2
    qb = math.isqrt(r2max) // sz + 2
    a, b = np.meshgrid(np.arange(qa, dtype=np.int64), np.arange(qb, dtype=np.int64),
                       indexing="ij")
    norm = ((a * sy) ** 2 + (b * sz) ** 2).ravel()
    order = np.argsort(norm, kind="stable")
    norm = norm[order]
    a = a.ravel()[order]
    b = b.ravel()[order]
    # count[rho] = how many sorted norms are < rho (the disc of rho, one quadrant)
    count = np.searchsorted(norm, np.arange(r2max + 1, dtype=np.int64), side="left")
    need = np.zeros((9, r2max + 1), np.int64)
    for ey in range(2):
        for ek in range(2):
            pm = np.maximum.accumulate(((a + ey) * sy) ** 2 + ((b + ek) * sz) ** 2)
            row = np.where(count > 0, pm[np.maximum(count - 1, 0)], 0)
            row[0] = 0
            need[ey * 3 + ek] = row
    return need


def disc_need_table(r2max: int, sy: int, sz: int) -> np.ndarray:
    """need[|ey|*3 + |ek|, rho] = max of |o + (ey, ek)|^2 (canonical, integer spacing) over the
    disc {o : (o_y*sy)^2 + (o_z*sz)^2 < rho}: that disc shifted by (ey, ek) lies inside the
    disc of rho' iff rho' > need.  (The first axis of the result has 9 rows; 0, 1, 3, 4 are used.)"""
    return _disc_need(int(r2max), int(sy), int(sz))


def half_table(r2max: int, s: int) -> np.ndarray:
    """hw[B] = the largest h >= 0 with (h*s)^2 < B for 1 <= B <= r2max, hw[0] = -1 (int64)."""
    b = np.arange(r2max + 1, dtype=np.int64)
    q = np.maximum(b - 1, 0) // (s * s)  # (h*s)^2 < B  <=>  h^2 <= (B - 1) // s^2
    h = np.floor(np.sqrt(q.astype(np.float64))).astype(np.int64)
    h += (h + 1) * (h + 1) <= q
    h -= h * h > q
    h[0] = -1
    return h


def finish(ranks: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Float32 diameter from a rank map: 2*sqrt(values[rank - 1]), 0 where rank is 0."""
    lut = np.zeros(values.size + 1, np.float32)
    lut[1:] = (2.0 * np.sqrt(values)).astype(np.float32)
    if ranks.ndim == 3 and ranks.size > 1 << 16:
        return _kernels().finish_lut(ranks, lut, np.empty(ranks.shape, np.float32))
    return lut[ranks]


# ---------------------------------------------------------------------------- tables (NumPy only)
# Offsets in a pruning table: about 4/3 pi r^3; beyond this many the continuous test is used.
MAX_TABLE_OFFSETS = 2_000_000


def canonical_norms(di, dj, dk, spacing) -> np.ndarray:
    """The canonical float64 squared length of integer offsets (NumPy, no FMA)."""
    sx, sy, sz = (float(s) for s in spacing)
    x = np.asarray(di, np.float64) * sx
    y = np.asarray(dj, np.float64) * sy
    z = np.asarray(dk, np.float64) * sz
    return (x * x + y * y) + z * z


def offset_table(r2cap: float, spacing):
    """All integer offsets with canonical norm < r2cap, sorted by norm (stable): (norms, di, dj, dk)."""
    r = math.sqrt(r2cap)
    h = [int(r / float(s)) + 1 for s in spacing]
    if max(h) > 32767:
        raise ValueError(f"radius {r} too large for an offset table (int16 offsets)")
    ai, aj, ak = (np.arange(-m, m + 1, dtype=np.int16) for m in h)
    di, dj, dk = np.meshgrid(ai, aj, ak, indexing="ij")
    norms = canonical_norms(di, dj, dk, spacing).ravel()
    sel = np.flatnonzero(norms < r2cap)
    order = sel[np.argsort(norms[sel], kind="stable")]
    return (norms[order], di.ravel()[order].copy(), dj.ravel()[order].copy(),
            dk.ravel()[order].copy())


def _table_cap(r2need: float, spacing) -> float:
    """The r2cap of a table for r2need (grown geometrically), bounded by MAX_TABLE_OFFSETS."""
    vox = float(np.prod([float(s) for s in spacing]))
    rmax_allowed = (MAX_TABLE_OFFSETS * vox * 3 / (4 * math.pi)) ** (1 / 3)
    cap = max(2.0 * r2need, 16.0 * max(float(s) for s in spacing) ** 2)
    return min(cap, rmax_allowed ** 2)


_PRUNE_TABLES: dict = {}
_LEVEL_LUTS: dict = {}


def level_lut(levels, r2cap, spacing) -> np.ndarray:
    """At integer spacing, lut[v] = (index of the largest level < v) for integers v < r2cap,
    the prune kernel's level lookup without a binary search; empty otherwise."""
    if not is_integer_spacing(spacing) or r2cap > 2**24:
        return np.zeros(0, np.int64)
    key = (tuple(float(s) for s in spacing), float(r2cap), levels.size)
    lut = _LEVEL_LUTS.get(key)
    if lut is None:
        n = int(math.floor(r2cap))
        if n >= r2cap:
            n -= 1
        v = np.arange(n + 1, dtype=np.float64)
        lut = (np.searchsorted(levels, v, side="left") - 1).astype(np.int64)
        _LEVEL_LUTS.clear()
        _LEVEL_LUTS[key] = lut
    return lut


def prune_table(r2need: float, spacing):
    """(levels, need, r2cap): distinct norms < r2cap and, for each of the 7 neighbour types
    e = (|di|, |dj|, |dk|) (index 4|di| + 2|dj| + |dk| - 1), need[e, l] = max |o + e|^2 over
    the offsets o with |o|^2 <= levels[l].  Cached per spacing; grows when needed."""
    key = tuple(float(s) for s in spacing)
    t = _PRUNE_TABLES.get(key)
    if t is not None and (t[2] > r2need or t[3]):
        return t[:3]
    cap = _table_cap(r2need, key)
    norms, di, dj, dk = offset_table(cap, key)
    levels, first = np.unique(norms, return_index=True)
    last = np.r_[first[1:], norms.size] - 1
    need = np.empty((7, levels.size), np.float64)
    adi, adj, adk = (np.abs(v).astype(np.int64) for v in (di, dj, dk))
    for e in range(1, 8):
        ei, ej, ek = (e >> 2) & 1, (e >> 1) & 1, e & 1
        m = canonical_norms(adi + ei, adj + ej, adk + ek, key)
        need[e - 1] = np.maximum.accumulate(m)[last]
    saturated = cap < max(2.0 * r2need, 16.0 * max(key) ** 2)
    _PRUNE_TABLES[key] = (levels, need, cap, saturated)
    return levels, need, cap
