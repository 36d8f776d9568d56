"""Benchmark of volsweep.sweep against its floors and the users' baselines.

Every figure is a ratio measured in the same run (medians of repetitions; GPU
times with CUDA events).  Usage::

    python benchmarks/bench_sweep.py --gpu --cpu --out results.json
    python benchmarks/bench_sweep.py --cpu --cpu-shape 128 128 128
    python benchmarks/bench_sweep.py --gpu --parseval-only --parseval-xi 1 2 4

GPU section (800×800×200 by default): per-kernel time of the sweep in ``wrap``
and ``reflect`` over a block of ≥ 200 kernels, against the bare CuPy ``irfftn``
of the same padded shape, against cupyx ``fftconvolve`` with a 61³ kernel, the
Parseval path, the extrapolated 100×100×19 grid, peak device memory; and at 200³
one step of the original nested loop (spatial kernel + cupyx ``ndimage.convolve``
on the flattened arrays, as in the user's post).
CPU section (128³): per kernel against ``scipy.fft.irfftn`` (all workers, same
padded shape) and ``scipy.signal.fftconvolve`` with a 31³ kernel, in wall time and in
process CPU time (the robust figure on a shared machine), medians of ``--reps``
interleaved repetitions with their spread.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "workflow"))

from volsweep import sweep  # noqa: E402
from volsweep.engine.wavelet import sample_kernel  # noqa: E402

from _timing import cuda_times, kernel_grid


def _gpu_time(fn, reps, warm=1):
    return statistics.median(cuda_times(fn, reps, warm))


def _wall(fn, reps, warm=1):
    for _ in range(warm):
        fn()
    out = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return statistics.median(out)


def skern3(cp, x, y, z, a, theta, phi, xi):
    """The user's kernel (seed 002), verbatim in its arithmetic."""
    x = x - cp.max(x) / 2
    y = y - cp.max(y) / 2
    z = z - cp.max(z) / 2
    rT = x * cp.cos(phi) * cp.cos(theta) - y * cp.sin(theta) + z * cp.sin(phi) * cp.cos(theta)
    rp = x * cp.cos(phi) * cp.sin(theta) + y * cp.cos(theta) + z * cp.sin(phi) * cp.sin(theta)
    rp2 = -1 * x * cp.sin(phi) + z * cp.cos(phi)
    A = (3 - (rp / a) ** 2 - (1 / xi ** 2) * (rT / a) ** 2 - (rp2 / a) ** 2)
    B = cp.exp((-1 / 2) * ((rp / a) ** 2 + (1 / xi ** 2) * (rT / a) ** 2 + (rp2 / a) ** 2))
    return A * B


def bench_gpu(args, res):
    import cupy as cp
    import cupyx.scipy.fft as cfft
    from cupyx.scipy.ndimage import convolve as convolve_gpu
    from cupyx.scipy.signal import fftconvolve

    pool = cp.get_default_memory_pool()
    props = cp.cuda.runtime.getDeviceProperties(0)
    res["gpu"] = {"device": props["name"].decode() if isinstance(props["name"], bytes) else props["name"],
                  "cupy": cp.__version__}
    shape = tuple(args.shape)
    rng = np.random.default_rng(0)
    vol = cp.asarray(rng.random(shape, dtype=np.float32))
    vbytes = vol.nbytes
    theta, phi = kernel_grid(args.kernels)
    K = len(theta) * len(phi)
    g = res["gpu"]
    g.update(shape=list(shape), kernels=K, a=args.a, xi=args.xi)

    for mode in args.modes:
        kw = dict(a=args.a, mode=mode, device="cuda", progress=False)
        pool.free_all_blocks()
        base = pool.total_bytes()
        ds = sweep(vol, theta, phi, [args.xi], **kw)  # warm-up (compiles kernels)
        peak = pool.total_bytes() - base
        t = _gpu_time(lambda: sweep(vol, theta, phi, [args.xi], **kw), args.reps, warm=0)
        t1 = _gpu_time(lambda: sweep(vol, theta[:1], phi[:1], [args.xi], **kw), args.reps, warm=0)
        N = tuple(ds.attrs["fft_shape"])
        per = (t - t1) / (K - 1)
        # bare irfftn of the same padded shape: default call, and plan + overwrite_x
        spec = cp.asarray((rng.random((N[0], N[1], N[2] // 2 + 1)) + 1j).astype(np.complex64))
        t_irfft = _gpu_time(lambda: cfft.irfftn(spec, s=N), 20)
        plan = cfft.get_fft_plan(spec, shape=N, value_type="C2R")
        work = spec.copy()
        t_irfft_plan = _gpu_time(lambda: cfft.irfftn(work, s=N, plan=plan, overwrite_x=True), 20)
        plan = work = spec = None  # frees the device buffers
        g[mode] = dict(fft_shape=list(N), total_s=t, setup_s=t1, per_kernel_ms=per * 1e3,
                       irfftn_ms=t_irfft * 1e3, irfftn_plan_ms=t_irfft_plan * 1e3,
                       ratio_vs_irfftn=per / t_irfft, ratio_vs_irfftn_plan=per / t_irfft_plan,
                       peak_bytes=peak, peak_over_volume=peak / vbytes)
        print(f"[gpu] {mode}: N={N} per-kernel {per*1e3:.3f} ms, irfftn {t_irfft*1e3:.3f} ms "
              f"(plan {t_irfft_plan*1e3:.3f}), peak {peak/vbytes:.2f}x volume", flush=True)
        pool.free_all_blocks()

    # Parseval path (wrap, energy/std/mean only)
    kw = dict(a=args.a, mode="wrap", device="cuda", progress=False, stats=("energy", "std", "mean"))
    ds = sweep(vol, theta, phi, [args.xi], **kw)
    assert ds.attrs["method"] == "parseval"
    t = _gpu_time(lambda: sweep(vol, theta, phi, [args.xi], **kw), args.reps, warm=0)
    t1 = _gpu_time(lambda: sweep(vol, theta[:1], phi[:1], [args.xi], **kw), args.reps, warm=0)
    per = (t - t1) / (K - 1)
    g["parseval"] = dict(per_kernel_ms=per * 1e3, ratio_vs_irfftn=per / g["wrap"]["irfftn_ms"] * 1e3
                         if "wrap" in g else None)
    print(f"[gpu] parseval per-kernel {per*1e3:.4f} ms", flush=True)

    # Orientation map overhead (wrap)
    kw = dict(a=args.a, mode="wrap", device="cuda", progress=False, orientation_map=True)
    t1 = _gpu_time(lambda: sweep(vol, theta[:1], phi[:1], [args.xi], **kw), 2, warm=1)
    t = _gpu_time(lambda: sweep(vol, theta, phi, [args.xi], **kw), 2, warm=0)
    g["orientation_map_per_kernel_ms"] = (t - t1) / (K - 1) * 1e3
    g["orientation_map_setup_s"] = t1
    print(f"[gpu] orientation_map per-kernel {(t - t1) / (K - 1) * 1e3:.3f} ms, setup {t1:.2f} s", flush=True)
    pool.free_all_blocks()

    # cupyx fftconvolve with a 61^3 kernel, per parameter
    k61 = cp.asarray(sample_kernel(3.0, 0.3, 0.2, 2.0, halfwidth=(30, 30, 30)).astype(np.float32))
    base = pool.total_bytes()
    fftconvolve(vol, k61, mode="same")
    fpeak = pool.total_bytes() - base
    t_fc = _gpu_time(lambda: fftconvolve(vol, k61, mode="same"), 5)
    g["fftconvolve61_ms"] = t_fc * 1e3
    g["fftconvolve61_peak_over_volume"] = fpeak / vbytes
    for mode in args.modes:
        g[mode]["speedup_vs_fftconvolve61"] = t_fc / (g[mode]["per_kernel_ms"] / 1e3)
    k61 = None  # frees the device buffer
    pool.free_all_blocks()

    # Full grid extrapolation (100 x 100 x 19 kernels, wrap per-kernel time, no dedup credit)
    n_full = 100 * 100 * 19
    for mode in args.modes:
        g[mode]["full_grid_min"] = n_full * g[mode]["per_kernel_ms"] / 1e3 / 60 + g[mode]["setup_s"] / 60

    # Original nested loop at 200^3, one step (skern3 + ndimage.convolve on flattened arrays)
    if args.nested:
        n = 200
        v2 = rng.random((n, n, n))
        xs = np.uint16(np.linspace(0, n, n))
        x, y, z = np.meshgrid(xs, xs, xs)
        x, y, z = (cp.asarray(c.ravel()) for c in (x, y, z))
        f = cp.asarray(v2.ravel())

        def step():
            w = skern3(cp, x, y, z, cp.asarray(1.0), cp.asarray(0.3), cp.asarray(0.2), cp.asarray(2.0))
            G = convolve_gpu(f, w)
            return cp.sum(cp.abs(G) ** 2), cp.sqrt(cp.var(G)), cp.max(G)

        t_nested = _gpu_time(step, 1, warm=0)
        v2d = cp.asarray(v2.astype(np.float32))
        th2, ph2 = kernel_grid(64)
        kw = dict(a=1.0, mode="reflect", device="cuda", progress=False)
        sweep(v2d, th2, ph2, [2.0], **kw)
        t64 = _gpu_time(lambda: sweep(v2d, th2, ph2, [2.0], **kw), 3, warm=0)
        per200 = t64 / (len(th2) * len(ph2))
        g["nested_200_s"] = t_nested
        g["sweep_200_per_kernel_ms"] = per200 * 1e3
        g["speedup_vs_nested"] = t_nested / per200
        print(f"[gpu] nested loop 200^3 one step {t_nested:.2f} s; sweep {per200*1e3:.3f} ms/kernel", flush=True)


def bench_parseval(args, res):
    """Parseval path only (wrap; energy/std/mean; no inverse FFT), per kernel, for each ξ of
    ``--parseval-xi``, against the bare CuPy ``irfftn`` of the same shape (same run)."""
    import cupy as cp
    import cupyx.scipy.fft as cfft

    props = cp.cuda.runtime.getDeviceProperties(0)
    g = res.setdefault("gpu", {"device": props["name"].decode() if isinstance(props["name"], bytes)
                               else props["name"], "cupy": cp.__version__})
    shape = tuple(args.shape)
    rng = np.random.default_rng(0)
    vol = cp.asarray(rng.random(shape, dtype=np.float32))
    theta, phi = kernel_grid(args.kernels)
    K = len(theta) * len(phi)
    out = g["parseval_xi"] = {}
    t_irfft = None
    for xi in args.parseval_xi:
        kw = dict(a=args.a, mode="wrap", device="cuda", progress=False, stats=("energy", "std", "mean"))
        ds = sweep(vol, theta, phi, [xi], **kw)  # warm-up (compiles kernels)
        assert ds.attrs["method"] == "parseval"
        if t_irfft is None:
            N = tuple(ds.attrs["fft_shape"])
            spec = cp.asarray((rng.random((N[0], N[1], N[2] // 2 + 1)) + 1j).astype(np.complex64))
            t_irfft = _gpu_time(lambda: cfft.irfftn(spec, s=N), 20)
            spec = None  # frees the device buffer
            g["parseval_irfftn_ms"] = t_irfft * 1e3
        t = _gpu_time(lambda: sweep(vol, theta, phi, [xi], **kw), args.reps, warm=0)
        t1 = _gpu_time(lambda: sweep(vol, theta[:1], phi[:1], [xi], **kw), args.reps, warm=0)
        per = (t - t1) / (K - 1)
        out[str(xi)] = dict(per_kernel_ms=per * 1e3, ratio_vs_irfftn=per / t_irfft, kernels=K,
                            total_s=t, setup_s=t1)
        print(f"[gpu] parseval xi={xi:g}: per-kernel {per*1e3:.4f} ms = {per/t_irfft:.3f}x irfftn "
              f"({t_irfft*1e3:.3f} ms), {K} kernels, setup {t1*1e3:.1f} ms", flush=True)


def _wall_cpu(fn, reps, warm=1):
    """Medians of wall time and of process CPU time (all threads): the CPU figure is the
    robust one on a shared machine (it does not count time spent waiting for a core)."""
    for _ in range(warm):
        fn()
    wall, cpu = [], []
    for _ in range(reps):
        c, t = time.process_time(), time.perf_counter()
        fn()
        wall.append(time.perf_counter() - t)
        cpu.append(time.process_time() - c)
    return statistics.median(wall), statistics.median(cpu), (min(wall), max(wall))


def bench_cpu(args, res):
    import scipy
    import scipy.fft as sfft
    from scipy.signal import fftconvolve

    shape = tuple(args.cpu_shape)
    rng = np.random.default_rng(1)
    vol = rng.random(shape).astype(np.float32)
    theta, phi = kernel_grid(args.cpu_kernels)
    K = len(theta) * len(phi)
    c = res["cpu"] = dict(shape=list(shape), kernels=K, cores=os.cpu_count(), scipy=scipy.__version__,
                          processor=platform.processor() or platform.machine(), xi=args.xi, a=args.a,
                          load_before=os.getloadavg()[0])
    k31 = sample_kernel(2.0, 0.3, 0.2, 1.5, halfwidth=(15, 15, 15)).astype(np.float32)
    for mode in args.modes:
        kw = dict(a=args.a, mode=mode, device="cpu", progress=False)
        ds = sweep(vol, theta, phi, [args.xi], **kw)  # warm-up (numba compile or cache load)
        N = tuple(ds.attrs["fft_shape"])
        spec = (rng.random((N[0], N[1], N[2] // 2 + 1)) + 1j).astype(np.complex64)
        # interleave the timed calls so that load from other processes hits all of them alike
        rows = []
        for _ in range(args.reps):
            t = _wall_cpu(lambda: sweep(vol, theta, phi, [args.xi], **kw), 1, warm=0)
            t1 = _wall_cpu(lambda: sweep(vol, theta[:1], phi[:1], [args.xi], **kw), 1, warm=0)
            ir = _wall_cpu(lambda: sfft.irfftn(spec, s=N, workers=-1), 3, warm=0)
            fc = _wall_cpu(lambda: fftconvolve(vol, k31, mode="same"), 1, warm=0)
            rows.append(((t[0] - t1[0]) / (K - 1), (t[1] - t1[1]) / (K - 1), ir[0], ir[1], fc[0], fc[1]))
        per_w, per_c, ir_w, ir_c, fc_w, fc_c = (statistics.median(r[i] for r in rows) for i in range(6))
        ratio_w = [r[0] / r[2] for r in rows]
        ratio_c = [r[1] / r[3] for r in rows]
        c[mode] = dict(fft_shape=list(N), per_kernel_ms=per_w * 1e3, per_kernel_cpu_ms=per_c * 1e3,
                       irfftn_ms=ir_w * 1e3, irfftn_cpu_ms=ir_c * 1e3,
                       fftconvolve31_ms=fc_w * 1e3, fftconvolve31_cpu_ms=fc_c * 1e3,
                       ratio_vs_irfftn=statistics.median(ratio_w), ratio_vs_irfftn_spread=[min(ratio_w), max(ratio_w)],
                       ratio_vs_irfftn_cpu=statistics.median(ratio_c),
                       ratio_vs_irfftn_cpu_spread=[min(ratio_c), max(ratio_c)],
                       speedup_vs_fftconvolve31=statistics.median(r[4] / r[0] for r in rows),
                       speedup_vs_fftconvolve31_cpu=statistics.median(r[5] / r[1] for r in rows))
        m = c[mode]
        print(f"[cpu] {mode}: N={N} per-kernel {per_w*1e3:.2f} ms wall / {per_c*1e3:.2f} ms cpu; "
              f"irfftn {ir_w*1e3:.2f} / {ir_c*1e3:.2f}; ratio {m['ratio_vs_irfftn']:.2f} wall "
              f"(spread {min(ratio_w):.2f}-{max(ratio_w):.2f}), {m['ratio_vs_irfftn_cpu']:.2f} cpu "
              f"(spread {min(ratio_c):.2f}-{max(ratio_c):.2f}); vs fftconvolve31 "
              f"{m['speedup_vs_fftconvolve31']:.1f}x wall, {m['speedup_vs_fftconvolve31_cpu']:.1f}x cpu",
              flush=True)
    c["load_after"] = os.getloadavg()[0]


def bench_cost(args, res):
    """Constants of ``volsweep.engine.COST_CONSTANTS`` for one device, measured here.

    ``irfft``: per-kernel seconds over N·log2 N (wrap, fast shapes: no halo), the slope of
    per-kernel time against N·log2 N over ``--cost-shapes``; ``per_kernel``: its intercept;
    ``parseval``: per-kernel seconds over N of the Parseval path; ``local_energy``: the extra
    per-kernel seconds of the local-energy orientation map over voxels × taps.
    """
    from volsweep.engine._plan import gaussian_taps

    dev = "cuda" if args.gpu else "cpu"
    gpu = dev == "cuda"
    theta, phi = kernel_grid(args.cost_kernels)
    k = len(theta) * len(phi)
    rows = []
    for n in args.cost_shapes:
        shape = (n, n, n)
        v = np.random.default_rng(0).random(shape, dtype=np.float32)
        kw = dict(a=1.0, mode="wrap", device=dev, progress=False)

        def per_kernel(**extra):
            timer = _gpu_time if gpu else _wall
            tk = timer(lambda: sweep(v, theta, phi, [2.0], **kw, **extra), args.reps)
            t1 = timer(lambda: sweep(v, theta[:1], phi[:1], [2.0], **kw, **extra), args.reps)
            return (tk - t1) / (k - 1)

        irfft = per_kernel()
        parseval = per_kernel(stats=("energy", "std", "mean"))
        omap = per_kernel(orientation_map=True)
        taps = sum(len(w) for w in gaussian_taps(1.0, (1.0, 1.0, 1.0)))
        N = n ** 3
        rows.append(dict(n=n, irfft_s=irfft, parseval_s=parseval, omap_s=omap,
                         nlogn=N * math.log2(N), N=N, taps=taps))
        print(f"cost {dev} {n}³: per kernel irfft {irfft * 1e3:.3f} ms, parseval {parseval * 1e3:.3f} ms, "
              f"+local energy {(omap - irfft) * 1e3:.3f} ms", flush=True)
    x = np.array([r["nlogn"] for r in rows])
    y = np.array([r["irfft_s"] for r in rows])
    slope, icpt = np.polyfit(x, y, 1) if len(rows) > 1 else (y[0] / x[0], 0.0)
    res["cost"] = {"device": dev, "rows": rows, "constants": {
        "irfft": float(slope), "per_kernel": float(max(icpt, 0.0)),
        "parseval": float(np.median([r["parseval_s"] / r["N"] for r in rows])),
        "local_energy": float(np.median([max(r["omap_s"] - r["irfft_s"], 0.0) / (r["N"] * r["taps"])
                                         for r in rows]))}}
    print("COST_CONSTANTS", dev, json.dumps(res["cost"]["constants"]), flush=True)


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--gpu", action="store_true")
    p.add_argument("--cpu", action="store_true")
    p.add_argument("--shape", type=int, nargs=3, default=(800, 800, 200))
    p.add_argument("--kernels", type=int, default=225, help="GPU block size (rounded up to a square)")
    p.add_argument("--cpu-shape", type=int, nargs=3, default=(128, 128, 128))
    p.add_argument("--cpu-kernels", type=int, default=25)
    p.add_argument("--modes", nargs="+", default=["wrap", "reflect"])
    p.add_argument("--a", type=float, default=1.0)
    p.add_argument("--xi", type=float, default=1.0)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--no-nested", dest="nested", action="store_false")
    p.add_argument("--parseval-xi", type=float, nargs="+", default=None,
                   help="also time the Parseval path (wrap; energy/std/mean) at each of these ξ")
    p.add_argument("--parseval-only", action="store_true",
                   help="GPU: only the --parseval-xi timings (default ξ: 1 2 4)")
    p.add_argument("--cost", action="store_true",
                   help="measure volsweep.engine.COST_CONSTANTS on the --gpu or the CPU device")
    p.add_argument("--cost-shapes", type=int, nargs="+", default=[64, 96, 128])
    p.add_argument("--cost-kernels", type=int, default=16)
    p.add_argument("--out", default=None)
    args = p.parse_args(argv)
    res = {"command": " ".join(sys.argv), "host": platform.node()}
    try:
        if args.cost:
            bench_cost(args, res)
            return
        if args.gpu and not args.parseval_only:
            bench_gpu(args, res)
        if args.gpu and (args.parseval_only or args.parseval_xi):
            args.parseval_xi = args.parseval_xi or [1.0, 2.0, 4.0]
            bench_parseval(args, res)
        if args.cpu:
            bench_cpu(args, res)
    finally:
        text = json.dumps(res, indent=1, default=float)
        print(text)
        if args.out:
            with open(args.out, "w") as f:
                f.write(text)


if __name__ == "__main__":
    main()
