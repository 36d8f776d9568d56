"""GPU kernels of exact local thickness (CuPy RawKernels), cached across calls.

The same steps as ``_thickness_cpu`` with the same canonical float64
squared distances (see that module's docstring); ``__dmul_rn``/``__dadd_rn``
keep the compiler from fusing them into FMAs, so the GPU and the CPU give
bit-identical results:

1. ``lt_edt0``: two scans along axis 0, one thread per (j, k) line (coalesced);
   ``lt_edt_pass``: axes 1 and 2, one thread per voxel, searching outwards
   until the next term alone exceeds the best value (cost ~ D/spacing per voxel).
   Our own kernels rather than cupyx's ``distance_transform_edt``, which pads
   non-cubic inputs to a cube and returns rooted, not squared, distances.
2. ``lt_prune``: drop centres whose open ball lies in a 26-neighbour's.
3. ``lt_paint``: one warp per surviving centre paints its ball from a table of
   offsets sorted by canonical norm (the ball is a prefix of it) with
   ``atomicMax`` on the float64 bits (non-negative doubles order as uint64).

Module-level state (compiled module, offset tables) lives for the process: no
per-call compilation, and the tables only grow when a larger radius is seen.
This module imports CuPy lazily and never imports edt, numba, zarr or dask.
"""

from __future__ import annotations

import functools
import math

import numpy as np

CUDA_SOURCE = r"""
#define LT_INF (__longlong_as_double(0x7ff0000000000000LL))

extern "C" __global__ void lt_edt0(const unsigned char* __restrict__ phase, double* __restrict__ f,
                                   long long n0, long long nline, double sx)
{
    long long line = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (line >= nline) return;
    long long last = -1;
    for (long long i = 0; i < n0; ++i) {
        long long o = i * nline + line;
        if (!phase[o]) last = i;
        f[o] = (last < 0) ? LT_INF : (double)(i - last);
    }
    long long nxt = -1;
    for (long long i = n0 - 1; i >= 0; --i) {
        long long o = i * nline + line;
        if (!phase[o]) nxt = i;
        double t = f[o];
        if (nxt >= 0 && (double)(nxt - i) < t) t = (double)(nxt - i);
        if (t != LT_INF) {
            double ts = __dmul_rn(t, sx);
            t = __dmul_rn(ts, ts);
        }
        f[o] = t;
    }
}

/* axis-wise pass: len = extent of the axis, stride = its element stride. */
extern "C" __global__ void lt_edt_pass(const double* __restrict__ fin, double* __restrict__ fout,
                                       long long n, long long len, long long stride, double s)
{
    long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= n) return;
    long long c = (p / stride) % len;
    double best = fin[p];
    for (long long t = 1; ; ++t) {
        double ts = __dmul_rn((double)t, s);
        double c2 = __dmul_rn(ts, ts);
        if (c2 >= best) break;
        int any = 0;
        if (c - t >= 0) {
            double v = __dadd_rn(fin[p - t * stride], c2);
            if (v < best) best = v;
            any = 1;
        }
        if (c + t < len) {
            double v = __dadd_rn(fin[p + t * stride], c2);
            if (v < best) best = v;
            any = 1;
        }
        if (!any) break;
    }
    fout[p] = best;
}

extern "C" __global__ void lt_prune(const double* __restrict__ d2, unsigned char* __restrict__ keep,
                                    long long n0, long long n1, long long n2,
                                    double sx, double sy, double sz, double eps,
                                    long long lo0, long long lo1, long long lo2,
                                    long long hi0, long long hi1, long long hi2, double r2keep)
{
    long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= n0 * n1 * n2) return;
    long long k = p % n2;
    long long j = (p / n2) % n1;
    long long i = p / (n1 * n2);
    unsigned char res = 0;
    double a = d2[p];
    if (a > 0.0) {
        long long gi = i < lo0 ? lo0 - i : (i >= hi0 ? i - hi0 + 1 : 0);
        long long gj = j < lo1 ? lo1 - j : (j >= hi1 ? j - hi1 + 1 : 0);
        long long gk = k < lo2 ? lo2 - k : (k >= hi2 ? k - hi2 + 1 : 0);
        double x = __dmul_rn((double)gi, sx), y = __dmul_rn((double)gj, sy), z = __dmul_rn((double)gk, sz);
        double g = __dadd_rn(__dadd_rn(__dmul_rn(x, x), __dmul_rn(y, y)), __dmul_rn(z, z));
        if (g < r2keep) {
            res = 1;
            if (a != LT_INF) {
                for (int di = -1; di <= 1 && res; ++di) {
                    long long ii = i + di;
                    if (ii < 0 || ii >= n0) continue;
                    for (int dj = -1; dj <= 1 && res; ++dj) {
                        long long jj = j + dj;
                        if (jj < 0 || jj >= n1) continue;
                        for (int dk = -1; dk <= 1; ++dk) {
                            long long kk = k + dk;
                            if (kk < 0 || kk >= n2 || (di == 0 && dj == 0 && dk == 0)) continue;
                            double b = d2[(ii * n1 + jj) * n2 + kk];
                            if (b == LT_INF) continue;
                            x = __dmul_rn((double)di, sx); y = __dmul_rn((double)dj, sy); z = __dmul_rn((double)dk, sz);
                            double cc = __dadd_rn(__dadd_rn(__dmul_rn(x, x), __dmul_rn(y, y)), __dmul_rn(z, z));
                            if (b >= cc) {
                                double el = __dadd_rn(__dadd_rn(b, cc), -a);
                                double rhs = __dmul_rn(__dmul_rn(__dmul_rn(4.0, b), cc), __dadd_rn(1.0, eps));
                                if (el >= 0.0 && __dmul_rn(el, el) >= rhs) { res = 0; break; }
                            }
                        }
                    }
                }
            }
        }
    }
    keep[p] = res;
}

/* One warp per centre; the ball of squared radius r2 is the first cnt[w] offsets. */
extern "C" __global__ void lt_paint(const long long* __restrict__ cand, const double* __restrict__ d2,
                                    const long long* __restrict__ cnt,
                                    const short* __restrict__ odi, const short* __restrict__ odj,
                                    const short* __restrict__ odk, long long ncand,
                                    long long n1, long long n2,
                                    long long lo0, long long lo1, long long lo2,
                                    long long hi0, long long hi1, long long hi2,
                                    unsigned long long* __restrict__ out)
{
    long long gt = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    long long w = gt >> 5;
    int lane = (int)(gt & 31);
    if (w >= ncand) return;
    long long p = cand[w];
    long long k = p % n2;
    long long j = (p / n2) % n1;
    long long i = p / (n1 * n2);
    unsigned long long bits = (unsigned long long)__double_as_longlong(d2[p]);
    long long n = cnt[w];
    long long m1 = hi1 - lo1, m2 = hi2 - lo2;
    for (long long t = lane; t < n; t += 32) {
        long long x = i + odi[t];
        long long y = j + odj[t];
        long long z = k + odk[t];
        if (x < lo0 || x >= hi0 || y < lo1 || y >= hi1 || z < lo2 || z >= hi2) continue;
        long long o = ((x - lo0) * m1 + (y - lo1)) * m2 + (z - lo2);
        if (out[o] < bits) atomicMax(out + o, bits);
    }
}

extern "C" __global__ void lt_finish(const unsigned long long* __restrict__ r2bits, float* __restrict__ lt,
                                     long long n)
{
    long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= n) return;
    double r2 = __longlong_as_double((long long)r2bits[p]);
    lt[p] = r2 > 0.0 ? (float)(2.0 * sqrt(r2)) : 0.0f;
}
"""

_BLOCK = 256


@functools.cache
def _module():
    import cupy as cp

    return cp.RawModule(code=CUDA_SOURCE, options=("-std=c++11",))


def _kernel(name):
    return _module().get_function(name)


def _grid(n: int, per_block: int = _BLOCK) -> tuple[int]:
    return (max(1, (int(n) + per_block - 1) // per_block),)


def canonical_norms(di, dj, dk, spacing) -> np.ndarray:
    """The canonical float64 squared length of integer offsets (NumPy, no FMA)."""
    sx, sy, sz = (float(s) for s in spacing)
    x = np.asarray(di, np.float64) * sx
    y = np.asarray(dj, np.float64) * sy
    z = np.asarray(dk, np.float64) * sz
    return (x * x + y * y) + z * z


def offset_table_host(r2cap: float, spacing):
    """All integer offsets with canonical norm < r2cap, sorted by norm (stable)."""
    sx, sy, sz = (float(s) for s in spacing)
    r = math.sqrt(r2cap)
    h = [int(r / s) + 1 for s in (sx, sy, sz)]
    if max(h) > 32767:
        raise ValueError(f"radius {r} too large for the GPU offset table (int16 offsets)")
    ai, aj, ak = (np.arange(-m, m + 1, dtype=np.int16) for m in h)
    di, dj, dk = np.meshgrid(ai, aj, ak, indexing="ij")
    norms = canonical_norms(di, dj, dk, spacing).ravel()
    sel = np.flatnonzero(norms < r2cap)
    order = sel[np.argsort(norms[sel], kind="stable")]
    return (norms[order], di.ravel()[order].copy(), dj.ravel()[order].copy(),
            dk.ravel()[order].copy())


class _Tables:
    """Offset tables on the device, one per spacing, grown geometrically."""

    def __init__(self):
        self._tables = {}

    def get(self, r2max: float, spacing):
        import cupy as cp

        key = tuple(float(s) for s in spacing)
        t = self._tables.get(key)
        if t is None or t[0] <= r2max:
            cap = max(2.0 * r2max, 64.0 * max(key) ** 2)
            norms, di, dj, dk = offset_table_host(cap, key)
            t = (cap, cp.asarray(norms), cp.asarray(di), cp.asarray(dj), cp.asarray(dk))
            self._tables[key] = t
        return t[1:]

    def clear(self):
        self._tables.clear()


TABLES = _Tables()


def edt_sq(phase, spacing):
    """Canonical squared distance map (float64 CuPy array) of a boolean CuPy array."""
    import cupy as cp

    n0, n1, n2 = phase.shape
    n = phase.size
    sx, sy, sz = (float(s) for s in spacing)
    ph = cp.ascontiguousarray(phase).view(cp.uint8)
    a = cp.empty(phase.shape, cp.float64)
    b = cp.empty(phase.shape, cp.float64)
    nline = n1 * n2
    _kernel("lt_edt0")(_grid(nline, 128), (128,), (ph, a, np.int64(n0), np.int64(nline), np.float64(sx)))
    _kernel("lt_edt_pass")(_grid(n), (_BLOCK,), (a, b, np.int64(n), np.int64(n1), np.int64(n2), np.float64(sy)))
    _kernel("lt_edt_pass")(_grid(n), (_BLOCK,), (b, a, np.int64(n), np.int64(n2), np.int64(1), np.float64(sz)))
    del b
    return a


def candidates(d2, spacing, box_lo, box_hi, r2keep, eps):
    import cupy as cp

    n0, n1, n2 = d2.shape
    sx, sy, sz = (float(s) for s in spacing)
    keep = cp.empty(d2.shape, cp.uint8)
    _kernel("lt_prune")(_grid(d2.size), (_BLOCK,), (
        d2, keep, np.int64(n0), np.int64(n1), np.int64(n2),
        np.float64(sx), np.float64(sy), np.float64(sz), np.float64(eps),
        *[np.int64(v) for v in box_lo], *[np.int64(v) for v in box_hi], np.float64(r2keep)))
    return cp.flatnonzero(keep)


def paint(d2, cand, spacing, box_lo, box_hi, r2max):
    """Squared-radius map (uint64 bits of float64) of the box [lo, hi)."""
    import cupy as cp

    shape = tuple(int(h - l) for l, h in zip(box_lo, box_hi))
    out = cp.zeros(shape, cp.uint64)
    if cand.size == 0 or out.size == 0:
        return out
    norms, di, dj, dk = TABLES.get(r2max, spacing)
    r2s = d2.ravel()[cand]
    cnt = cp.searchsorted(norms, r2s, side="left").astype(cp.int64)
    _, n1, n2 = d2.shape
    _kernel("lt_paint")(_grid(cand.size * 32), (_BLOCK,), (
        cand, d2, cnt, di, dj, dk, np.int64(cand.size), np.int64(n1), np.int64(n2),
        *[np.int64(v) for v in box_lo], *[np.int64(v) for v in box_hi], out))
    return out


def finish(r2bits):
    import cupy as cp

    lt = cp.empty(r2bits.shape, cp.float32)
    _kernel("lt_finish")(_grid(r2bits.size), (_BLOCK,), (r2bits, lt, np.int64(r2bits.size)))
    return lt
