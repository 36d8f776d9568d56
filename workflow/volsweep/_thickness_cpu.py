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
    """Compile (once, cached on disk) the numba kernels."""
    import numba
    from numba import njit, prange

    @njit(cache=True, parallel=True)
    def edt_axis0(phase, sx, out):
        # Two scans along axis 0 per (j, k) line: distance to the nearest background
        # voxel in index units, then the canonical first term (t*sx)*(t*sx).
        n0, n1, n2 = phase.shape
        inf = np.inf
        for j in prange(n1):
            last = np.full(n2, -1, np.int64)
            for i in range(n0):
                for k in range(n2):
                    if not phase[i, j, k]:
                        last[k] = i
                    out[i, j, k] = inf if last[k] < 0 else float(i - last[k])
            nxt = np.full(n2, -1, np.int64)
            for i in range(n0 - 1, -1, -1):
                for k in range(n2):
                    if not phase[i, j, k]:
                        nxt[k] = i
                    t = out[i, j, k]
                    if nxt[k] >= 0 and float(nxt[k] - i) < t:
                        t = float(nxt[k] - i)
                    if t != inf:
                        ts = t * sx
                        t = ts * ts
                    out[i, j, k] = t
        return out

    @njit(cache=True, parallel=True)
    def edt_axis1(fin, sy, out):
        n0, n1, n2 = fin.shape
        for i in prange(n0):
            for j in range(n1):
                for k in range(n2):
                    best = fin[i, j, k]
                    t = 1
                    while True:
                        ts = t * sy
                        c = ts * ts
                        if c >= best:
                            break
                        any_ = False
                        if j - t >= 0:
                            v = fin[i, j - t, k] + c
                            if v < best:
                                best = v
                            any_ = True
                        if j + t < n1:
                            v = fin[i, j + t, k] + c
                            if v < best:
                                best = v
                            any_ = True
                        if not any_:
                            break
                        t += 1
                    out[i, j, k] = best
        return out

    @njit(cache=True, parallel=True)
    def edt_axis2(fin, sz, out):
        n0, n1, n2 = fin.shape
        for i in prange(n0):
            for j in range(n1):
                for k in range(n2):
                    best = fin[i, j, k]
                    t = 1
                    while True:
                        ts = t * sz
                        c = ts * ts
                        if c >= best:
                            break
                        any_ = False
                        if k - t >= 0:
                            v = fin[i, j, k - t] + c
                            if v < best:
                                best = v
                            any_ = True
                        if k + t < n2:
                            v = fin[i, j, k + t] + c
                            if v < best:
                                best = v
                            any_ = True
                        if not any_:
                            break
                        t += 1
                    out[i, j, k] = best
        return out

    @njit(cache=True, parallel=True)
    def prune(d2, sx, sy, sz, eps, lo0, lo1, lo2, hi0, hi1, hi2, r2keep, out):
        # out[p] = 1 for the centres kept: D(p) > 0, within r2keep of the box
        # [lo, hi) and not inside the open ball of a 26-neighbour q, i.e. not
        # D(q) >= D(p) + |p - q|  <=>  L = b + c - a >= 0 and L*L >= 4*b*c.
        n0, n1, n2 = d2.shape
        for i in prange(n0):
            gi = 0
            if i < lo0:
                gi = lo0 - i
            elif i >= hi0:
                gi = i - hi0 + 1
            for j in range(n1):
                gj = 0
                if j < lo1:
                    gj = lo1 - j
                elif j >= hi1:
                    gj = j - hi1 + 1
                for k in range(n2):
                    out[i, j, k] = 0
                    a = d2[i, j, k]
                    if not a > 0.0:
                        continue
                    gk = 0
                    if k < lo2:
                        gk = lo2 - k
                    elif k >= hi2:
                        gk = k - hi2 + 1
                    x = gi * sx
                    y = gj * sy
                    z = gk * sz
                    g = (x * x + y * y) + z * z
                    if not g < r2keep:
                        continue
                    keep = True
                    if a != np.inf:
                        for di in range(-1, 2):
                            ii = i + di
                            if ii < 0 or ii >= n0:
                                continue
                            for dj in range(-1, 2):
                                jj = j + dj
                                if jj < 0 or jj >= n1:
                                    continue
                                for dk in range(-1, 2):
                                    kk = k + dk
                                    if kk < 0 or kk >= n2 or (di == 0 and dj == 0 and dk == 0):
                                        continue
                                    b = d2[ii, jj, kk]
                                    if b == np.inf:
                                        continue
                                    x = di * sx
                                    y = dj * sy
                                    z = dk * sz
                                    c = (x * x + y * y) + z * z
                                    if b >= c:
                                        el = (b + c) - a
                                        if el >= 0.0 and el * el >= 4.0 * b * c * (1.0 + eps):
                                            keep = False
                                            break
                                if not keep:
                                    break
                            if not keep:
                                break
                    if keep:
                        out[i, j, k] = 1
        return out

    @njit(cache=True, inline="always")
    def half(base, r2, s):
        # Largest h >= 0 with base + (h*s)*(h*s) < r2, or -1.
        rem = r2 - base
        if not rem > 0.0:
            return -1
        h = int(math.sqrt(rem) / s)
        while True:
            t = (h + 1) * s
            if base + t * t < r2:
                h += 1
            else:
                break
        while h >= 0:
            t = h * s
            if base + t * t < r2:
                break
            h -= 1
        return h

    @njit(cache=True, parallel=True)
    def paint(ci, cj, ck, r2s, sx, sy, sz, lo0, lo1, lo2, hi0, hi1, hi2, rx, nchunks, out):
        # out (shape hi - lo) = max of r2 over the candidate balls covering each voxel.
        # Parallel over slabs of axis 0: every slab is written by one thread only.
        m0 = hi0 - lo0
        for c in prange(nchunks):
            a = lo0 + (m0 * c) // nchunks
            b = lo0 + (m0 * (c + 1)) // nchunks
            if a >= b:
                continue
            start = np.searchsorted(ci, a - rx, side="left")
            stop = np.searchsorted(ci, b + rx, side="right")
            for m in range(start, stop):
                i0 = ci[m]
                j0 = cj[m]
                k0 = ck[m]
                r2 = r2s[m]
                hi = half(0.0, r2, sx)
                dlo = max(-hi, a - i0)
                dhi = min(hi, b - 1 - i0)
                for di in range(dlo, dhi + 1):
                    x = di * sx
                    aa = x * x
                    hj = half(aa, r2, sy)
                    jlo = max(j0 - hj, lo1)
                    jhi = min(j0 + hj, hi1 - 1)
                    for jj in range(jlo, jhi + 1):
                        y = (jj - j0) * sy
                        ab = aa + y * y
                        hk = half(ab, r2, sz)
                        klo = max(k0 - hk, lo2)
                        khi = min(k0 + hk, hi2 - 1)
                        oi = i0 + di - lo0
                        oj = jj - lo1
                        for kk in range(klo, khi + 1):
                            if out[oi, oj, kk - lo2] < r2:
                                out[oi, oj, kk - lo2] = r2
        return out

    numba.set_num_threads(min(numba.config.NUMBA_NUM_THREADS, _threads()))
    return {"edt_axis0": edt_axis0, "edt_axis1": edt_axis1, "edt_axis2": edt_axis2,
            "prune": prune, "paint": paint}


def is_integer_spacing(spacing) -> bool:
    return all(float(s).is_integer() for s in spacing)


def edt_sq(phase: np.ndarray, spacing, *, method: str = "auto") -> np.ndarray:
    """Canonical squared distance (float64) from each voxel to the nearest background voxel.

    Background voxels get 0; without any background in the array every voxel is ``inf``.
    ``method="edt"`` uses the edt package (exact only at integer spacing with
    values below 2**24, so ``"auto"`` uses it only then); ``"numba"`` the
    canonical separable passes of this module.
    """
    phase = np.ascontiguousarray(phase, dtype=bool)
    sx, sy, sz = (float(s) for s in spacing)
    bound = sum((n * s) ** 2 for n, s in zip(phase.shape, (sx, sy, sz)))
    if method == "auto":
        method = "edt" if (is_integer_spacing(spacing) and bound < _F32_EXACT) else "numba"
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
    a = np.empty(phase.shape, np.float64)
    b = np.empty(phase.shape, np.float64)
    k["edt_axis0"](phase, sx, a)
    k["edt_axis1"](a, sy, b)
    k["edt_axis2"](b, sz, a)
    return a


def candidates(d2: np.ndarray, spacing, box_lo, box_hi, r2keep: float, eps: float) -> np.ndarray:
    """Flat indices (sorted) of the ball centres that survive pruning."""
    k = _kernels()
    sx, sy, sz = (float(s) for s in spacing)
    mask = np.empty(d2.shape, np.uint8)
    k["prune"](d2, sx, sy, sz, float(eps), *[int(v) for v in box_lo],
               *[int(v) for v in box_hi], float(r2keep), mask)
    return np.flatnonzero(mask)


def paint(d2: np.ndarray, cand: np.ndarray, spacing, box_lo, box_hi) -> np.ndarray:
    """Max of D(p)**2 over the candidate balls covering each voxel of the box [lo, hi)."""
    k = _kernels()
    sx, sy, sz = (float(s) for s in spacing)
    shape = tuple(int(h - l) for l, h in zip(box_lo, box_hi))
    out = np.zeros(shape, np.float64)
    if cand.size == 0 or out.size == 0:
        return out
    n0, n1, n2 = d2.shape
    ci, rem = np.divmod(cand, n1 * n2)
    cj, ck = np.divmod(rem, n2)
    r2s = d2.reshape(-1)[cand]
    rx = int(math.sqrt(float(r2s.max())) / sx) + 2
    nchunks = max(1, min(shape[0], 4 * _threads()))
    k["paint"](ci, cj, ck, r2s, sx, sy, sz, *[int(v) for v in box_lo],
               *[int(v) for v in box_hi], rx, nchunks, out)
    return out
