"""Parseval path of the GPU sweep: variants of the kernels, timed and checked in one run.

For ``mode="wrap"`` with statistics ⊆ {energy, std, mean} the sweep needs only
``Σ_k pw(k)·K̂(k)²`` per kernel (pw = |V̂|² with the half-spectrum weights); this
script times the CUDA kernels that compute it against the bare CuPy ``irfftn`` of the
same shape, for several ξ, and checks every variant:

* against a float64 reference (the aliased spectrum of ``wavelet.sampled_spectrum``
  evaluated on the device in float64, times |V̂|² in float64) on a few kernels,
* against the kernel before the 2026-12 rework (``OLD_SRC`` below, kept here only as
  the baseline) on all kernels,
* run to run: two calls must give bit-identical sums.

Usage (on the GPU machine)::

    PYTHONPATH=workflow python3 benchmarks/bench_parseval.py --out parseval.json
    PYTHONPATH=workflow python3 benchmarks/bench_parseval.py --shape 200 200 200 --xi 1 2

Per-kernel time = (t(K kernels) − t(K/8 kernels)) / (K − K/8), each the median of
``--reps`` CUDA-event-timed calls, so that per-call setup cancels.  ``--best`` writes
the fastest correct setting (least sum of its per-kernel times over the ξ timed) as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "workflow"))

from volsweep.engine import _gpu as eg  # noqa: E402
from volsweep.engine import wavelet as wv  # noqa: E402
from volsweep.engine._plan import KernelSet, kernel_table  # noqa: E402
from volsweep.engine._plan import parseval_weights as _parseval_weights  # noqa: E402

import cupy as cp  # noqa: E402
import cupyx.scipy.fft as cfft  # noqa: E402

from _timing import cuda_times, kernel_grid

#: (general kernel KB, iso KB, waves): the variants timed.
VARIANTS = [(2, 8, 2), (1, 8, 2), (4, 8, 2), (2, 8, 1), (2, 8, 4)]


def grid_kernels(theta, phi, xi):
    """Every (θ, φ) of the grid as its own kernel (no deduplication: at ξ = 1 the sweep
    computes one kernel, here each is timed, so that per-kernel figures exist for every ξ)."""
    t, p = np.meshgrid(theta, phi, indexing="ij")
    u = wv.axis_vector(t.ravel(), p.ravel())
    n = len(u)
    return KernelSet(u=u, xi=np.full(n, float(xi)), a=np.ones(n), rep=np.arange(n), inverse=np.arange(n))


def kernel_params(ks, a, spacing, N, norm):
    """The kernel table of ``ks`` at scale ``a``."""
    ks = KernelSet(u=ks.u, xi=ks.xi, a=np.full(len(ks.xi), float(a)), rep=ks.rep, inverse=ks.inverse)
    return kernel_table(ks, spacing, N, norm)


def _time(fn, reps):
    out = cuda_times(fn, reps)
    return statistics.median(out), out


def ref_sum(pw64, N, a, theta, phi, xi, spacing):
    """float64 Σ pw·K̂² with K̂ = the aliased continuous spectrum (wavelet.sampled_spectrum), on the device."""
    u = wv.axis_vector(theta, phi)
    k = wv.spectrum_constants(a, xi, spacing, N, u, 1.0)
    w0 = [cp.asarray(wv._freq_index(n, d == 2) * dw) for d, (n, dw) in enumerate(zip(N, k["dw"]))]
    out = cp.zeros((len(w0[0]), len(w0[1]), len(w0[2])))
    gx, gy, gz = k["G"]
    for ix in range(-gx, gx + 1):
        wx = (w0[0] + ix * k["period"][0])[:, None, None]
        for iy in range(-gy, gy + 1):
            wy = (w0[1] + iy * k["period"][1])[None, :, None]
            for iz in range(-gz, gz + 1):
                wz = (w0[2] + iz * k["period"][2])[None, None, :]
                w2 = wx * wx + wy * wy + wz * wz
                t = u[0] * wx + u[1] * wy + u[2] * wz
                p = k["a2"] * w2 + k["c"] * t * t
                out += cp.where(k["ae2"] * w2 < k["pcut"], p * cp.exp(-0.5 * p), 0.0)
    out *= k["scale"]
    return float(cp.sum(pw64 * out * out))


_OLD = {}


def old_sums(pw, params, N):
    """The kernel before the rework (4 kernels a launch, one warp per row, exact per-point pruning)."""
    nx, ny, nz = N
    nzh = nz // 2 + 1
    total = nx * ny * nzh
    if "old" not in _OLD:
        _OLD["old"] = cp.RawModule(code=OLD_SRC.replace("IDX_T", "unsigned int"), options=("-std=c++14",))
    kern = _OLD["old"].get_function("parseval")
    prm = cp.asarray(params.astype(np.float32))
    nb = int(max(1, min(-(-total // 256), cp.cuda.Device().attributes["MultiProcessorCount"] * 8)))
    K = len(params)
    part = cp.empty((K, nb, 4))

    def run():
        for s in range(0, K, 4):
            nk = min(4, K - s)
            kern((nb,), (256,), (pw, part, prm, np.int32(s), np.int32(nk), np.int32(s),
                                 np.int32(nx), np.int32(ny), np.int32(nzh), np.uint32(total)))
        return part[:, :, 1].sum(axis=1)
    return run


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", type=int, nargs=3, default=(800, 800, 200))
    ap.add_argument("--a", type=float, default=1.0)
    ap.add_argument("--xi", type=float, nargs="+", default=[1.0, 2.0, 4.0, 0.5])
    ap.add_argument("--kernels", type=int, default=64)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--nref", type=int, default=2, help="kernels per ξ checked against float64")
    ap.add_argument("--out", default=None)
    ap.add_argument("--best", default=None, help="write the fastest correct variant here (JSON)")
    ap.add_argument("--ncu", action="store_true", help="launch each kernel once (for ncu) and exit")
    args = ap.parse_args(argv)
    N = tuple(args.shape)
    spacing = (1.0, 1.0, 1.0)
    rng = np.random.default_rng(0)
    vol = cp.asarray(rng.random(N, dtype=np.float32))
    B = cfft.rfftn(vol)
    pw = _parseval_weights(B, N, cp).astype(cp.float32)
    theta, phi = kernel_grid(args.kernels)
    K = len(theta) * len(phi)
    k8 = max(1, K // 8)
    sets = {}
    for xi in args.xi:
        ks = grid_kernels(theta, phi, xi)
        sets[xi] = (ks, kernel_params(ks, args.a, spacing, N, 1.0))

    if args.ncu:  # one launch of each kernel of interest, for `ncu -k regex:parseval`
        th2, ph2 = theta[:2], phi[:2]
        p2 = kernel_params(grid_kernels(th2, ph2, 2.0), args.a, spacing, N, 1.0)
        p1 = kernel_params(grid_kernels(th2, ph2, 1.0), args.a, spacing, N, 1.0)
        for kb, ikb, w in VARIANTS[:2]:
            eg.parseval_sums(pw, p2[:kb], N, names=eg.parseval_names(kb, ikb), waves=w)
        old_sums(pw, p2[:4], N)()
        eg.parseval_sums(pw, p1[:4], N)
        cp.cuda.get_current_stream().synchronize()
        return

    spec = cp.asarray((rng.random((N[0], N[1], N[2] // 2 + 1)) + 1j).astype(np.complex64))
    t_irfft, _ = _time(lambda: cfft.irfftn(spec, s=N), 20)
    spec = None  # frees the device buffer
    print(f"shape {N}, a = {args.a}, {K} kernels per ξ; irfftn {t_irfft * 1e3:.3f} ms", flush=True)
    res = {"shape": list(N), "a": args.a, "kernels": K, "irfftn_ms": t_irfft * 1e3,
           "device": str(cp.cuda.runtime.getDeviceProperties(0)["name"]), "cupy": cp.__version__,
           "xi": {}}

    # float64 references (a few kernels per ξ)
    B64 = B.astype(cp.complex128)
    pw64 = _parseval_weights(B64, N, cp)
    del B64
    refs = {}
    for xi, (ks, params) in sets.items():
        refs[xi] = []
        for j in range(min(args.nref, K)):
            th, ph = np.arcsin(-ks.u[j, 1]), np.arctan2(ks.u[j, 2], ks.u[j, 0])
            refs[xi].append(ref_sum(pw64, N, args.a, th, ph, xi, spacing))
    del pw64
    cp.get_default_memory_pool().free_all_blocks()

    setting = {f"kb{kb} iso{ikb} w{w}": (kb, ikb, w) for kb, ikb, w in VARIANTS}
    rows = ["old"] + list(setting)
    table = {}
    old_vals = {}
    for xi, (ks, params) in sets.items():
        run = old_sums(pw, params, N)
        run8 = old_sums(pw, params[:k8], N)
        t, _ = _time(run, args.reps)
        t8, _ = _time(run8, args.reps)
        v = run().get()
        old_vals[xi] = v
        per = (t - t8) / (K - k8)
        ref_err = max(abs(v[j] / r - 1) for j, r in enumerate(refs[xi]))
        table[("old", xi)] = dict(per_kernel_ms=per * 1e3, ratio=per / t_irfft, ref_err=ref_err,
                                  old_err=0.0, deterministic=bool(np.array_equal(v, run().get())))
    for kb, ikb, w in VARIANTS:
        label = f"kb{kb} iso{ikb} w{w}"
        names = eg.parseval_names(kb, ikb)
        for xi, (ks, params) in sets.items():
            def run(p=params):
                return eg.parseval_sums(pw, p, N, names=names, waves=w)
            t, _ = _time(run, args.reps)
            t8, _ = _time(lambda: run(params[:k8]), args.reps)
            v = run().get()
            v2 = run().get()
            per = (t - t8) / (K - k8)
            ref_err = max(abs(v[j] / r - 1) for j, r in enumerate(refs[xi]))
            old_err = float(np.max(np.abs(v / old_vals[xi] - 1)))
            table[(label, xi)] = dict(per_kernel_ms=per * 1e3, ratio=per / t_irfft, ref_err=ref_err,
                                      old_err=old_err, deterministic=bool(np.array_equal(v, v2)),
                                      finite=bool(np.all(np.isfinite(v))))
            print(f"{label:22s} ξ={xi:<4g} {per * 1e3:7.4f} ms  {per / t_irfft:6.3f}× irfftn  "
                  f"vs f64 {ref_err:.1e}  vs old {old_err:.1e}  det {table[(label, xi)]['deterministic']}",
                  flush=True)
    try:
        mod = eg._module(False, eg.parseval_names())
        res["regs"] = {n: int(mod.get_function(n).num_regs) for n in eg.parseval_names()}
    except Exception as e:  # pragma: no cover
        res["regs"] = repr(e)

    # summary table, printed last
    print("\n| variant | " + " | ".join(f"ξ={x:g} ms (×irfftn)" for x in sets) + " | worst vs f64 | det |")
    print("| --- |" + " --- |" * (len(sets) + 2))
    best, best_t = None, float("inf")
    for label in rows:
        cells = [table[(label, x)] for x in sets]
        worst = max(c["ref_err"] for c in cells)
        det = all(c["deterministic"] for c in cells)
        print(f"| {label} | " + " | ".join(f"{c['per_kernel_ms']:.4f} ({c['ratio']:.3f})" for c in cells)
              + f" | {worst:.1e} | {det} |")
        res["xi"][label] = {str(x): table[(label, x)] for x in sets}
        ok = label != "old" and worst < 1e-5 and det and all(c.get("finite", True) for c in cells)
        score = sum(table[(label, x)]["per_kernel_ms"] for x in sets)
        if ok and score < best_t:
            best, best_t = label, score
    print(f"irfftn {t_irfft * 1e3:.3f} ms; best: {best}; regs {res.get('regs')}")
    res["best"] = best
    if args.out:
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1, default=float)
    if args.best and best is not None:
        kb, ikb, w = setting[best]
        with open(args.best, "w") as f:
            json.dump(dict(kb=kb, iso_kb=ikb, waves=w), f)


OLD_SRC = r"""
typedef IDX_T idx_t;

#define NP 20

// Aliased spectrum at one frequency, exactly pruned: only terms with p = ωᵀMω < p_cut.
// At fixed (ω_x, ω_y), p is a quadratic in ω_z, so the images of z needed are one range.
__device__ __forceinline__ float spec(float fx, float fy, float fz, const float* __restrict__ P) {
    const float w0x = fx * P[0], w0y = fy * P[1], w0z = fz * P[2];
    const float perz = P[5], ux = P[6], uy = P[7], uz = P[8], a2 = P[9], c = P[10], pcut = P[12];
    const float xlim = P[17], inv_alpha = P[19];
    const int gx = (int)P[14], gy = (int)P[15], gz = (int)P[16];
    const float inv_perz = 1.0f / perz;
    float acc = 0.0f;
    for (int ix = -gx; ix <= gx; ++ix) {
        const float wx = w0x + ix * P[3];
        const float bx = wx * wx;
        if (bx >= xlim) continue;
        for (int iy = -gy; iy <= gy; ++iy) {
            const float wy = w0y + iy * P[4];
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
    return acc * P[13];
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

#define KB 4
#define CH 4
// Parseval: Σ pw·K̂² for up to KB kernels per launch.  One warp per rfft row (kx, ky):
// the (ω_x, ω_y) image pairs depend on the row only, so lane p computes pair p once per
// row and kernel (its ω_z interval), the warp reads it back by shuffles, and each lane
// sums the terms of its own kz (CH·32 frequencies per pass).  Per-lane float64 partials,
// one fixed-shape block reduction per kernel into part[(slot0 + q, block, 1)].
extern "C" __global__ void parseval(const float* __restrict__ pw, double* __restrict__ part,
                                    const float* __restrict__ prm, const int j0, const int nk,
                                    const int slot0, const int nx, const int ny, const int nzh,
                                    const idx_t total) {
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
#pragma unroll
        for (int q = 0; q < KB; ++q) {
            if (q < nk) {
                const float* P = prm + NP * (j0 + q);
                const float w0x = fx * P[0], w0y = fy * P[1], dwz = P[2], perz = P[5];
                const float ux = P[6], uy = P[7], uz = P[8], a2 = P[9], c = P[10], pcut = P[12];
                const float xlim = P[17], inv_alpha = P[19], scale = P[13];
                const int gx = (int)P[14], gy = (int)P[15], gz = (int)P[16];
                const float inv_perz = 1.0f / perz;
                const int nyi = 2 * gy + 1, npairs = (2 * gx + 1) * nyi;
                double sq = 0.0;
                for (int kzb = 0; kzb < nzh; kzb += 32 * CH) {
                    float acc[CH];
#pragma unroll
                    for (int cc = 0; cc < CH; ++cc) acc[cc] = 0.0f;
                    for (int p0 = 0; p0 < npairs; p0 += 32) {
                        float bxy = 0.0f, txy = 0.0f, wc = 0.0f, h = -1.0f;  // h < 0: no term
                        const int pp = p0 + lane;
                        if (pp < npairs) {
                            const float wx = w0x + (pp / nyi - gx) * P[3];
                            const float wy = w0y + (pp % nyi - gy) * P[4];
                            const float bx = wx * wx;
                            bxy = bx + wy * wy;
                            txy = ux * wx + uy * wy;
                            const float rxy = pcut - a2 * bxy;
                            const float disc = a2 * (rxy - c * txy * txy) + c * uz * uz * rxy;
                            if (bx < xlim && disc > 0.0f) {
                                wc = -c * txy * uz * inv_alpha;
                                h = sqrtf(disc) * inv_alpha;
                            }
                        }
                        const int np = min(32, npairs - p0);
                        for (int p = 0; p < np; ++p) {
                            const float hp = __shfl_sync(FULL, h, p);
                            if (hp < 0.0f) continue;  // warp-uniform
                            const float bp = __shfl_sync(FULL, bxy, p);
                            const float tp = __shfl_sync(FULL, txy, p);
                            const float cp = __shfl_sync(FULL, wc, p);
#pragma unroll
                            for (int cc = 0; cc < CH; ++cc) {
                                const float w0z = (float)(kzb + cc * 32 + lane) * dwz;
                                const int lo = max(-gz, (int)ceilf((cp - hp - w0z) * inv_perz));
                                const int hi = min(gz, (int)floorf((cp + hp - w0z) * inv_perz));
                                for (int iz = lo; iz <= hi; ++iz) {
                                    const float wz = w0z + iz * perz;
                                    const float b = bp + wz * wz;
                                    const float t = tp + uz * wz;
                                    const float pv = a2 * b + c * t * t;
                                    acc[cc] += pv * __expf(-0.5f * pv);
                                }
                            }
                        }
                    }
#pragma unroll
                    for (int cc = 0; cc < CH; ++cc) {
                        const int kz = kzb + cc * 32 + lane;
                        if (kz < nzh) {
                            const float k = acc[cc] * scale;
                            sq += (double)(prow[kz] * (k * k));
                        }
                    }
                }
                s[q] += sq;
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

"""


if __name__ == "__main__":
    main()
