"""Benchmark of volsweep's exact local thickness against the baselines, same run.

GPU (``--device cuda``):
  * 250^3 porous blobs: per-call time (CUDA events, median), 100 repeated calls
    (max/median, device-memory growth);
  * 800x800x200 blobs: per-call time;
  * the original user pipeline (seed 001): edt + skimage skeletonize + FFT dilation
    per radius on the GPU (cupyx fftconvolve), and an integer-radius loop of EDTs
    (the ltedt approach, cupyx distance_transform_edt), both re-implemented here,
    timed once and scored against the exact result.
CPU (``--device cpu``):
  * 250^3 blobs: volsweep vs PoreSpy ``local_thickness`` (defaults) and the
    ``localthickness`` package (Dahl & Dahl), plus an accuracy table (mean
    absolute error of the diameter over the phase, vs the exact result).

Usage::

    python benchmarks/bench_thickness.py --device cpu --size 250 --out bench_cpu.json
    python benchmarks/bench_thickness.py --device cuda --calls 100 --out bench_gpu.json

Every ratio printed is measured in the same run.  Blobs are PoreSpy's recipe
(Gaussian-filtered noise, sigma = mean(shape)/40/blobiness, thresholded at the
porosity), generated here so that PoreSpy is not needed for the GPU part.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "workflow"))

from volsweep import thickness as T  # noqa: E402

from _timing import cuda_times  # noqa: E402


def blobs(shape, porosity=0.5, blobiness=1.0, seed=0):
    from scipy import ndimage as ndi

    rng = np.random.default_rng(seed)
    im = rng.random(shape, dtype=np.float32)
    im = ndi.gaussian_filter(im, sigma=np.mean(shape) / 40 / blobiness)
    return im > np.quantile(im, 1 - porosity)


def accuracy(approx_diameter, exact, phase):
    a = np.asarray(approx_diameter, np.float64)[phase]
    e = np.asarray(exact, np.float64)[phase]
    err = np.abs(a - e)
    return {"mae": float(err.mean()), "max_abs_error": float(err.max()),
            "exact_fraction": float((err == 0).mean()), "mean_exact": float(e.mean())}


def hardware(device):
    info = {"platform": platform.platform(), "python": platform.python_version(),
            "cpu": platform.processor() or platform.machine(), "cpu_count": os.cpu_count()}
    try:
        info["cpu_affinity"] = len(os.sched_getaffinity(0))
    except AttributeError:
        pass
    if device == "cuda":
        import cupy as cp

        props = cp.cuda.runtime.getDeviceProperties(0)
        info["gpu"] = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
        info["cupy"] = cp.__version__
    return info


# ----------------------------------------------------------------------------- GPU baselines
def original_pipeline_gpu(phase_np, log):
    """The seed-001 user pipeline: edt (CPU) + skeletonize (CPU) + FFT dilation per radius (GPU)."""
    import cupy as cp
    from cupyx.scipy.signal import fftconvolve
    from skimage.morphology import ball, skeletonize

    t0 = time.perf_counter()
    try:
        import edt

        dt = edt.edt(phase_np, parallel=os.cpu_count())
        edt_name = "edt"
    except ImportError:
        from scipy.ndimage import distance_transform_edt

        dt = distance_transform_edt(phase_np)
        edt_name = "scipy"
    t1 = time.perf_counter()
    skel = skeletonize(phase_np).astype(bool)
    t2 = time.perf_counter()
    skel = cp.asarray(skel) * cp.asarray(dt)
    r_max = int(cp.max(skel))
    final = cp.zeros(skel.shape, cp.float64)
    for r in range(r_max, 0, -1):
        sel = ((skel > r - 1) & (skel <= r)).astype(cp.float32)
        dil = (fftconvolve(sel, cp.asarray(ball(r), cp.float32), mode="same") > 0.1) * r
        final = final + (final == 0) * dil
    cp.cuda.Device().synchronize()
    t3 = time.perf_counter()
    log(f"  original pipeline: {edt_name} {t1 - t0:.3f} s + skeletonize {t2 - t1:.3f} s + "
        f"FFT dilation {t3 - t2:.3f} s")
    # The user's map holds radii (integers); report a diameter.
    return 2.0 * final.get(), {"edt_s": t1 - t0, "skeleton_s": t2 - t1, "dilation_s": t3 - t2,
                               "total_s": t3 - t0}


def ltedt_gpu(phase_cp):
    """Integer-radius loop of EDTs (ltedt/PoreSpy approach): for r = 1..R, voxels within r of
    a centre with D >= r get diameter 2r.  Quantised; uses cupyx distance_transform_edt."""
    import cupy as cp
    from cupyx.scipy.ndimage import distance_transform_edt

    dt = distance_transform_edt(phase_cp)
    out = cp.zeros(phase_cp.shape, cp.float32)
    for r in range(1, int(cp.ceil(dt.max())) + 1):
        centres = dt >= r
        if not bool(centres.any()):
            break
        near = distance_transform_edt(~centres) < r
        out[near & phase_cp] = 2.0 * r
    return out


def bench_gpu(args, log):
    import cupy as cp

    res = {}
    shape = (args.size,) * 3
    phase_np = blobs(shape, seed=0)
    phase = cp.asarray(phase_np)
    lt = T.local_thickness(phase)
    cpu_equal = None
    if args.check_cpu:
        cpu = T.local_thickness(phase_np, device="cpu")
        cpu_equal = bool(np.array_equal(cpu, lt.get()))
        log(f"  GPU == CPU at {shape}: {cpu_equal}")
    pool = cp.get_default_memory_pool()
    for _ in range(3):  # warm-up (compilation, tables, pool) before memory is read
        T.local_thickness(phase)
    cp.cuda.Device().synchronize()
    free0 = cp.cuda.runtime.memGetInfo()[0]
    pool0 = pool.total_bytes()
    times = cuda_times(lambda: T.local_thickness(phase), args.calls, warm=0)
    free1 = cp.cuda.runtime.memGetInfo()[0]
    pool1 = pool.total_bytes()
    med = statistics.median(times)
    res["blobs_250"] = {
        "shape": shape, "calls": len(times), "median_s": med, "min_s": min(times),
        "max_s": max(times), "max_over_median": max(times) / med,
        "pool_bytes_before": pool0, "pool_bytes_after": pool1,
        "device_free_change_bytes": free1 - free0, "gpu_equals_cpu": cpu_equal,
        "r_max": T.max_inscribed_radius(phase)}
    log(f"  250^3 blobs: median {med * 1e3:.2f} ms over {len(times)} calls, "
        f"max/median {max(times) / med:.3f}, pool {pool0} -> {pool1} B, "
        f"device free change {free1 - free0} B")
    # Phase breakdown (synchronised) for the notes.
    from volsweep import _thickness_gpu as G

    def stage_times(method=None):
        ev = [cp.cuda.Event() for _ in range(5)]
        ev[0].record()
        d2 = G.edt_sq(phase, (1, 1, 1))
        ev[1].record()
        cand = G.candidates(d2, (1, 1, 1), (0, 0, 0), shape, np.inf, 0.0)
        ev[2].record()
        r, v = G.paint(d2, cand, (1, 1, 1), (0, 0, 0), shape, method=method)
        ev[3].record()
        G.finish(r, v)
        ev[4].record()
        ev[4].synchronize()
        return [cp.cuda.get_elapsed_time(ev[i], ev[i + 1]) for i in range(4)], int(cand.size)

    st = [stage_times() for _ in range(5)]
    med_st = [statistics.median(s[0][i] for s in st) for i in range(4)]
    res["blobs_250"]["painter"] = G.PAINT
    res["blobs_250"]["stages_ms"] = dict(zip(["edt", "prune", "paint", "finish"], med_st))
    res["blobs_250"]["centres"] = st[0][1]
    log(f"  stages (ms): edt {med_st[0]:.2f} prune {med_st[1]:.2f} paint {med_st[2]:.2f} "
        f"finish {med_st[3]:.2f}; centres {st[0][1]}")
    for painter in ("ball", "rows"):
        sp = [stage_times(painter)[0][2] for _ in range(5)]
        res["blobs_250"][f"paint_ms_{painter}"] = statistics.median(sp)
        log(f"  paint stage, painter {painter!r}: {statistics.median(sp):.2f} ms")

    # The alternative painter ("rows": sparse table of row spans), same input, same run.
    default_painter = G.PAINT
    for painter in ("ball", "rows"):
        if painter == default_painter:
            continue
        G.PAINT = painter
        same = bool((T.local_thickness(phase) == lt).all())
        for _ in range(3):
            T.local_thickness(phase)
        cp.cuda.Device().synchronize()
        p0 = pool.total_bytes()
        tr = cuda_times(lambda: T.local_thickness(phase), args.calls, warm=0)
        cp.cuda.Device().synchronize()
        p1 = pool.total_bytes()
        G.PAINT = default_painter
        m = statistics.median(tr)
        res["blobs_250"][f"{painter}_painter"] = {
            "median_s": m, "min_s": min(tr), "max_s": max(tr), "max_over_median": max(tr) / m,
            "pool_bytes_before": p0, "pool_bytes_after": p1,
            f"equals_{default_painter}_painter": same}
        log(f"  250^3 blobs, painter {painter!r}: median {m * 1e3:.2f} ms over {len(tr)} calls, "
            f"max/median {max(tr) / m:.3f}, pool {p0} -> {p1} B "
            f"(equal to {default_painter!r}: {same})")

    # Baselines, same run.
    exact = lt.get()
    t0 = time.perf_counter()
    q = ltedt_gpu(phase)
    cp.cuda.Device().synchronize()
    t_lt = time.perf_counter() - t0
    t0 = time.perf_counter()
    q = ltedt_gpu(phase)
    cp.cuda.Device().synchronize()
    t_lt = min(t_lt, time.perf_counter() - t0)
    res["ltedt_loop"] = {"time_s": t_lt, "speedup_of_volsweep": t_lt / med,
                         **accuracy(q.get(), exact, phase_np)}
    log(f"  integer-radius EDT loop (ltedt): {t_lt * 1e3:.1f} ms -> volsweep "
        f"{t_lt / med:.1f}x faster; MAE {res['ltedt_loop']['mae']:.3f}")
    if not args.skip_original:
        orig, parts = original_pipeline_gpu(phase_np, log)
        res["original_pipeline"] = {**parts, "speedup_of_volsweep": parts["total_s"] / med,
                                    **accuracy(orig, exact, phase_np)}
        log(f"  original pipeline total {parts['total_s']:.2f} s -> volsweep "
            f"{parts['total_s'] / med:.0f}x faster; MAE {res['original_pipeline']['mae']:.3f}")
    del q

    if args.big:
        big_np = blobs((800, 800, 200), seed=1)
        big = cp.asarray(big_np)
        tb = cuda_times(lambda: T.local_thickness(big), 3, warm=1)
        res["blobs_800x800x200"] = {"median_s": statistics.median(tb), "times_s": tb,
                                    "r_max": T.max_inscribed_radius(big),
                                    "peak_pool_bytes": pool.total_bytes()}
        log(f"  800x800x200 blobs, painter {default_painter!r}: median "
            f"{statistics.median(tb) * 1e3:.1f} ms")
        ref = T.local_thickness(big)
        for painter in ("ball", "rows"):
            if painter == default_painter:
                continue
            G.PAINT = painter
            tb = cuda_times(lambda: T.local_thickness(big), 3, warm=1)
            same = bool((T.local_thickness(big) == ref).all())
            G.PAINT = default_painter
            res["blobs_800x800x200"][f"{painter}_painter"] = {
                "median_s": statistics.median(tb), "times_s": tb,
                f"equals_{default_painter}_painter": same}
            log(f"  800x800x200 blobs, painter {painter!r}: median "
                f"{statistics.median(tb) * 1e3:.1f} ms (equal to {default_painter!r}: {same})")
        del big
    return res


# ----------------------------------------------------------------------------- CPU
def bench_cpu(args, log):
    res = {}
    shape = (args.size,) * 3
    phase = blobs(shape, seed=0)
    T.local_thickness(phase[:32, :32, :32])  # compile numba kernels (cached on disk)
    # One untimed call at full size (reported): it allocates the work arrays that the
    # following calls reuse, as a caller in a loop sees them.
    t0 = time.perf_counter()
    T.local_thickness(phase)
    t_first = time.perf_counter() - t0
    log(f"  volsweep first call at {shape} (allocates work arrays): {t_first:.2f} s")
    res["volsweep_first_call_s"] = t_first
    times = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        exact = T.local_thickness(phase)
        times.append(time.perf_counter() - t0)
    med = statistics.median(times)
    res["volsweep"] = {"median_s": med, "times_s": times}
    log(f"  volsweep exact: median {med:.2f} s over {len(times)} ({times})")
    if not args.skip_porespy:
        try:
            import porespy as ps

            t0 = time.perf_counter()
            r = ps.filters.local_thickness(phase)
            t_ps = time.perf_counter() - t0
            # PoreSpy returns a radius (quantised): compare diameters.
            res["porespy"] = {"time_s": t_ps, "version": ps.__version__,
                              "volsweep_speedup": t_ps / med,
                              **accuracy(2.0 * np.asarray(r), exact, phase)}
            log(f"  PoreSpy {ps.__version__} local_thickness: {t_ps:.2f} s -> volsweep "
                f"{t_ps / med:.1f}x faster; MAE {res['porespy']['mae']:.3f}")
        except ImportError as e:
            log(f"  PoreSpy not installed ({e})")
    if not args.skip_localthickness:
        try:
            import localthickness as lt

            t0 = time.perf_counter()
            r = lt.local_thickness(phase, scale=1)
            t_lt = time.perf_counter() - t0
            # localthickness, like PoreSpy, returns a radius (4 for a 7-voxel slab whose
            # diameter is 8 by DESIGN.md's centre-to-centre definition): compare diameters.
            res["localthickness"] = {"time_s": t_lt, "volsweep_speedup": t_lt / med,
                                     **accuracy(2.0 * np.asarray(r), exact, phase)}
            log(f"  localthickness: {t_lt:.2f} s -> volsweep {t_lt / med:.1f}x faster; "
                f"MAE {res['localthickness']['mae']:.3f}")
        except ImportError as e:
            log(f"  localthickness not installed ({e})")
    return res


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--size", type=int, default=250, help="edge of the cubic blobs volume")
    ap.add_argument("--calls", type=int, default=100, help="GPU: repeated calls timed")
    ap.add_argument("--repeat", type=int, default=3, help="CPU: timed volsweep calls")
    ap.add_argument("--big", action="store_true", help="GPU: also 800x800x200")
    ap.add_argument("--check-cpu", action="store_true", help="GPU: compare with the CPU path")
    ap.add_argument("--skip-original", action="store_true")
    ap.add_argument("--skip-porespy", action="store_true")
    ap.add_argument("--skip-localthickness", action="store_true")
    ap.add_argument("--out", type=Path, default=None, help="write the results as JSON")
    args = ap.parse_args(argv)

    def log(msg):
        print(msg, flush=True)

    log(f"bench_thickness: {' '.join(sys.argv)}")
    res = {"args": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(args).items()},
           "hardware": hardware(args.device)}
    log(f"  hardware: {res['hardware']}")
    res["results"] = bench_gpu(args, log) if args.device == "cuda" else bench_cpu(args, log)
    if args.out:
        args.out.write_text(json.dumps(res, indent=2, default=float))
    return res


if __name__ == "__main__":
    main()
