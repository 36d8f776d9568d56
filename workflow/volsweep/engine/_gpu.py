"""CuPy backend of the sweep engine: fused CUDA kernels and in-place cuFFT plans.

Per block: the padded volume is written into a complex64 buffer ``B`` (viewed as
real with the last axis padded to ``2·(nz//2+1)``) and transformed in place.  Per
kernel: ``mul_spec`` writes ``Y = B · K̂`` (spectrum computed in registers),
``Y`` is inverse-transformed in place by one reused C2R plan, and ``core_stats``
reduces the core voxels into per-CUDA-block float64 partials.  Partials are
reduced on the device every chunk of kernels; the host reads the results once
per block.  Device memory: two half spectra (≈ 2 × 4 bytes per padded voxel)
plus the cuFFT work area.  No cupy FFT plan cache is involved.
"""

from __future__ import annotations

import numpy as np

import cupy as cp
from cupy.cuda import cufft

from . import _plan
from ._plan import A2, C, DWX, DWY, DWZ, GX, GY, GZ, PERX, PERY, PERZ
from .stats import Partial
from volsweep.tiling import read_block, source_box

THREADS = 256
#: Parseval path: kernels per launch of the general (ξ ≠ 1) kernel (its z images pruned
#: to one range per row block), kernels per launch of the separable ξ = 1 kernel, and
#: resident waves of blocks per launch.  Chosen on an H200 with
#: benchmarks/bench_parseval.py (docs/benchmarks/sweep.md).
PARSEVAL_KB = 2
PARSEVAL_ISO_KB = 8
PARSEVAL_WAVES = 4
#: Kernels whose per-CUDA-block partials are buffered before a device-side reduction.
CHUNK = 256
#: Bytes per host→device slab while filling the padded volume.
SLAB_BYTES = 64 << 20

_SRC = r"""
typedef IDX_T idx_t;

// Aliased spectrum at one frequency, exactly pruned: only terms with p = ωᵀMω < p_cut.
// At fixed (ω_x, ω_y), p is a quadratic in ω_z, so the images of z needed are one range.
__device__ __forceinline__ float spec(float fx, float fy, float fz, const float* __restrict__ P) {
    const float w0x = fx * P[P_DWX], w0y = fy * P[P_DWY], w0z = fz * P[P_DWZ];
    const float perz = P[P_PERZ], ux = P[P_UX], uy = P[P_UY], uz = P[P_UZ], a2 = P[P_A2], c = P[P_C], pcut = P[P_PCUT];
    const float xlim = P[P_XLIM], inv_alpha = P[P_INV_ALPHA];
    const int gx = (int)P[P_GX], gy = (int)P[P_GY], gz = (int)P[P_GZ];
    const float inv_perz = 1.0f / perz;
    float acc = 0.0f;
    for (int ix = -gx; ix <= gx; ++ix) {
        const float wx = w0x + ix * P[P_PERX];
        const float bx = wx * wx;
        if (bx >= xlim) continue;
        for (int iy = -gy; iy <= gy; ++iy) {
            const float wy = w0y + iy * P[P_PERY];
            const float bxy = bx + wy * wy;
            const float txy = ux * wx + uy * wy;
            const float rxy = pcut - a2 * bxy;
            // discriminant of alpha·w² + 2·beta·w + gamma − p_cut, with the c² terms cancelled
            const float disc = a2 * (rxy - c * txy * txy) + c * uz * uz * rxy;
            if (disc <= 0.0f) continue;
            const float wc = -c * txy * uz * inv_alpha, h = sqrtf(disc) * inv_alpha;
            const int lo = max(-gz, (int)ceilf((wc - h - w0z) * inv_perz));
            const int hi = min(gz, (int)floorf((wc + h - w0z) * inv_perz));
            for (int iz = lo; iz <= hi; ++iz) {
                const float wz = w0z + iz * perz;
                const float b = bxy + wz * wz;
                const float t = txy + uz * wz;
                const float p = a2 * b + c * t * t;
                acc += p * __expf(-0.5f * p);
            }
        }
    }
    return acc * P[P_SCALE];
}

__device__ __forceinline__ void freq(idx_t i, int nx, int ny, int nzh, float* fx, float* fy, float* fz) {
    const int kz = (int)(i % (idx_t)nzh);
    const idx_t r = i / (idx_t)nzh;
    const int ky = (int)(r % (idx_t)ny);
    const int kx = (int)(r / (idx_t)ny);
    *fx = (float)(kx >= (nx + 1) / 2 ? kx - nx : kx);
    *fy = (float)(ky >= (ny + 1) / 2 ? ky - ny : ky);
    *fz = (float)kz;
}

__device__ __forceinline__ double warp_sum(double v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_down_sync(0xffffffffu, v, o));
    return v;
}
__device__ __forceinline__ float warp_min(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fminf(v, __shfl_down_sync(0xffffffffu, v, o));
    return v;
}

// Fixed-shape block reduction; thread 0 writes (s, s2, mx, mn) to out[0..3].
__device__ __forceinline__ void block_reduce4(double s, double s2, float mx, float mn, double* out) {
    __shared__ double sh_s[32], sh_s2[32];
    __shared__ float sh_mx[32], sh_mn[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    s = warp_sum(s); s2 = warp_sum(s2); mx = warp_max(mx); mn = warp_min(mn);
    if (lane == 0) { sh_s[warp] = s; sh_s2[warp] = s2; sh_mx[warp] = mx; sh_mn[warp] = mn; }
    __syncthreads();
    if (warp == 0) {
        s = lane < nw ? sh_s[lane] : 0.0;
        s2 = lane < nw ? sh_s2[lane] : 0.0;
        mx = lane < nw ? sh_mx[lane] : -__int_as_float(0x7f800000);
        mn = lane < nw ? sh_mn[lane] : __int_as_float(0x7f800000);
        s = warp_sum(s); s2 = warp_sum(s2); mx = warp_max(mx); mn = warp_min(mn);
        if (lane == 0) { out[0] = s; out[1] = s2; out[2] = (double)mx; out[3] = (double)mn; }
    }
}

extern "C" __global__ void mul_spec(const float2* __restrict__ vhat, float2* __restrict__ out,
                                    const float* __restrict__ prm, const int j,
                                    const int nx, const int ny, const int nzh, const idx_t total) {
    const float* P = prm + NP * j;
    for (idx_t i = (idx_t)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (idx_t)gridDim.x * blockDim.x) {
        float fx, fy, fz;
        freq(i, nx, ny, nzh, &fx, &fy, &fz);
        const float k = spec(fx, fy, fz, P);
        const float2 v = vhat[i];
        out[i] = make_float2(v.x * k, v.y * k);
    }
}

// ---------------------------------------------------------------------------- Parseval
// Σ_k pw(k)·K̂(k)² for KB kernels per launch, no inverse FFT.  One warp per rfft row
// (kx, ky); lane l owns kz = kzb + 32·cc + l (cc < CH), so |V̂|² of a row is loaded once
// and reused by the KB kernels.  Per-lane float32 sums per row, float64 across rows,
// one fixed-shape block reduction per kernel: no atomics, deterministic.
#define CH 4
#define KLOG (-0.72134752044448170368f)  // −log2(e)/2: p·e^{−p/2} = (e/KLOG)·2^e, e = KLOG·p

__device__ __forceinline__ float ex2a(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// General ξ.  Lanes p < npairs compute the (ω_x, ω_y) image pair p of the row once per
// kernel: its z images with some p < p_cut in this row block are one range [lo, hi]
// (approximate reciprocal / square root in this per-row setup).  The warp loops
// over the union of z images (uniform bounds), and for each over the pairs that need it
// (ballot, shuffles): every term is one full-warp FMA chain and one ex2, with no
// per-point bounds.  The few terms beyond p_cut are terms of the exact sum (below
// ALIAS_TOL of the peak each), so the sum is at least as complete as the pruned one.
template <int KB>
__global__ void __launch_bounds__(256)
parseval_gen(const float* __restrict__ pw, double* __restrict__ part, const float* __restrict__ prm,
             const int j0, const int nk, const int slot0, const int nx, const int ny, const int nzh) {
    const unsigned FULL = 0xffffffffu;
    const int lane = threadIdx.x & 31;
    const idx_t nrows = (idx_t)nx * (idx_t)ny;
    const idx_t warp0 = ((idx_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const idx_t nwarps = ((idx_t)gridDim.x * blockDim.x) >> 5;
    double s[KB];
#pragma unroll
    for (int q = 0; q < KB; ++q) s[q] = 0.0;
    for (idx_t row = warp0; row < nrows; row += nwarps) {
        const int kx = (int)(row / (idx_t)ny), ky = (int)(row % (idx_t)ny);
        const float fx = (float)(kx >= (nx + 1) / 2 ? kx - nx : kx);
        const float fy = (float)(ky >= (ny + 1) / 2 ? ky - ny : ky);
        const float* __restrict__ prow = pw + row * (idx_t)nzh;
        for (int kzb = 0; kzb < nzh; kzb += 32 * CH) {
            const int ncc = min(CH, (nzh - kzb + 31) >> 5);  // warp-uniform
            float pv[CH];
#pragma unroll
            for (int cc = 0; cc < CH; ++cc) {
                const int kz = kzb + 32 * cc + lane;
                pv[cc] = kz < nzh ? __ldg(prow + kz) : 0.0f;
            }
#pragma unroll
            for (int q = 0; q < KB; ++q) {
                if (q < nk) {
                    const float* P = prm + NP * (j0 + q);
                    const float dwz = P[P_DWZ], perz = P[P_PERZ], uz = P[P_UZ], a2 = P[P_A2], c = P[P_C];
                    const float pcut = P[P_PCUT], xlim = P[P_XLIM], inv_alpha = P[P_INV_ALPHA];
                    const int gx = (int)P[P_GX], gy = (int)P[P_GY], gz = (int)P[P_GZ];
                    const float a2k = a2 * KLOG, ck = c * KLOG;
                    const float inv_perz = __fdividef(1.0f, perz);
                    const float w0x = fx * P[P_DWX], w0y = fy * P[P_DWY];
                    float wz0[CH], acc[CH];
#pragma unroll
                    for (int cc = 0; cc < CH; ++cc) {
                        wz0[cc] = (float)(kzb + 32 * cc + lane) * dwz;
                        acc[cc] = 0.0f;
                    }
                    const int nyi = 2 * gy + 1, npairs = (2 * gx + 1) * nyi;
                    for (int p0 = 0; p0 < npairs; p0 += 32) {
                        const int pp = p0 + lane;
                        float b0 = 0.0f, tx = 0.0f;
                        int lo = 0x7fffffff, hi = -0x7fffffff;  // empty
                        if (pp < npairs) {
                            // pp / nyi through an approximate reciprocal (exact: the
                            // quotient is ≥ 0.5/nyi from an integer), no integer division
                            const int ixo = (int)(((float)pp + 0.5f) * __fdividef(1.0f, (float)nyi));
                            const float wx = w0x + (float)(ixo - gx) * P[P_PERX];
                            const float wy = w0y + (float)(pp - ixo * nyi - gy) * P[P_PERY];
                            const float bx = wx * wx, bxy = bx + wy * wy;
                            const float txy = P[P_UX] * wx + P[P_UY] * wy;
                            const float rxy = pcut - a2 * bxy;
                            const float disc = a2 * (rxy - c * txy * txy) + c * uz * uz * rxy;
                            if (bx < xlim && disc > 0.0f) {
                                const float wc = -c * txy * uz * inv_alpha;
                                const float h = disc * rsqrtf(disc) * inv_alpha;
                                b0 = a2k * bxy;
                                tx = txy;
                                const float wlo = (float)kzb * dwz;
                                const float whi = (float)(min(nzh, kzb + 32 * CH) - 1) * dwz;
                                lo = max(-gz, (int)ceilf((wc - h - whi) * inv_perz));
                                hi = min(gz, (int)floorf((wc + h - wlo) * inv_perz));
                            }
                        }
                        const int izlo = __reduce_min_sync(FULL, lo <= hi ? lo : 0x7fffffff);
                        const int izhi = __reduce_max_sync(FULL, lo <= hi ? hi : -0x7fffffff);
                        for (int iz = izlo; iz <= izhi; ++iz) {
                            float wz[CH], qz[CH];
#pragma unroll
                            for (int cc = 0; cc < CH; ++cc) {
                                wz[cc] = fmaf((float)iz, perz, wz0[cc]);
                                qz[cc] = a2k * wz[cc] * wz[cc];
                            }
                            unsigned m = __ballot_sync(FULL, lo <= iz && iz <= hi);
                            while (m) {
                                const int p = __ffs(m) - 1;
                                m &= m - 1;
                                const float bp = __shfl_sync(FULL, b0, p);
                                const float tp = __shfl_sync(FULL, tx, p);
#pragma unroll
                                for (int cc = 0; cc < CH; ++cc) {
                                    if (cc < ncc) {
                                        const float t = fmaf(uz, wz[cc], tp);
                                        const float e = fmaf(ck * t, t, bp + qz[cc]);
                                        acc[cc] = fmaf(e, ex2a(e), acc[cc]);
                                    }
                                }
                            }
                        }
                    }
                    const float sc = P[P_SCALE] * (1.0f / KLOG);
                    float f = 0.0f;
#pragma unroll
                    for (int cc = 0; cc < CH; ++cc) {
                        const float k = acc[cc] * sc;
                        f = fmaf(pv[cc], k * k, f);
                    }
                    s[q] += (double)f;
                }
            }
        }
    }
#pragma unroll
    for (int q = 0; q < KB; ++q) {
        if (q < nk) {
            block_reduce4(0.0, s[q], 0.0f, 0.0f, part + 4 * ((idx_t)(slot0 + q) * gridDim.x + blockIdx.x));
            __syncthreads();  // block_reduce4's shared arrays are reused by the next kernel
        }
    }
}

// ξ = 1: K̂ = scale·((T_x S_y + S_x T_y) S_z + S_x S_y T_z) from per-axis tables (every
// image of the G box), ~4 flops a point.  Kernel j's tables start at tab + toff[j]:
// S_x, T_x (nx), S_y, T_y (ny), S_z, T_z (nzh).
template <int KB>
__global__ void __launch_bounds__(256)
parseval_iso(const float* __restrict__ pw, double* __restrict__ part, const float* __restrict__ prm,
             const float* __restrict__ tab, const int* __restrict__ toff,
             const int j0, const int nk, const int slot0, const int nx, const int ny, const int nzh) {
    const int lane = threadIdx.x & 31;
    const idx_t nrows = (idx_t)nx * (idx_t)ny;
    const idx_t warp0 = ((idx_t)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const idx_t nwarps = ((idx_t)gridDim.x * blockDim.x) >> 5;
    double s[KB];
#pragma unroll
    for (int q = 0; q < KB; ++q) s[q] = 0.0;
    for (idx_t row = warp0; row < nrows; row += nwarps) {
        const int kx = (int)(row / (idx_t)ny), ky = (int)(row % (idx_t)ny);
        const float* __restrict__ prow = pw + row * (idx_t)nzh;
        for (int kzb = 0; kzb < nzh; kzb += 32 * CH) {
            float pv[CH];
#pragma unroll
            for (int cc = 0; cc < CH; ++cc) {
                const int kz = kzb + 32 * cc + lane;
                pv[cc] = kz < nzh ? __ldg(prow + kz) : 0.0f;
            }
#pragma unroll
            for (int q = 0; q < KB; ++q) {
                if (q < nk) {
                    const float* __restrict__ T = tab + toff[j0 + q];
                    const float sc = prm[NP * (j0 + q) + P_SCALE];
                    const float sx = __ldg(T + kx), tx = __ldg(T + nx + kx);
                    const float sy = __ldg(T + 2 * nx + ky), ty = __ldg(T + 2 * nx + ny + ky);
                    const float* __restrict__ SZ = T + 2 * nx + 2 * ny;
                    const float A = (tx * sy + sx * ty) * sc, B = sx * sy * sc;
                    float f = 0.0f;
#pragma unroll
                    for (int cc = 0; cc < CH; ++cc) {
                        const int kz = kzb + 32 * cc + lane;
                        if (kz < nzh) {
                            const float k = fmaf(A, __ldg(SZ + kz), B * __ldg(SZ + nzh + kz));
                            f = fmaf(pv[cc], k * k, f);
                        }
                    }
                    s[q] += (double)f;
                }
            }
        }
    }
#pragma unroll
    for (int q = 0; q < KB; ++q) {
        if (q < nk) {
            block_reduce4(0.0, s[q], 0.0f, 0.0f, part + 4 * ((idx_t)(slot0 + q) * gridDim.x + blockIdx.x));
            __syncthreads();
        }
    }
}

extern "C" __global__ void core_stats(const float* __restrict__ g, double* __restrict__ part,
                                      const int slot, const int ny, const int lz,
                                      const int ox, const int oy, const int oz,
                                      const int cx, const int cy, const int cz, const idx_t ncore,
                                      float* __restrict__ resp, int* __restrict__ arg,
                                      const int kid, const int omap) {
    double s = 0.0, s2 = 0.0;
    float mx = -__int_as_float(0x7f800000), mn = __int_as_float(0x7f800000);
    for (idx_t i = (idx_t)blockIdx.x * blockDim.x + threadIdx.x; i < ncore;
         i += (idx_t)gridDim.x * blockDim.x) {
        const int z = (int)(i % (idx_t)cz);
        const idx_t r = i / (idx_t)cz;
        const int y = (int)(r % (idx_t)cy);
        const int x = (int)(r / (idx_t)cy);
        const float v = g[((idx_t)(ox + x) * ny + (oy + y)) * lz + (oz + z)];
        const double dv = (double)v;
        s += dv; s2 += dv * dv;
        mx = fmaxf(mx, v); mn = fminf(mn, v);
        if (omap && v > resp[i]) {  // 1: the response's maximum and kernel, 2: its maximum
            resp[i] = v;
            if (omap == 1) arg[i] = kid;
        }
    }
    block_reduce4(s, s2, mx, mn, part + 4 * ((idx_t)slot * gridDim.x + blockIdx.x));
}
"""

_MODULES = {}


def parseval_names(kb=None, iso_kb=None):
    """Template instances of the Parseval kernels (defaults: the module's settings)."""
    kb = PARSEVAL_KB if kb is None else int(kb)
    iso_kb = PARSEVAL_ISO_KB if iso_kb is None else int(iso_kb)
    return (f"parseval_gen<{kb}>", f"parseval_iso<{iso_kb}>")


def _module(wide: bool, names=None):
    names = tuple(parseval_names() if names is None else names)
    key = (bool(wide), names)
    if key not in _MODULES:
        src = _plan.cuda_defines() + _SRC.replace("IDX_T", "unsigned long long" if wide else "unsigned int")
        _MODULES[key] = cp.RawModule(code=src, options=("-std=c++14",), name_expressions=names)
    return _MODULES[key]


def _resident_blocks(kern) -> int:
    """Blocks of THREADS threads that fit on one SM, from the kernel's register count."""
    try:
        regs = int(kern.num_regs)
    except Exception:  # pragma: no cover - attribute missing in some CuPy versions
        return 2
    per_warp = -(-regs * 32 // 256) * 256  # allocation unit: 256 registers a warp
    return int(max(1, min(2048 // THREADS, 65536 // (per_warp * (THREADS // 32)))))


def iso_tables(params, fft_shape):
    """Per-axis tables of the separable ξ = 1 spectrum, for the rows of ``params`` with c = 0.

    ``S[k] = Σ_g e^{−a²ω²/2}``, ``T[k] = Σ_g a²ω² e^{−a²ω²/2}`` over every image of the
    G box (ω = ω_k + g·period), so that ``K̂ = scale·((T_x S_y + S_x T_y) S_z + S_x S_y T_z)``
    (float64 sums, stored float32).  Returns the concatenated tables (one copy per distinct
    set of constants) and each row's offset into them (0 for rows with c ≠ 0).
    """
    nx, ny, nz = (int(n) for n in fft_shape)

    def axis(n, half, dw, per, g, a2):
        k = np.arange(n // 2 + 1, dtype=np.float64) if half else np.fft.fftfreq(n, 1.0 / n)
        w = k[:, None] * dw + np.arange(-g, g + 1, dtype=np.float64)[None, :] * per
        q = a2 * w * w
        e = np.exp(-0.5 * q)
        return e.sum(axis=1), (q * e).sum(axis=1)

    toff = np.zeros(len(params), dtype=np.int32)
    seen, chunks, off = {}, [], 0
    for j, P in enumerate(params):
        if P[C] != 0.0:
            continue
        key = tuple(float(v) for v in P[[DWX, DWY, DWZ, PERX, PERY, PERZ, A2, GX, GY, GZ]])
        if key not in seen:
            a2 = P[A2]
            sx, tx = axis(nx, False, P[DWX], P[PERX], int(P[GX]), a2)
            sy, ty = axis(ny, False, P[DWY], P[PERY], int(P[GY]), a2)
            sz, tz = axis(nz, True, P[DWZ], P[PERZ], int(P[GZ]), a2)
            t = np.concatenate([sx, tx, sy, ty, sz, tz]).astype(np.float32)
            seen[key] = off
            chunks.append(t)
            off += len(t)
        toff[j] = seen[key]
    tab = np.concatenate(chunks) if chunks else np.zeros(1, np.float32)
    return tab, toff


def parseval_sums(pw, params, fft_shape, progress=None, *, names=None, waves=None):
    """``Σ_k pw(k)·K̂_j(k)²`` for every row j of ``params`` (float64 CuPy array, no host sync).

    ``pw``: float32 half-spectrum weights (``_plan.parseval_weights``); ``params``: float64
    ``_plan.kernel_table`` with norm 1.  ξ = 1 kernels (c = 0) go to the separable kernel, the
    others to the general one; each launch takes up to KB kernels of one kind.  Per-CUDA-block
    float64 partials are summed in a fixed order: the result is bit-identical run to run.
    """
    nx, ny, nz = (int(n) for n in fft_shape)
    nzh = nz // 2 + 1
    K = len(params)
    total = nx * ny * nzh
    wide = total >= 2**31
    names = tuple(parseval_names() if names is None else names)
    mod = _module(wide, names)
    gen, iso = mod.get_function(names[0]), mod.get_function(names[1])
    kb = int(names[0].split("<")[1].rstrip(">"))
    iso_kb = int(names[1].split("<")[1].rstrip(">"))
    waves = PARSEVAL_WAVES if waves is None else int(waves)
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    rows_blocks = -(-(nx * ny) * 32 // THREADS)  # at least one row per warp
    nb = int(max(1, min(rows_blocks, sms * _resident_blocks(gen) * waves)))

    is_iso = params[:, C] == 0.0
    order = np.concatenate([np.flatnonzero(is_iso), np.flatnonzero(~is_iso)])
    n_iso = int(is_iso.sum())
    P = params[order]
    prm = cp.asarray(P.astype(np.float32))
    if n_iso:
        tab, toff = iso_tables(P, fft_shape)
        tab, toff = cp.asarray(tab), cp.asarray(toff)
    launches = ([(j, min(iso_kb, n_iso - j), True) for j in range(0, n_iso, iso_kb)]
                + [(j, min(kb, K - j), False) for j in range(n_iso, K, kb)])
    res = cp.empty(K)
    part = cp.empty((min(K, CHUNK), nb, 4))
    dims = (np.int32(nx), np.int32(ny), np.int32(nzh))
    first, slot = 0, 0
    for j, nk, sep in launches:
        if slot + nk > CHUNK:
            res[first:first + slot] = part[:slot, :, 1].sum(axis=1)
            first, slot = j, 0
        if sep:
            iso((nb,), (THREADS,), (pw, part, prm, tab, toff, np.int32(j), np.int32(nk), np.int32(slot), *dims))
        else:
            gen((nb,), (THREADS,), (pw, part, prm, np.int32(j), np.int32(nk), np.int32(slot), *dims))
        slot += nk
        if progress is not None:
            progress.step(nk)
    if slot:
        res[first:first + slot] = part[:slot, :, 1].sum(axis=1)
    out = cp.empty(K)
    out[cp.asarray(order)] = res
    return out


def _n_blocks(total: int) -> int:
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    return int(max(1, min(-(-total // THREADS), sms * 8)))


def c2r_plan(shape):
    """In-place C2R plan for a half spectrum ``(nx, ny, nz//2+1)`` → real padded ``(nx, ny, 2·(nz//2+1))``."""
    nx, ny, nz = (int(n) for n in shape)
    nzh = nz // 2 + 1
    return cufft.PlanNd([nx, ny, nz], [nx, ny, nzh], 1, nx * ny * nzh, [nx, ny, 2 * nzh], 1,
                        nx * ny * 2 * nzh, cufft.CUFFT_C2R, 1, "C", 2, nz)


def r2c_plan(shape):
    """In-place R2C plan, the inverse layout of :func:`c2r_plan`."""
    nx, ny, nz = (int(n) for n in shape)
    nzh = nz // 2 + 1
    return cufft.PlanNd([nx, ny, nz], [nx, ny, 2 * nzh], 1, nx * ny * 2 * nzh, [nx, ny, nzh], 1,
                        nx * ny * nzh, cufft.CUFFT_R2C, 1, "C", 2, nzh)


class _DeviceBox:
    """The box ``box`` of a host volume, copied to the device once, read in volume coordinates."""

    def __init__(self, volume, box):
        self.shape = tuple(int(n) for n in volume.shape)
        self.offset = tuple(s.start for s in box)
        self.dtype = np.dtype(np.float32)
        self.data = cp.empty(tuple(s.stop - s.start for s in box), dtype=cp.float32)
        plane = max(1, int(np.prod(self.data.shape[1:])))
        step = max(1, SLAB_BYTES // (4 * plane))
        for x0 in range(0, self.data.shape[0], step):
            x1 = min(self.data.shape[0], x0 + step)
            src = (slice(box[0].start + x0, box[0].start + x1),) + tuple(box[1:])
            self.data[x0:x1] = cp.asarray(np.asarray(volume[src], dtype=np.float32))

    def __getitem__(self, box):
        return self.data[tuple(slice(s.start - o, s.stop - o) for s, o in zip(box, self.offset))]


def padded_spectrum(volume, start, fft_shape, mode):
    """rfftn of the mode-padded block ``volume[start : start + fft_shape]``, computed in place.

    Returns the complex64 half spectrum ``(nx, ny, nz//2+1)``.  A host volume's voxels
    under the block cross to the device once, in x-slabs (float32, at most the padded
    block's size); the padding is then gathered on the device.
    """
    nx, ny, nz = fft_shape
    nzh = nz // 2 + 1
    B = cp.empty((nx, ny, nzh), dtype=cp.complex64)
    Br = B.view(cp.float32)  # (nx, ny, 2*nzh)
    if not isinstance(volume, cp.ndarray):
        box = source_box(start, tuple(s + n for s, n in zip(start, fft_shape)), volume.shape, mode)
        if box is not None:
            volume = _DeviceBox(volume, box)
    step = max(1, SLAB_BYTES // (4 * ny * nz))
    for x0 in range(0, nx, step):
        x1 = min(nx, x0 + step)
        lo = (start[0] + x0, start[1], start[2])
        hi = (start[0] + x1, start[1] + ny, start[2] + nz)
        Br[x0:x1, :, :nz] = read_block(volume, lo, hi, mode, xp=cp, dtype=cp.float32)
    del volume
    plan = r2c_plan(fft_shape)
    plan.fft(Br, B, cufft.CUFFT_FORWARD)
    del plan  # frees its work area before the inverse plan takes one
    return B


class GpuEngine:
    """Runs blocks of kernels on the current CUDA device."""

    name = "cuda"

    def sync(self):
        cp.cuda.get_current_stream().synchronize()

    @staticmethod
    def default_budget() -> float:
        free, _ = cp.cuda.runtime.memGetInfo()
        return 0.85 * (free + cp.get_default_memory_pool().free_bytes())

    def run_block(self, volume, block, job, progress):
        """One block: ``(Partial, orientation)`` as :meth:`volsweep.engine._cpu.CpuEngine.run_block`."""
        N = tuple(int(n) for n in block.fft_shape)
        nx, ny, nz = N
        nzh = nz // 2 + 1
        total = nx * ny * nzh
        cx, cy, cz = (int(n) for n in block.core_shape)
        ncore = cx * cy * cz
        K = job.n_kernels
        wide = max(total, 2 * total, ncore) >= 2**31
        idx = np.uint64 if wide else np.uint32
        mod = _module(wide, names=())  # no Parseval templates: they take seconds to compile
        B = padded_spectrum(volume, block.start, N, job.mode)

        if job.parseval:
            params = _plan.kernel_table(job.ks, job.spacing, N, 1.0)
            dc = _plan.dc_spectrum(params) * float(B[0, 0, 0].real.get())
            pw = _plan.parseval_weights(B, N, cp).astype(cp.float32)
            del B
            res = parseval_sums(pw, params, N, progress)
            nanv = np.full(K, np.nan)
            return Partial(ncore, dc, res.get(), nanv, nanv.copy()), None

        # cuFFT's C2R is unnormalised: fold 1/N into the spectrum.
        params = _plan.kernel_table(job.ks, job.spacing, N, 1.0 / float(np.prod(N)))
        prm = cp.asarray(params.astype(np.float32))
        Y = cp.empty_like(B)
        Yr = Y.view(cp.float32)
        plan = c2r_plan(N)
        mul = mod.get_function("mul_spec")
        stats = mod.get_function("core_stats")
        nb_mul = _n_blocks(total)
        nb = _n_blocks(ncore)
        legacy = job.omap == "response"
        omap = None
        if job.omap is not None:
            omap = {"response_max": cp.full(block.core_shape, -cp.inf, dtype=cp.float32),
                    "arg": cp.zeros(block.core_shape, dtype=cp.int32)}
            if job.omap == "local_energy":
                energy = LocalEnergy(block)
                omap["local_energy_max"] = cp.full(block.core_shape, -cp.inf, dtype=cp.float32)
        fold = 0 if omap is None else (1 if legacy else 2)  # core_stats' running maximum
        if omap is not None:
            resp, arg = omap["response_max"], omap["arg"]
        else:
            resp = cp.empty(1, dtype=cp.float32)
            arg = cp.empty(1, dtype=cp.int32)
        ox, oy, oz = (np.int32(o) for o in block.core_offset)
        res = cp.empty((K, 4))
        part = cp.empty((min(K, CHUNK), nb, 4))
        for j0 in range(0, K, CHUNK):
            cnt = min(CHUNK, K - j0)
            for s in range(cnt):
                j = j0 + s
                mul((nb_mul,), (THREADS,), (B, Y, prm, np.int32(j), np.int32(nx), np.int32(ny),
                                            np.int32(nzh), idx(total)))
                plan.fft(Y, Yr, cufft.CUFFT_INVERSE)
                stats((nb,), (THREADS,), (Yr, part, np.int32(s), np.int32(ny), np.int32(2 * nzh),
                                          ox, oy, oz, np.int32(cx), np.int32(cy), np.int32(cz),
                                          idx(ncore), resp, arg, np.int32(j), np.int32(fold)))
                if job.omap == "local_energy":
                    if job.directional[j]:
                        energy.fold(Yr, job.taps[j], job.inv_energy[j], omap["local_energy_max"],
                                    omap["arg"], j)
                progress.step()
            p = part[:cnt]
            res[j0:j0 + cnt, 0] = p[:, :, 0].sum(axis=1)
            res[j0:j0 + cnt, 1] = p[:, :, 1].sum(axis=1)
            res[j0:j0 + cnt, 2] = p[:, :, 2].max(axis=1)
            res[j0:j0 + cnt, 3] = p[:, :, 3].min(axis=1)
        out = Partial.from_array(ncore, res.get())
        del plan, Y, Yr, B
        return out, omap


# ----------------------------------------------------------------------------- local energy
#: Outputs per thread along x and y in the local-energy passes (register tiling), the
#: unrolling of their tap loop, and threads per block along z.  Chosen on an H200 at
#: 800x800x200 with 25 taps: 3.2 ms a kernel (16 and no unrolling: 4.2 ms; 32: 5.2-6.3 ms).
ENERGY_SEG = 8
ENERGY_ROW = 256
ENERGY_UNROLL = 8

_ENERGY_SRC = r"""
// Separable passes of the local energy (engine/_plan.py: local_energy).  Along the pass's
// axis, out[i] = Σ_m w[m]·f(in[i + m]) (the input holds the taps' reach on both sides), or,
// along a periodic axis, f(in[(i + m − reach) mod period]).  f(v) = v²·scale on the first
// pass, v after.  Outputs are contiguous (n0, n1, n2); the input is addressed by strides.

__device__ __forceinline__ int wrap_index(int p, int period) {
    p %= period;
    return p < 0 ? p + period : p;
}

// Along x (axis 0) or y (axis 1): each thread SEG consecutive outputs along the axis.
// grid: (z tiles, the other of x/y, segments along the axis).
template <int SEG, bool SQUARE>
__global__ void __launch_bounds__(128)
energy_cols(const float* __restrict__ in, long long base, long long s0, long long s1, long long s2,
            int n0, int n1, int n2, int axis, const float* __restrict__ w, int ntaps, int periodic,
            float scale, float* __restrict__ out) {
    extern __shared__ float ws[];
    for (int m = threadIdx.x; m < ntaps; m += blockDim.x) ws[m] = w[m];
    __syncthreads();
    const int k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= n2) return;
    const int other = blockIdx.y;
    const int a0 = blockIdx.z * SEG;
    const int na = axis == 0 ? n0 : n1;
    const long long sa = axis == 0 ? s0 : s1;
    const long long row = base + (long long)k * s2 + (axis == 0 ? (long long)other * s1 : (long long)other * s0);
    const int reach = ntaps / 2;
    float acc[SEG];
#pragma unroll
    for (int s = 0; s < SEG; ++s) acc[s] = 0.0f;
#pragma unroll UNROLL_Q
    for (int q = 0; q < SEG + ntaps - 1; ++q) {
        int p = a0 + q;
        if (periodic) p = wrap_index(p - reach, na);
        else if (p >= na + ntaps - 1) break;
        float v = in[row + (long long)p * sa];
        if (SQUARE) v = v * v * scale;
#pragma unroll
        for (int s = 0; s < SEG; ++s) {
            const int m = q - s;
            if (m >= 0 && m < ntaps) acc[s] = fmaf(ws[m], v, acc[s]);
        }
    }
    const long long so = axis == 0 ? (long long)n1 * n2 : (long long)n2;
    const long long o = (long long)k + (axis == 0 ? (long long)other * n2 : (long long)other * n1 * n2);
#pragma unroll
    for (int s = 0; s < SEG; ++s)
        if (a0 + s < na) out[o + (long long)(a0 + s) * so] = acc[s];
}

// Along z (contiguous): a block's ROW outputs from a shared tile; KEEP folds the running
// maximum and its kernel index instead of writing out.  grid: (z tiles, y, x).
template <bool KEEP>
__global__ void __launch_bounds__(ROW)
energy_rows(const float* __restrict__ in, long long base, long long s0, long long s1,
            int n0, int n1, int n2, const float* __restrict__ w, int ntaps, int periodic,
            float* __restrict__ out, int* __restrict__ arg, int kid) {
    extern __shared__ float sh[];
    float* ws = sh;
    float* tile = sh + ntaps;
    for (int m = threadIdx.x; m < ntaps; m += ROW) ws[m] = w[m];
    const int k0 = blockIdx.x * ROW, j = blockIdx.y, i = blockIdx.z;
    const long long row = base + (long long)i * s0 + (long long)j * s1;
    const int reach = ntaps / 2, span = ROW + ntaps - 1;
    for (int q = threadIdx.x; q < span; q += ROW) {
        int p = k0 + q;
        if (periodic) p = wrap_index(p - reach, n2);
        tile[q] = (periodic || p < n2 + ntaps - 1) ? in[row + p] : 0.0f;
    }
    __syncthreads();
    const int k = k0 + threadIdx.x;
    if (k >= n2) return;
    float acc = 0.0f;
    for (int m = 0; m < ntaps; ++m) acc = fmaf(ws[m], tile[threadIdx.x + m], acc);
    const long long o = ((long long)i * n1 + j) * n2 + k;
    if (KEEP) {
        if (acc > out[o]) { out[o] = acc; arg[o] = kid; }
    } else {
        out[o] = acc;
    }
}
"""

_ENERGY = None


def _energy_module():
    global _ENERGY
    if _ENERGY is None:
        names = (f"energy_cols<{ENERGY_SEG}, true>", f"energy_cols<{ENERGY_SEG}, false>",
                 "energy_rows<true>", "energy_rows<false>")
        src = f"#define ROW {ENERGY_ROW}\n#define UNROLL_Q {ENERGY_UNROLL}\n" + _ENERGY_SRC
        mod = cp.RawModule(code=src, options=("-std=c++14",), name_expressions=names)
        _ENERGY = {n: mod.get_function(n) for n in names}
    return _ENERGY


class LocalEnergy:
    """The local energy of a block's responses and its running maximum, on the device.

    Three separable passes (x, y, z) over the core and the taps' reach, fused with the
    squaring and the running maximum; equal to :func:`volsweep.engine._plan.local_energy`
    to float32 rounding.  Scratch buffers are allocated once per block.
    """

    def __init__(self, block):
        self.block = block
        self._scratch = {}

    def _buffer(self, name, shape):
        n = int(np.prod(shape))
        buf = self._scratch.get(name)
        if buf is None or buf.size < n:
            buf = self._scratch[name] = cp.empty(n, dtype=cp.float32)
        return buf[:n].reshape(shape)

    def fold(self, g, taps, inv_energy, best, arg, kid):
        """Fold kernel ``kid``'s local energy of response ``g`` into ``best``/``arg``."""
        fn = _energy_module()
        block = self.block
        reach = _plan.taps_halo(taps)
        core = [int(c) for c in block.core_shape]
        per = [bool(p) for p in block.periodic]
        ext = [0 if per[d] else reach[d] for d in range(3)]
        start = [0 if per[d] else int(block.core_offset[d]) - reach[d] for d in range(3)]
        st = [s // g.itemsize for s in g.strides]
        base = sum(a * b for a, b in zip(start, st))
        w = [_plan._taps_on(cp, t) for t in taps]
        i32, i64 = np.int32, np.int64
        # x: squared and scaled, the core along x with the reach along y and z
        n = (core[0], core[1] + 2 * ext[1], core[2] + 2 * ext[2])
        px = self._buffer("x", n)
        grid = (-(-n[2] // 128), n[1], -(-n[0] // ENERGY_SEG))
        fn[f"energy_cols<{ENERGY_SEG}, true>"](
            grid, (128,), (g, i64(base), i64(st[0]), i64(st[1]), i64(st[2]), i32(n[0]), i32(n[1]),
                           i32(n[2]), i32(0), w[0], i32(len(w[0])), i32(per[0]), np.float32(inv_energy), px),
            shared_mem=4 * len(w[0]))
        # y
        m = (core[0], core[1], n[2])
        py = self._buffer("y", m)
        grid = (-(-m[2] // 128), m[0], -(-m[1] // ENERGY_SEG))
        fn[f"energy_cols<{ENERGY_SEG}, false>"](
            grid, (128,), (px, i64(0), i64(n[1] * n[2]), i64(n[2]), i64(1), i32(m[0]), i32(m[1]),
                           i32(m[2]), i32(1), w[1], i32(len(w[1])), i32(per[1]), np.float32(1), py),
            shared_mem=4 * len(w[1]))
        # z, folded into the running maximum
        grid = (-(-core[2] // ENERGY_ROW), core[1], core[0])
        fn["energy_rows<true>"](
            grid, (ENERGY_ROW,), (py, i64(0), i64(m[1] * m[2]), i64(m[2]), i32(core[0]), i32(core[1]),
                                  i32(core[2]), w[2], i32(len(w[2])), i32(per[2]), best, arg, i32(kid)),
            shared_mem=4 * (2 * len(w[2]) + ENERGY_ROW - 1))
