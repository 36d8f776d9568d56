"""GPU kernels of exact local thickness (CuPy RawKernels), cached across calls.

The same steps as ``_cpu`` on the same integer lattice
(``_tables.lattice``): squared lengths are integers held exactly in
float64, and ``__dmul_rn``/``__dadd_rn`` keep the compiler from fusing them into
FMAs, so the GPU and the CPU give bit-identical results:

1. ``lt_edt0``: two scans along axis 0, one thread per (j, k) line (coalesced);
   ``lt_edt_pass``: axes 1 and 2, one thread per voxel, searching outwards
   until the next term alone exceeds the best value (cost ~ D/spacing per voxel).
   Our own kernels rather than cupyx's ``distance_transform_edt``, which pads
   non-cubic inputs to a cube and returns rooted, not squared, distances.
2. ``lt_prune``: drop centres whose discrete ball lies in a 26-neighbour's
   (exact table test, ``_tables.prune_table``); ``lt_prune_far``: then those whose ball
   lies in a larger ball on their ray from the background, ridge centres not walked (the
   CPU's ``far_container``, with its exact cap test ``lt_cap_holds``).
3. ``lt_disc_masks``: one thread per 64 planes of a centre's ball sets a bit for every
   disc that lies inside the same plane's disc of an uphill 26-neighbour (exact integer
   table, ``_tables.disc_need_table``, and past it ``disc_need_far``);
   ``lt_paint_rows``: one warp per centre with a
   visible disc, lanes over the rows of its visible discs, less the rows its uphill face
   neighbours in the plane hold (the CPU's ``paint_max``); every row span becomes two
   ``atomicMax`` of the centre's rank among the distinct D2 values (uint32) into a sparse
   table of power-of-two spans, pushed down by ``lt_pushdown``.  ``finish`` maps ranks to
   diameters through ``_tables.diameter_lut``.

Module-level state (compiled module, pruning tables, disc needs) lives for the process,
one entry per CUDA device: no per-call compilation, and the tables only grow when a
larger radius is seen.
This module imports CuPy lazily and never imports edt, numba, zarr or dask.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from ._tables import (CAP_MAX_POINTS, FAR_RIDGE, FAR_STEP, GPU_CAP_MIN_SLACK, GPU_FAR_MIN_RADIUS,
                      INT_TABLE_MAX, MAX_TABLE_OFFSETS, cap_limit, diameter_lut, disc_need_far,
                      disc_need_table, far_columns, far_min_r2, prune_table, with_far_buckets)

CUDA_SOURCE = f"#define LT_CAP_MAX_POINTS {CAP_MAX_POINTS}\n" + r"""
#define LT_INF (__longlong_as_double(0x7ff0000000000000LL))

__device__ __forceinline__ long long lt_half(double base, double r2, double s)
{
    /* largest h >= 0 with base + (h*s)^2 < r2, or -1 */
    double rem = r2 - base;
    if (!(rem > 0.0)) return -1;
    long long h = (long long)(sqrt(rem) / s);
    for (;;) {
        double t = __dmul_rn((double)(h + 1), s);
        if (__dadd_rn(base, __dmul_rn(t, t)) < r2) ++h; else break;
    }
    while (h >= 0) {
        double t = __dmul_rn((double)h, s);
        if (__dadd_rn(base, __dmul_rn(t, t)) < r2) break;
        --h;
    }
    return h;
}

/* ((di sx)^2 + (dj sy)^2) + (dk sz)^2 in that order, without FMA: the CPU's squared length */
__device__ __forceinline__ double lt_len2(double di, double dj, double dk,
                                          double sx, double sy, double sz)
{
    double x = __dmul_rn(di, sx), y = __dmul_rn(dj, sy), z = __dmul_rn(dk, sz);
    return __dadd_rn(__dadd_rn(__dmul_rn(x, x), __dmul_rn(y, y)), __dmul_rn(z, z));
}

/* voxels from index i to the box [lo, hi) along one axis (0 inside) */
__device__ __forceinline__ long long lt_gap(long long i, long long lo, long long hi)
{
    return i < lo ? lo - i : (i >= hi ? i - hi + 1 : 0);
}

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


/* The same pass over whole lines (one thread per line): the lower envelope of the
   parabolas (w (x - v))^2 + fin[v] (Meijster et al.), in exact integer arithmetic; linear
   in the line's length whatever the distances.  Lines: len elements of stride inner,
   line L starting at (L / inner) * len * inner + L % inner.  s, t: scratch of nline * len
   int32 each (element q of line L at q * nline + L). */
extern "C" __global__ void lt_edt_line(const double* __restrict__ fin, double* __restrict__ fout,
                                       long long nline, long long len, long long inner,
                                       long long w, int* __restrict__ s, int* __restrict__ t)
{
    long long L = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (L >= nline) return;
    long long base = (L / inner) * len * inner + L % inner;
    long long w2 = w * w;
    long long q = -1;
    for (long long u = 0; u < len; ++u) {
        double fv = fin[base + u * inner];
        if (fv == LT_INF) continue;
        long long fu = (long long)fv;
        while (q >= 0) {
            long long tq = t[q * nline + L], sq = s[q * nline + L];
            long long fq = (long long)fin[base + sq * inner];
            if ((tq - sq) * w2 * (tq - sq) + fq > (tq - u) * w2 * (tq - u) + fu) --q; else break;
        }
        if (q < 0) {
            q = 0; s[L] = (int)u; t[L] = 0;
        } else {
            long long sq = s[q * nline + L];
            long long fq = (long long)fin[base + sq * inner];
            long long num = w2 * (u * u - sq * sq) + fu - fq;
            long long den = 2 * w2 * (u - sq);
            long long fl = num / den;
            if ((num % den != 0) && ((num < 0) != (den < 0))) --fl;  /* floor division */
            long long sep = fl + 1;
            if (sep < len) { ++q; s[q * nline + L] = (int)u; t[q * nline + L] = (int)sep; }
        }
    }
    if (q < 0) {
        for (long long u = 0; u < len; ++u) fout[base + u * inner] = LT_INF;
        return;
    }
    for (long long u = len - 1; u >= 0; --u) {
        long long sq = s[q * nline + L];
        long long d = u - sq;
        fout[base + u * inner] = (double)(d * w2 * d + (long long)fin[base + sq * inner]);
        if (u == t[q * nline + L]) --q;
    }
}

/* Whether a neighbour of squared distance b comes before its centre (a) in the strict order
   (D2 descending, flat index ascending; before: the neighbour's flat index is smaller). */
__device__ __forceinline__ int lt_uphill(double b, double a, int before)
{
    return b != LT_INF && (b > a || (before && b == a));
}

/* The largest D2 of p's uphill 26-neighbours (D2 larger, or equal and a smaller flat
   index) per class c = (ex + 1) * 4 + |ey| * 2 + |ez|, -1 where there is none.  Squared
   lattice lengths are exact integers in float64 (below 2^53), and so are the sums below. */
__device__ __forceinline__ void lt_uphill_best(const double* __restrict__ d2, long long p,
                                               long long n0, long long n1, long long n2,
                                               double* best)
{
    for (int c = 0; c < 12; ++c) best[c] = -1.0;
    long long k = p % n2, j = (p / n2) % n1, i = p / (n1 * n2);
    double a = d2[p];
    for (int di = -1; di <= 1; ++di) {
        long long ii = i + di;
        if (ii < 0 || ii >= n0) continue;
        for (int dj = -1; dj <= 1; ++dj) {
            long long jj = j + dj;
            if (jj < 0 || jj >= n1) continue;
            for (int dk = -1; dk <= 1; ++dk) {
                long long kk = k + dk;
                if (kk < 0 || kk >= n2 || (di == 0 && dj == 0 && dk == 0)) continue;
                long long qi = (ii * n1 + jj) * n2 + kk;
                double b = d2[qi];
                if (lt_uphill(b, a, qi < p)) {
                    int c = (di + 1) * 4 + (dj < 0 ? -dj : dj) * 2 + (dk < 0 ? -dk : dk);
                    if (b > best[c]) best[c] = b;
                }
            }
        }
    }
}

/* Whether the ball's disc at plane offset d (squared radius rho there) lies inside the
   same plane's disc of an uphill neighbour: D2(q) > need2[t, rho] + ((d - ex) sx)^2
   (exact integers in float64; need2 from _tables.disc_need_table, rows of nrho).  Past the
   table (rho >= nrho) the need is far's column of the longest quarter-disc offset shorter
   than rho (far: _tables.with_far_buckets, rows of nfar: row 5 the offsets' lengths, row
   6 their bucket index, its shift in the last column; the CPU's _far_column).  *last:
   the class tried first (the one that hid the previous disc). */
__device__ __forceinline__ int lt_disc_hidden(const double* best, long long d, long long rho,
                                              double sx, const double* __restrict__ need2,
                                              long long nrho, const double* __restrict__ far,
                                              long long nfar, int* last)
{
    const double* col = need2 + rho;
    long long stride = nrho;
    if (rho >= nrho) {
        /* the first length >= rho, scanned from its bucket's first */
        long long b = rho >> (long long)far[6 * nfar + nfar - 1];
        long long bmax = nfar > 2 ? nfar - 2 : 0;
        long long c = (long long)far[6 * nfar + (b < bmax ? b : bmax)];
        while (c < nfar && far[5 * nfar + c] < (double)rho) ++c;
        col = far + (c - 1);
        stride = nfar;
    }
    for (int cc = 0; cc < 12; ++cc) {
        int c = *last + cc;
        if (c >= 12) c -= 12;
        double rq = best[c];
        if (rq < 0.0) continue;
        double dq = (double)(d - (c / 4 - 1)) * sx;
        int t = c % 4;
        if (rq > __dadd_rn(col[((t >> 1) * 3 + (t & 1)) * stride], __dmul_rn(dq, dq))) {
            *last = c;
            return 1;
        }
    }
    return 0;
}

/* The planes of centre p's ball (half extent h along axis 0) inside the box's [lo0, hi0):
   plane offsets [*dlo, *dhi] (empty when *dlo > *dhi). */
__device__ __forceinline__ void lt_box_planes(long long i, long long h, long long lo0,
                                              long long hi0, long long* dlo, long long* dhi)
{
    *dlo = lo0 - i > -h ? lo0 - i : -h;
    *dhi = hi0 - 1 - i < h ? hi0 - 1 - i : h;
}

/* nw[m]: the 64-bit words of centre m's plane mask (one bit per plane of its ball in the box). */
extern "C" __global__ void lt_plane_words(const double* __restrict__ d2, const long long* __restrict__ cand,
                                          long long ncand, long long n1, long long n2, double sx,
                                          long long lo0, long long hi0, long long* __restrict__ nw)
{
    long long m = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (m >= ncand) return;
    long long p = cand[m], dlo, dhi;
    lt_box_planes(p / (n1 * n2), lt_half(0.0, d2[p], sx), lo0, hi0, &dlo, &dhi);
    nw[m] = dhi < dlo ? 0 : (dhi - dlo + 64) / 64;
}

/* One thread per mask word (words of centre m from moff[m]): bit b of word u stands for
   plane offset dlo + 64 u + b and is set when that disc paints nothing: beyond the ball or
   inside the same plane's disc of an uphill neighbour (lt_disc_hidden).  visible[m] = 1 when
   some disc is not hidden; the others' balls lie in the union of uphill balls, whose values
   are at least theirs, and the order is strict, so they are not painted (exact). */
extern "C" __global__ void lt_disc_masks(const double* __restrict__ d2, const long long* __restrict__ cand,
                                         long long ncand, const long long* __restrict__ moff,
                                         long long nwords, long long n0, long long n1, long long n2,
                                         double sx, const double* __restrict__ need2, long long nrho,
                                         const double* __restrict__ far, long long nfar,
                                         long long lo0, long long hi0,
                                         unsigned long long* __restrict__ masks,
                                         unsigned char* __restrict__ visible)
{
    long long t = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (t >= nwords) return;
    long long lo = 0, hi = ncand;  /* the last m with moff[m] <= t */
    while (hi - lo > 1) {
        long long mid = (lo + hi) >> 1;
        if (moff[mid] <= t) lo = mid; else hi = mid;
    }
    long long m = lo, p = cand[m], dlo, dhi;
    double rp = d2[p];
    lt_box_planes(p / (n1 * n2), lt_half(0.0, rp, sx), lo0, hi0, &dlo, &dhi);
    double best[12];
    lt_uphill_best(d2, p, n0, n1, n2, best);
    int last = 0;
    unsigned long long word = 0;
    long long d0 = dlo + 64 * (t - moff[m]);
    for (int b = 0; b < 64; ++b) {
        long long d = d0 + b;
        int hid = 1;
        if (d <= dhi) {
            double dd = __dmul_rn((double)d, sx);
            long long rho = (long long)__dadd_rn(rp, -__dmul_rn(dd, dd));
            hid = lt_disc_hidden(best, d, rho, sx, need2, nrho, far, nfar, &last);
        }
        if (hid) word |= 1ULL << b;
    }
    masks[t] = word;
    if (~word) visible[m] = 1;
}

extern "C" __global__ void lt_prune(const double* __restrict__ d2, unsigned char* __restrict__ keep,
                                    long long n0, long long n1, long long n2,
                                    double sx, double sy, double sz, double eps,
                                    long long lo0, long long lo1, long long lo2,
                                    long long hi0, long long hi1, long long hi2, double r2keep,
                                    const double* __restrict__ levels, long long nlev,
                                    const double* __restrict__ need, double r2cap)
{
    long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= n0 * n1 * n2) return;
    long long k = p % n2;
    long long j = (p / n2) % n1;
    long long i = p / (n1 * n2);
    unsigned char res = 0;
    double a = d2[p];
    if (a > 0.0) {
        double g = lt_len2((double)lt_gap(i, lo0, hi0), (double)lt_gap(j, lo1, hi1),
                           (double)lt_gap(k, lo2, hi2), sx, sy, sz);
        if (g < r2keep) {
            res = 1;
            if (a != LT_INF) {
                long long lev = -1;
                if (a < r2cap) {  /* number of levels < a, minus one */
                    long long l = 0, h = nlev;
                    while (l < h) { long long mid = (l + h) >> 1; if (levels[mid] < a) l = mid + 1; else h = mid; }
                    lev = l - 1;
                }
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
                            if (lev >= 0) {
                                int et = (di < 0 ? -di : di) * 4 + (dj < 0 ? -dj : dj) * 2 + (dk < 0 ? -dk : dk) - 1;
                                if (b > need[et * nlev + lev]) { res = 0; break; }
                                continue;
                            }
                            double cc = lt_len2((double)di, (double)dj, (double)dk, sx, sy, sz);
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

/* Exactly whether every lattice offset o with |o|^2 < a has |o - v|^2 < b: the CPU's
   _cap_holds, step for step.  Only a cap of the ball on the side away from v can fail (t =
   -o.v > tmax); its lattice points are tested one by one, when its box holds at most
   LT_CAP_MAX_POINTS (else false).  Caps too deep for that are given up first, without a
   square root: 2 r (r - h0) > cap (_tables.cap_limit) iff e = 2 (a - 1) - cap > 2 r h0. */
__device__ bool lt_cap_holds(double a, double b, long long vi, long long vj, long long vk,
                             double sx, double sy, double sz, double cap)
{
    double x = __dmul_rn((double)vi, sx), y = __dmul_rn((double)vj, sy), z = __dmul_rn((double)vk, sz);
    double v2 = __dadd_rn(__dadd_rn(__dmul_rn(x, x), __dmul_rn(y, y)), __dmul_rn(z, z));
    double tmax = __dadd_rn(ceil(__dmul_rn(__dadd_rn(__dadd_rn(__dadd_rn(b, -a), 1.0), -v2), 0.5)),
                            -1.0);
    double t1 = __dadd_rn(tmax, 1.0);
    if (t1 < 0.0) return false;
    double am1 = __dadd_rn(a, -1.0);
    double e = __dadd_rn(__dmul_rn(2.0, am1), -cap);
    if (e > 0.0 && __dmul_rn(__dmul_rn(__dmul_rn(__dmul_rn(4.0, am1), t1), t1), 1.0 + 1e-9)
                   < __dmul_rn(__dmul_rn(e, e), v2)) return false;
    double vn = sqrt(v2);
    double r = sqrt(__dadd_rn(a, -1.0));
    double h0 = __dadd_rn(tmax, 1.0) / vn;
    if (h0 < 0.0) return false;
    double q = fmax(__dmul_rn(__dmul_rn(2.0, r), __dadd_rn(r, -h0)), 0.0);
    double rho = __dadd_rn(sqrt(__dadd_rn(q, __dmul_rn(__dmul_rn(1e-12, r), r))), 1.0);
    double f = -h0 / vn;
    double i0 = floor(__dadd_rn(__dmul_rn(f, x), -rho) / sx);
    double i1 = ceil(__dadd_rn(__dmul_rn(f, x), rho) / sx);
    double j0 = floor(__dadd_rn(__dmul_rn(f, y), -rho) / sy);
    double j1 = ceil(__dadd_rn(__dmul_rn(f, y), rho) / sy);
    double k0 = floor(__dadd_rn(__dmul_rn(f, z), -rho) / sz);
    double k1 = ceil(__dadd_rn(__dmul_rn(f, z), rho) / sz);
    double count = __dmul_rn(__dmul_rn(__dadd_rn(__dadd_rn(i1, -i0), 1.0),
                                       __dadd_rn(__dadd_rn(j1, -j0), 1.0)),
                             __dadd_rn(__dadd_rn(k1, -k0), 1.0));
    if (count > (double)LT_CAP_MAX_POINTS) return false;
    for (long long oi = (long long)i0; oi <= (long long)i1; ++oi)
        for (long long oj = (long long)j0; oj <= (long long)j1; ++oj)
            for (long long ok = (long long)k0; ok <= (long long)k1; ++ok)
                if (lt_len2((double)oi, (double)oj, (double)ok, sx, sy, sz) < a
                    && lt_len2((double)(oi - vi), (double)(oj - vj), (double)(ok - vk), sx, sy, sz) >= b)
                    return false;
    return true;
}

/* For centres cand[m]: keep[m] = 0 when the ball of cand[m] lies inside the ball of a centre
   q on its ray from the background, else 1 (the CPU's prune_far, step for step).  Central
   differences of D2 give p - s (s: the nearest background voxel), q = p + round(c u) for c
   from the farthest in-array point (c <= 2) shrinking by `step`; the ball is inside q's when
   el = D2(q) - |q - p|^2 - (a - 1) > 0 and el^2 > 4 |q - p|^2 (a - 1) (exact; D2(q) > a, so
   q comes first in the order), or else by lt_cap_holds where cap >= 0 (_tables.cap_limit with
   GPU_CAP_MIN_SLACK: lattices whose squared half-diagonal exceeds it).  Centres with a < r2min
   are kept (prune decided them). */
extern "C" __global__ void lt_prune_far(const double* __restrict__ d2, const long long* __restrict__ cand,
                                        long long ncand, long long n0, long long n1, long long n2,
                                        double sx, double sy, double sz, double eps,
                                        long long lo0, long long lo1, long long lo2,
                                        long long hi0, long long hi1, long long hi2, double r2keep,
                                        double r2min, double step, double ridge, double cap,
                                        unsigned char* __restrict__ keep)
{
    long long m = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (m >= ncand) return;
    keep[m] = 1;
    long long p = cand[m];
    long long i = p / (n1 * n2), j = (p / n2) % n1, k = p % n2;
    double a = d2[p];
    if (!(r2min <= a && a < LT_INF) || i == 0 || j == 0 || k == 0 || i == n0 - 1
        || j == n1 - 1 || k == n2 - 1) return;
    double ux = (d2[p + n1 * n2] - d2[p - n1 * n2]) / (4.0 * __dmul_rn(sx, sx));
    double uy = (d2[p + n2] - d2[p - n2]) / (4.0 * __dmul_rn(sy, sy));
    double uz = (d2[p + 1] - d2[p - 1]) / (4.0 * __dmul_rn(sz, sz));
    if (!(isfinite(ux) && isfinite(uy) && isfinite(uz))) return;
    double ex = __dmul_rn(ux, sx), ey = __dmul_rn(uy, sy), ez = __dmul_rn(uz, sz);
    if (__dadd_rn(__dadd_rn(__dmul_rn(ex, ex), __dmul_rn(ey, ey)), __dmul_rn(ez, ez))
        < __dmul_rn(ridge, a)) return;  /* a ridge point: no ray (FAR_RIDGE) */
    double c = 2.0;
    if (ux > 0) c = fmin(c, ((double)(n0 - 1 - i) + 0.49) / ux);
    else if (ux < 0) c = fmin(c, ((double)i + 0.49) / -ux);
    if (uy > 0) c = fmin(c, ((double)(n1 - 1 - j) + 0.49) / uy);
    else if (uy < 0) c = fmin(c, ((double)j + 0.49) / -uy);
    if (uz > 0) c = fmin(c, ((double)(n2 - 1 - k) + 0.49) / uz);
    else if (uz < 0) c = fmin(c, ((double)k + 0.49) / -uz);
    long long pi = 0, pj = 0, pk = 0;
    for (;;) {
        long long vi = (long long)floor(__dadd_rn(__dmul_rn(c, ux), 0.5));
        long long vj = (long long)floor(__dadd_rn(__dmul_rn(c, uy), 0.5));
        long long vk = (long long)floor(__dadd_rn(__dmul_rn(c, uz), 0.5));
        if (vi == 0 && vj == 0 && vk == 0) break;
        c = __dmul_rn(c, step);
        if (vi == pi && vj == pj && vk == pk) continue;
        pi = vi; pj = vj; pk = vk;
        long long ii = i + vi, jj = j + vj, kk = k + vk;
        if (ii < 0 || jj < 0 || kk < 0 || ii >= n0 || jj >= n1 || kk >= n2) continue;
        double b = d2[(ii * n1 + jj) * n2 + kk];
        if (b == LT_INF) continue;
        if (!(lt_len2((double)lt_gap(ii, lo0, hi0), (double)lt_gap(jj, lo1, hi1),
                      (double)lt_gap(kk, lo2, hi2), sx, sy, sz) < r2keep)) continue;
        double v2 = lt_len2((double)vi, (double)vj, (double)vk, sx, sy, sz);
        double am1 = __dadd_rn(a, -1.0);
        double el = __dadd_rn(__dadd_rn(b, -v2), -am1);
        double rhs = __dmul_rn(__dmul_rn(__dmul_rn(4.0, v2), am1), __dadd_rn(1.0, eps));
        if (el > 0.0 && (__dmul_rn(el, el) > rhs
                         || (cap >= 0.0 && lt_cap_holds(a, b, vi, vj, vk, sx, sy, sz, cap)))) {
            keep[m] = 0;
            return;
        }
    }
}

/* Painter "rows": one warp per centre, lanes over the rows of each painted disc (every lane
   walks the same discs).  Each row span [l, r] of axis 2 becomes two atomicMax into level
   q = floor(log2(r - l + 1)) of a sparse table M (levels of m0*m1*m2 uint32):
   M[q][row][l] and M[q][row][r - 2^q + 1].  Centre sel[w] paints the discs whose bits
   (lt_disc_masks) are clear. */
extern "C" __global__ void lt_paint_rows(const long long* __restrict__ cand, const long long* __restrict__ sel,
                                         long long nsel, const double* __restrict__ d2,
                                         const unsigned int* __restrict__ rank,
                                         long long n1, long long n2, double sx, double sy, double sz,
                                         long long lo0, long long lo1, long long lo2,
                                         long long hi0, long long hi1, long long hi2,
                                         unsigned int* __restrict__ M,
                                         const unsigned long long* __restrict__ masks,
                                         const long long* __restrict__ moff)
{
    long long gt = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    long long w = gt >> 5;
    int lane = (int)(gt & 31);
    if (w >= nsel) return;
    long long m = sel[w];
    long long p = cand[m];
    long long k = p % n2;
    long long j = (p / n2) % n1;
    long long i = p / (n1 * n2);
    double r2 = d2[p];
    unsigned int rk = rank[m];
    /* uphill face neighbours in the centre's plane hold its rows beyond them (j), or each
       row but the voxel at its far end (k): those are skipped (the CPU's paint_max) */
    int jp = j + 1 < n1 && lt_uphill(d2[p + n2], r2, 0);
    int jm = j > 0 && lt_uphill(d2[p - n2], r2, 1);
    int kp = k + 1 < n2 && lt_uphill(d2[p + 1], r2, 0);
    int km = k > 0 && lt_uphill(d2[p - 1], r2, 1);
    long long m1 = hi1 - lo1, m2 = hi2 - lo2;
    long long level = (hi0 - lo0) * m1 * m2;
    long long dlo, dhi;
    lt_box_planes(i, lt_half(0.0, r2, sx), lo0, hi0, &dlo, &dhi);
    for (long long u = 0; dlo + 64 * u <= dhi; ++u) {
        unsigned long long todo = ~masks[moff[m] + u];
        while (todo) {
            long long d = dlo + 64 * u + (__ffsll((long long)todo) - 1);
            todo &= todo - 1;
            if (d > dhi) break;
            long long xx = i + d;
            double x = __dmul_rn((double)d, sx);
            double aa = __dmul_rn(x, x);
            long long hj = jp && jm ? 0 : lt_half(aa, r2, sy);
            long long rowx = (xx - lo0) * m1;
            for (long long adj = lane; adj <= hj; adj += 32) {
                double y = __dmul_rn((double)adj, sy);
                long long hk = lt_half(__dadd_rn(aa, __dmul_rn(y, y)), r2, sz);
                if (hk < 0) continue;
                long long k0 = km ? k + hk : k - hk, k1 = kp ? k - hk : k + hk;
                long long l = (k0 > lo2 ? k0 : lo2) - lo2;
                long long r = (k1 < hi2 - 1 ? k1 : hi2 - 1) - lo2;
                if (l > r) continue;
                long long len = r - l + 1;
                int q = 0;
                while ((2LL << q) <= len) ++q;
                long long p2 = r - (1LL << q) + 1;
                for (int s = 0; s < 2; ++s) {
                    if (s && adj == 0) continue;
                    if (adj > 0 && (s ? jm : jp)) continue;
                    long long yy = s ? j - adj : j + adj;
                    if (yy < lo1 || yy >= hi1) continue;
                    long long row = q * level + (rowx + (yy - lo1)) * m2;
                    if (M[row + l] < rk) atomicMax(M + row + l, rk);
                    if (M[row + p2] < rk) atomicMax(M + row + p2, rk);
                }
            }
        }
    }
}

/* Push level q of the sparse table down into level q - 1 (gather form, race-free):
   M[q-1][t] = max(M[q-1][t], M[q][t], M[q][t - 2^(q-1)]) over valid level-q positions. */
extern "C" __global__ void lt_pushdown(unsigned int* __restrict__ M, long long level, long long m2, int q)
{
    long long p = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (p >= level) return;
    long long t = p % m2;
    long long h = 1LL << (q - 1);
    long long lastq = m2 - (1LL << q);  /* last valid position at level q */
    const unsigned int* Mq = M + (long long)q * level;
    unsigned int* Mq1 = M + (long long)(q - 1) * level;
    unsigned int v = Mq1[p];
    if (t <= lastq && Mq[p] > v) v = Mq[p];
    if (t - h >= 0 && t - h <= lastq && Mq[p - h] > v) v = Mq[p - h];
    Mq1[p] = v;
}
"""

_BLOCK = 256


def _device_id() -> int:
    """The current CUDA device: the caches below hold one entry per device."""
    import cupy as cp

    return cp.cuda.Device().id


@functools.cache
def _module(device_id: int):
    import cupy as cp

    return cp.RawModule(code=CUDA_SOURCE, options=("-std=c++11",))


def _kernel(name):
    return _module(_device_id()).get_function(name)


def _grid(n: int, per_block: int = _BLOCK) -> tuple[int]:
    return (max(1, (int(n) + per_block - 1) // per_block),)


class _Tables:
    """Pruning tables (``_tables.prune_table``) on the current device, per device and lattice."""

    def __init__(self):
        self._tables = {}

    def get(self, r2need: float, spacing):
        import cupy as cp

        lattice = tuple(float(s) for s in spacing)
        levels, need, cap = prune_table(r2need, lattice)
        key = (_device_id(), lattice)
        t = self._tables.get(key)
        if t is None or t[0] != cap:
            t = (cap, cp.asarray(levels), cp.asarray(np.ascontiguousarray(need)))
            self._tables[key] = t
        return t

    def clear(self):
        self._tables.clear()


TABLES = _Tables()


class _DiscNeeds:
    """``_tables.disc_need_table`` on each device for its last lattice's weights along axes
    1 and 2, as long as the longest asked so far (``_tables.table_length``): a column does
    not depend on the table's length, so a longer table serves every shorter one.
    Lattices of large weights read the full table (75 MB) in every call, which no longer
    crosses to the device each time."""

    def __init__(self):
        self._by_device = {}  # device id: ((wy, wz), table)

    def get(self, tab: int, wy: int, wz: int):
        import cupy as cp

        dev = _device_id()
        key, table = self._by_device.get(dev, (None, None))
        if key != (wy, wz) or table.shape[1] <= tab:
            self._by_device.pop(dev, None)  # freed before the next one is built
            table = None
            table = cp.asarray(disc_need_table(tab, wy, wz), dtype=cp.float64)
            self._by_device[dev] = ((wy, wz), table)
        return table

    def current(self):
        """The current device's table, or None."""
        return self._by_device.get(_device_id(), (None, None))[1]

    def clear(self):
        self._by_device.clear()


DISC_NEEDS = _DiscNeeds()


def edt_sq(phase, weights):
    """Squared lattice distance map (float64 CuPy array, exact integers) of a boolean CuPy array.

    Axes 1 and 2 search outwards per voxel while the largest finite value so far stays
    below ``(BRUTE_SPAN * w)**2`` (a few steps per voxel), else take the lower envelope of
    parabolas per line (linear in the line's length: a solid with few pores).
    """
    import cupy as cp

    n0, n1, n2 = phase.shape
    n = phase.size
    wx, wy, wz = (float(w) for w in weights)
    ph = cp.ascontiguousarray(phase).view(cp.uint8)
    a = cp.empty(phase.shape, cp.float64)
    b = cp.empty(phase.shape, cp.float64)
    nline = n1 * n2
    _kernel("lt_edt0")(_grid(nline, 128), (128,), (ph, a, np.int64(n0), np.int64(nline), np.float64(wx)))
    for src, dst, length, inner, w in ((a, b, n1, n2, wy), (b, a, n2, 1, wz)):
        if float(_finite_max(src)) < (BRUTE_SPAN * w) ** 2:
            _kernel("lt_edt_pass")(_grid(n), (_BLOCK,), (src, dst, np.int64(n), np.int64(length),
                                                         np.int64(inner), np.float64(w)))
        else:
            lines = n // length
            s_ = cp.empty(n, cp.int32)
            t_ = cp.empty(n, cp.int32)
            _kernel("lt_edt_line")(_grid(lines, 128), (128,), (
                src, dst, np.int64(lines), np.int64(length), np.int64(inner), np.int64(w), s_, t_))
            del s_, t_
    del b
    return a


# Lines whose largest finite squared distance is below (BRUTE_SPAN * w)^2 are searched voxel
# by voxel, longer ones by the lower envelope (lt_edt_line).
BRUTE_SPAN = 64


# The continuous containment test beyond the table is exact below this squared length;
# above, a relative slack makes it prune only balls that are certainly contained.
_PRUNE_EXACT = float(2**25)


def candidates(d2, weights, box_lo, box_hi, r2keep):
    """Flat indices (sorted) of the ball centres that survive pruning, and None (no uphill bits)."""
    import cupy as cp

    n0, n1, n2 = d2.shape
    wx, wy, wz = (float(w) for w in weights)
    r2need = float(_finite_max(d2))
    cap, levels, need = TABLES.get(r2need, weights)
    eps = 0.0 if r2need < _PRUNE_EXACT else 1e-9
    keep = cp.empty(d2.shape, cp.uint8)
    _kernel("lt_prune")(_grid(d2.size), (_BLOCK,), (
        d2, keep, np.int64(n0), np.int64(n1), np.int64(n2),
        np.float64(wx), np.float64(wy), np.float64(wz), np.float64(eps),
        *[np.int64(v) for v in box_lo], *[np.int64(v) for v in box_hi], np.float64(r2keep),
        levels, np.int64(levels.size), need, np.float64(cap)))
    cand = cp.flatnonzero(keep)
    del keep
    r2min = far_min_r2(weights, GPU_FAR_MIN_RADIUS)
    if cand.size and r2need >= r2min:
        # balls inside a larger ball on their ray (most of a solid with few pores)
        outside = cp.empty(cand.shape, cp.uint8)
        _kernel("lt_prune_far")(_grid(cand.size), (_BLOCK,), (
            d2, cand, np.int64(cand.size), np.int64(n0), np.int64(n1), np.int64(n2),
            np.float64(wx), np.float64(wy), np.float64(wz), np.float64(eps),
            *[np.int64(v) for v in box_lo], *[np.int64(v) for v in box_hi], np.float64(r2keep),
            np.float64(r2min), np.float64(FAR_STEP), np.float64(FAR_RIDGE),
            np.float64(cap_limit(weights, GPU_CAP_MIN_SLACK)), outside))
        cand = cand[outside.view(cp.bool_)]
    return cand, None


def centre_r2(d2, cand, extra=None):
    """``d2`` at the flat indices ``cand`` (``extra``, candidates' None, is the backends'
    common signature)."""
    return d2.ravel()[cand]


@functools.cache
def _finite_max_kernel():
    import cupy as cp

    return cp.ReductionKernel("float64 x", "float64 y", "isinf(x) ? 0.0 : x", "max(a, b)",
                              "y = a", "0.0", "lt_finite_max")


def _finite_max(d2):
    return _finite_max_kernel()(d2)


def _levels(m2: int) -> int:
    """Levels of the sparse table of spans along an axis of m2 voxels."""
    return max(0, int(m2).bit_length() - 1) + 1


# Centres whose disc masks are built and painted at a time: bounds the masks' memory
# (``memory_bytes``) whatever the number of centres.
MASK_BATCH = 1 << 22


def paint(d2, cand, weights, box_lo, box_hi, extra=None, *, r2s=None):
    """Rank map (uint32 CuPy array) of the box [lo, hi) and the sorted distinct D2 it indexes.

    Each batch of ``MASK_BATCH`` centres gets its plane masks (``lt_disc_masks``, one
    thread per 64 planes) and only the centres with a visible disc are painted, their
    visible discs only (past the integer tables the masks' needs come from
    ``disc_need_far``).  Needs ``_levels(m2)`` uint32 volumes of the box
    for the sparse table (``memory_bytes``).  ``r2s``: ``d2`` at ``cand``, when the caller
    has it.
    """
    import cupy as cp

    shape = tuple(int(h - l) for l, h in zip(box_lo, box_hi))
    if r2s is None:
        r2s = centre_r2(d2, cand)
    values = cp.unique(r2s)
    if cand.size == 0 or math.prod(shape) == 0:
        return cp.zeros(shape, cp.uint32), values
    n0, n1, n2 = d2.shape
    wx, wy, wz = (float(w) for w in weights)
    lo = [np.int64(v) for v in box_lo]
    hi = [np.int64(v) for v in box_hi]
    rank = (cp.searchsorted(values, r2s) + 1).astype(cp.uint32)
    del r2s
    m2 = shape[2]
    nq = _levels(m2) - 1
    level = math.prod(shape)
    M = cp.zeros((nq + 1,) + shape, cp.uint32)
    r2max = float(values[-1])

    tab = min(int(r2max), INT_TABLE_MAX - 1)  # the table's last squared length
    need2 = DISC_NEEDS.get(tab, int(wy), int(wz))
    if r2max >= need2.shape[1]:
        far = cp.asarray(with_far_buckets(disc_need_far(int(r2max), int(wy), int(wz), (n1, n2))),
                         dtype=cp.float64)
    else:
        far = cp.zeros((7, 1), cp.float64)  # not read
    for b0 in range(0, cand.size, MASK_BATCH):
        cb = cand[b0:b0 + MASK_BATCH]
        rb = rank[b0:b0 + MASK_BATCH]
        nw = cp.empty(cb.size, cp.int64)
        _kernel("lt_plane_words")(_grid(cb.size), (_BLOCK,), (
            d2, cb, np.int64(cb.size), np.int64(n1), np.int64(n2), np.float64(wx),
            lo[0], hi[0], nw))
        moff = cp.zeros(cb.size + 1, cp.int64)
        cp.cumsum(nw, out=moff[1:])
        del nw
        nwords = int(moff[-1])
        masks = cp.empty(max(nwords, 1), cp.uint64)
        visible = cp.zeros(cb.size, cp.uint8)
        _kernel("lt_disc_masks")(_grid(nwords), (_BLOCK,), (
            d2, cb, np.int64(cb.size), moff, np.int64(nwords), np.int64(n0), np.int64(n1),
            np.int64(n2), np.float64(wx), need2, np.int64(need2.shape[1]), far,
            np.int64(far.shape[1]), lo[0], hi[0], masks, visible))
        sel = cp.flatnonzero(visible)
        del visible
        if sel.size:
            _kernel("lt_paint_rows")(_grid(sel.size * 32), (_BLOCK,), (
                cb, sel, np.int64(sel.size), d2, rb, np.int64(n1), np.int64(n2),
                np.float64(wx), np.float64(wy), np.float64(wz), *lo, *hi, M, masks, moff))
        del masks, moff, sel
    for q in range(nq, 0, -1):
        _kernel("lt_pushdown")(_grid(level), (_BLOCK,), (M, np.int64(level), np.int64(m2),
                                                         np.int32(q)))
    out = M[0].copy()
    del M
    return out, values


def finish(ranks, values, scale=1.0):
    """Float32 diameter from a rank map (``_tables.diameter_lut``), 0 where rank is 0."""
    import cupy as cp

    return diameter_lut(values, scale, xp=cp)[ranks]


def memory_bytes(shape, weights=(1, 1, 1)) -> int:
    """Peak device memory of a call on a ``shape`` block, bound for any phase (see
    ``thickness.thickness_memory_bytes``): per voxel the uploaded input (uint8), the two
    float64 distance passes and the lower envelope's two int32 scratch arrays, the uint8
    prune mask, the kept centres (flat index, D2, the sorts of ``unique`` and
    ``searchsorted``, rank; every voxel kept) and, while painting, the sparse table of
    ``_levels(m2)`` uint32 volumes and the rank map; the float32 result after it.  Plus one
    batch of ``MASK_BATCH`` centres' disc masks (a word per 64 planes of axis 0), word
    counts and offsets, visible flags and the painted list; and the disc needs past the
    integer tables (``_tables.far_columns`` of the lattice ``weights``, float64 rows)."""
    n = math.prod(shape)
    edt = 1 + 8 + 8 + 4 + 4                # input, two passes, envelope scratch
    # input, D2, mask, flatnonzero (index + scan); then far pruning's flags and its copy
    prune = 1 + 8 + 1 + 8 + 8 + 8
    paint = 1 + 8 + 8 + 8 + 8 + 8 + 8 + 4 + 4 * _levels(shape[2]) + 4
    finish = 1 + 8 + 4 + 4                 # D2 still held, ranks, result
    words = (int(shape[0]) + 63) // 64
    batch = min(n, MASK_BATCH) * (8 * words + 8 + 8 + 1 + 8 + 8)
    far = 8 * 7 * far_columns(shape, weights)
    return int(n * max(edt, prune, paint, finish) + batch + far + _TABLE_BYTES)


# Pruning tables on the device: levels and 7 rows of thresholds (float64), at most
# MAX_TABLE_OFFSETS levels; the disc table (9 rows of int64 up to INT_TABLE_MAX).
_TABLE_BYTES = 8 * 8 * MAX_TABLE_OFFSETS + 8 * 9 * (INT_TABLE_MAX + 1)
