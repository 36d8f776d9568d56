"""Benchmark of volsweep's exact local thickness: data cases, devices, baselines, same run.

Cases (``--cases``):
  blobs     porous blobs (PoreSpy's recipe: Gaussian-filtered noise,
            sigma = mean(shape)/40/blobiness, thresholded at the porosity)
  spheres   the solid between random overlapping spherical pores (few large balls)
  pores     a solid with a few isolated pore voxels (the air around a specimen, inverted):
            the worst case of ball painting (every ball ~ the volume)
  cylinder  the air around a cylinder along axis 2 (radius 0.3 n)

Parts (``--parts``, CPU and GPU):
  cases     every case at ``--size`` (the random ones drawn with ``--seed``), median of
            ``--repeat`` calls (first call untimed)
  scaling   the pores case at several sizes (``--pores-sizes``) and shapes
            (``--pores-shapes``, e.g. 800x800x200)
  stages    every case at ``--size`` and the pores case at ``--pores-sizes``: the time of
            each stage (distance map, pruning, painting, diameters), medians of
            ``--repeat`` after an untimed call (CUDA events on the GPU)
  spacing   blobs at spacings (1,1,1), 0.65, (0.65,0.65,2.0), (0.7,1.3,1.0): time and the
            exact scale invariance check; with ``--spacing-pores``, also the pores case
            at those sizes and the spacings (1,1,1), (0.65,0.65,2.0), (0.7,1.3,1.0)
  porespy   (CPU) PoreSpy ``local_thickness`` (defaults) on 250^3 PoreSpy blobs (drawn
            with ``--seed``) at porosity 0.5/0.6, blobiness 1/2 (others with
            ``--porespy-cases``, e.g. ``0.8/3``), against volsweep in the same run;
            both timed as ``cases`` (the first call untimed: numba compiles or loads
            its cache there), PoreSpy's first call reported apart
  edt       (CPU) the edt package's ``edtsq`` (through ``edt_sq(method="edt")`` and its
            call alone) against volsweep's numba passes, on blobs drawn with ``--seed``,
            at the thread counts of ``--threads`` (fresh processes)
  gpu       (GPU) 250^3 blobs over ``--calls`` calls (CUDA events; max/median; pool bytes),
            800x800x200 blobs, peak pool bytes against ``thickness_memory_bytes``; with
            ``--check-cpu`` also GPU == CPU bit for bit on the cases of ``AGAINST_CPU``
  compile   (CPU) the first call's time in a fresh process with an empty numba cache (the
            kernels' compilation), then a second fresh process on that cache, ``--repeat``
            times each
  weights   blobs 128^3, PoreSpy-like blobs 160^3 (porosity 0.6, blobiness 2) and a 96^3
            solid with 4 pore voxels at the spacings of FIRST_SPACINGS (lattice weights
            from 1 to the hundreds), as ``cases``, all in this process
  needs     (GPU) the disc-need table kept on the device between calls against uploaded
            in every call (cleared before it), alternating, ``--repeat`` pairs, on the
            phases and spacings of NEEDS_CASES; GPU == CPU on each
  first     (CPU) blobs at ``--size`` (seeds 0 .. ``--repeat`` - 1) at the spacings of
            FIRST_SPACINGS, each in a fresh process (kernels loaded from the cache by a
            tiny call): the first call on the data and the second, as a workflow's chunk
            job meets them (the tables a call builds are cached per process)

Usage::

    python benchmarks/bench_thickness.py --device cpu --out bench_cpu.json
    python benchmarks/bench_thickness.py --device cuda --out bench_gpu.json

Every ratio printed is measured in the same run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "workflow"))

from volsweep import thickness as T  # noqa: E402


FIRST_CHILD = r"""
import sys, time
sys.path.insert(0, sys.argv[1] + "/workflow")
sys.path.insert(0, sys.argv[1] + "/benchmarks")
import numpy as np
import volsweep
from bench_thickness import blobs
x = np.ones((5, 4, 6), bool)
x[2, 1, 3] = False
volsweep.local_thickness(x)
phase = blobs((int(sys.argv[2]),) * 3, seed=int(sys.argv[3]))
spacing = tuple(float(v) for v in sys.argv[4].split(","))
for _ in range(2):
    t = time.perf_counter()
    volsweep.local_thickness(phase, spacing=spacing)
    print(time.perf_counter() - t)
"""
# Unit, anisotropic, three significant digits (lattice weights in the hundreds), extreme.
FIRST_SPACINGS = [(1, 1, 1), (0.65, 0.65, 2.0), (0.347, 0.347, 1.0), (2.79, 2.39, 2.39),
                  (4.0, 0.1, 0.1)]


# ----------------------------------------------------------------------------- cases
def blobs(shape, porosity=0.5, blobiness=1.0, seed=0):
    from scipy import ndimage as ndi

    im = np.random.default_rng(seed).random(shape, dtype=np.float32)
    im = ndi.gaussian_filter(im, sigma=np.mean(shape) / 40 / blobiness)
    return im > np.quantile(im, 1 - porosity)


def spheres(n, count=None, seed=0):
    from scipy import ndimage as ndi

    rng = np.random.default_rng(seed)
    count = count or max(4, n // 10)
    seeds = np.ones((n, n, n), bool)
    seeds[tuple(rng.integers(0, n, (3, count)))] = False
    dist = ndi.distance_transform_edt(seeds)
    return dist > n / 8  # the solid more than n/8 from every pore centre


def pores(n, count=None, seed=0):
    """A solid cube of ``n`` voxels a side, or of shape ``n`` (a tuple), with ``count``
    random pore voxels (6 where the largest side is above 128, else 4)."""
    shape = (n,) * 3 if np.ndim(n) == 0 else tuple(int(v) for v in n)
    count = count or (6 if max(shape) > 128 else 4)
    x = np.ones(shape, bool)
    rng = np.random.default_rng(seed)
    if np.ndim(n) == 0:
        x[tuple(rng.integers(0, n, (3, count)))] = False
    else:
        x[tuple(rng.integers(0, side, count) for side in shape)] = False
    return x


def cylinder(n):
    i, j = np.mgrid[:n, :n]
    c = (n - 1) / 2
    air = (i - c) ** 2 + (j - c) ** 2 > (0.3 * n) ** 2
    return np.repeat(air[:, :, None], n, axis=2)


CASES = {"blobs": lambda n, seed=0: blobs((n,) * 3, seed=seed), "spheres": spheres,
         "pores": pores, "cylinder": lambda n, seed=0: cylinder(n)}


# ----------------------------------------------------------------------------- timing
def time_once(fn, device):
    """Seconds of one call: CUDA events on the GPU, the host clock on the CPU."""
    if device == "cuda":
        import cupy as cp

        start, stop = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        fn()
        stop.record()
        stop.synchronize()
        return cp.cuda.get_elapsed_time(start, stop) / 1e3
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def timed(fn, repeat, device):
    """(median, all) seconds of repeat calls after one untimed call."""
    fn()
    times = [time_once(fn, device) for _ in range(repeat)]
    return statistics.median(times), times


def on_device(phase, device):
    if device == "cuda":
        import cupy as cp

        return cp.asarray(phase)
    return phase


def run_case(name, phase, device, repeat, spacing=(1, 1, 1)):
    x = on_device(phase, device)
    med, times = timed(lambda: T.local_thickness(x, spacing=spacing), repeat, device)
    return {"case": name, "shape": list(phase.shape), "spacing": list(spacing),
            "porosity": float(phase.mean()), "median_s": med, "times_s": times}


# ----------------------------------------------------------------------------- parts
def part_cases(a, out, log):
    # the cases alternate call by call (after one untimed call each), so that a drift of
    # the machine's speed reaches them alike; each ratio to the blobs is also given as
    # the median of the rounds' ratios
    phases = {name: on_device(CASES[name](a.size, seed=a.seed), a.device) for name in a.cases}
    calls = {name: (lambda x=x: T.local_thickness(x)) for name, x in phases.items()}
    for fn in calls.values():
        fn()
    times = {name: [] for name in a.cases}
    for _ in range(a.repeat):
        for name, fn in calls.items():
            times[name].append(time_once(fn, a.device))
    rows = []
    for name, x in phases.items():
        r = {"case": name, "shape": [a.size] * 3, "spacing": [1, 1, 1],
             "porosity": float(x.mean()), "median_s": statistics.median(times[name]),
             "times_s": times[name]}
        rows.append(r)
        log(f"{name:9s} {a.size}^3  median {r['median_s']:.4f} s  (all {fmt(r['times_s'])})")
    if "blobs" in times:
        for r in rows:
            r["ratio_to_blobs"] = r["median_s"] / statistics.median(times["blobs"])
            r["ratio_to_blobs_rounds"] = statistics.median(
                t / b for t, b in zip(r["times_s"], times["blobs"]))
            log(f"  {r['case']:9s} / blobs = {r['ratio_to_blobs']:.2f} (median of the rounds' "
                f"ratios {r['ratio_to_blobs_rounds']:.2f})")
    out["cases"] = rows


def part_scaling(a, out, log):
    rows = []
    for n in list(a.pores_sizes) + list(a.pores_shapes):
        x = pores(n, seed=a.seed)
        r = run_case("pores", x, a.device, a.repeat)
        rows.append(r)
        size = "x".join(map(str, x.shape)) if x.shape != (n,) * 3 else f"{n}^3"
        log(f"pores {size} ({int((~x).sum())} pore voxels): median {r['median_s']:.4f} s")
    out["scaling"] = rows


def stage_times(phase, device):
    """Seconds of each of ``T.STAGES`` in one whole-volume call at unit spacing (the
    package's own marks, as it logs them at DEBUG level)."""
    from volsweep.thickness import _finish, _tables, _thickness_r2
    from volsweep.thickness._clock import StageClock

    weights, scale = _tables.lattice((1, 1, 1))
    clock = StageClock(device)
    clock.mark()
    r2, _, _ = _thickness_r2(phase, weights, device, (0, 0, 0), phase.shape, float("inf"), clock)
    _finish(r2, scale, device)
    clock.mark()
    return clock.seconds()


def part_stages(a, out, log):
    rows = []
    todo = [(name, a.size, lambda n, f=CASES[name]: f(n, seed=a.seed)) for name in a.cases]
    todo += [("pores", n, lambda n: pores(n, seed=a.seed)) for n in a.pores_sizes
             if not ("pores" in a.cases and n == a.size)]
    for name, n, make in todo:
        x = on_device(make(n), a.device)
        stage_times(x, a.device)
        runs = [stage_times(x, a.device) for _ in range(a.repeat)]
        med = [statistics.median(r[s] for r in runs) for s in range(len(T.STAGES))]
        rows.append({"case": name, "size": n, "stages": dict(zip(T.STAGES, med)),
                     "total_s": sum(med)})
        log(f"stages {name:9s} {n}^3: " + ", ".join(f"{k} {v * 1e3:.2f} ms" for k, v in
                                                    zip(T.STAGES, med)) + f"; total {sum(med) * 1e3:.2f} ms")
    out["stages"] = rows


def part_spacing(a, out, log):
    phase = blobs((a.size,) * 3)
    rows = []
    x = on_device(phase, a.device)
    unit = T.local_thickness(x)
    for sp in [(1, 1, 1), (0.65,) * 3, (0.65, 0.65, 2.0), (0.7, 1.3, 1.0)]:
        r = run_case("blobs", phase, a.device, a.repeat, spacing=sp)
        if sp[0] == sp[1] == sp[2]:
            got = T.local_thickness(x, spacing=sp)
            r["scale_invariance_mismatches"] = int((got != np.float32(sp[0]) * unit).sum())
        rows.append(r)
        log(f"blobs {a.size}^3 spacing {sp}: median {r['median_s']:.4f} s"
            + (f", scale-invariance mismatches {r['scale_invariance_mismatches']}"
               if "scale_invariance_mismatches" in r else ""))
    for n in a.spacing_pores:
        solid = pores(n)
        for sp in [(1, 1, 1), (0.65, 0.65, 2.0), (0.7, 1.3, 1.0)]:
            r = run_case("pores", solid, a.device, a.repeat, spacing=sp)
            rows.append(r)
            log(f"pores {n}^3 spacing {sp}: median {r['median_s']:.4f} s")
    out["spacing"] = rows


def part_porespy(a, out, log):
    try:
        import porespy as ps
    except ImportError:
        log("porespy not installed: skipped")
        return
    rows = []
    for porosity, blobiness in a.porespy_cases:
        im = ps.generators.blobs((a.porespy_size,) * 3, porosity=porosity,
                                 blobiness=blobiness, seed=a.seed)
        # both timed alike: one untimed call (numba's compilation or cache load), then
        # --repeat calls of each, alternating, so that a drift of the machine's speed
        # reaches both; PoreSpy's first call is recorded apart
        t = time.perf_counter()
        ps.filters.local_thickness(im)
        first = time.perf_counter() - t
        T.local_thickness(im)
        their_times, times = [], []
        for _ in range(a.repeat):
            for fn, into in ((ps.filters.local_thickness, their_times),
                             (T.local_thickness, times)):
                t = time.perf_counter()
                fn(im)
                into.append(time.perf_counter() - t)
        theirs, ours = statistics.median(their_times), statistics.median(times)
        pairs = statistics.median(p / o for p, o in zip(their_times, times))
        rows.append({"porosity": porosity, "blobiness": blobiness, "volsweep_s": ours,
                     "volsweep_times_s": times, "porespy_s": theirs,
                     "porespy_times_s": their_times, "porespy_first_call_s": first,
                     "ratio": theirs / ours, "ratio_of_pairs": pairs,
                     "porespy": ps.__version__})
        log(f"PoreSpy blobs {a.porespy_size}^3 seed {a.seed} porosity {porosity:g} "
            f"blobiness {blobiness:g}: volsweep {ours:.3f} s ({fmt(times)}), PoreSpy {theirs:.3f} s "
            f"({fmt(their_times)}; first call {first:.3f} s) -> {theirs / ours:.1f}x "
            f"(median of the alternated pairs' ratios {pairs:.1f}x)")
    out["porespy"] = rows


EDT_CHILD = r"""
import sys, time, statistics, json
import numpy as np
sys.path.insert(0, sys.argv[1] + "/workflow"); sys.path.insert(0, sys.argv[1] + "/benchmarks")
from bench_thickness import blobs
from volsweep.thickness import _cpu as C
import edt
phase = blobs((int(sys.argv[2]),) * 3, seed=int(sys.argv[4]))
threads = C.cpu_threads()
calls = {"numba": lambda: C.edt_sq(phase, (1, 1, 1), method="numba"),
         "edt": lambda: C.edt_sq(phase, (1, 1, 1), method="edt"),
         # the edt package alone: its float32 output, without volsweep's float64 copy
         "edt_bare": lambda: edt.edtsq(phase.view(np.uint8), black_border=False,
                                       parallel=threads)}
res = {}
for name, call in calls.items():
    call()
    t = []
    for _ in range(int(sys.argv[3])):
        s = time.perf_counter(); call(); t.append(time.perf_counter() - s)
    res[name] = statistics.median(t)
print(json.dumps(res))
"""


def part_edt(a, out, log):
    rows = []
    for th in a.threads:
        env = dict(os.environ, NUMBA_NUM_THREADS=str(th))
        cmd = ["taskset", "-c", f"0-{th - 1}", sys.executable, "-c", EDT_CHILD, str(ROOT),
               str(a.size), str(a.repeat), str(a.seed)]
        res = json.loads(subprocess.run(cmd, env=env, capture_output=True, text=True,
                                        check=True).stdout.strip().splitlines()[-1])
        res["threads"] = th
        rows.append(res)
        log(f"EDT {a.size}^3 at {th} threads: numba {res['numba']:.4f} s, edt {res['edt']:.4f} s "
            f"(edt/numba {res['edt'] / res['numba']:.2f}; the edt package's call alone "
            f"{res['edt_bare']:.4f} s)")
    out["edt"] = rows


def part_gpu(a, out, log):
    import cupy as cp

    pool = cp.get_default_memory_pool()
    b250 = cp.asarray(blobs((250,) * 3))
    T.local_thickness(b250)
    cp.cuda.Device().synchronize()
    before = pool.total_bytes()
    med, times = timed(lambda: T.local_thickness(b250), a.calls, "cuda")
    after = pool.total_bytes()
    ordered = sorted(times)
    p95 = ordered[min(len(ordered) - 1, int(0.95 * len(ordered)))]
    out["gpu_250"] = {"median_s": med, "max_over_median": max(times) / med, "min_s": min(times),
                      "p95_over_median": p95 / med, "times_s": times,
                      "pool_before": before, "pool_after": after}
    slow = [f"call {i + 1}: {t * 1e3:.1f} ms" for i, t in enumerate(times) if t > 1.5 * med]
    log(f"GPU 250^3 blobs: median {med * 1e3:.2f} ms over {a.calls} calls, max/median "
        f"{max(times) / med:.3f}, p95/median {p95 / med:.3f}, pool {before} -> {after}"
        + (f"; calls over 1.5x the median: {', '.join(slow)}" if slow else ""))
    b250 = None  # release before the large case
    big = blobs((800, 800, 200))
    x = cp.asarray(big)
    med, times = timed(lambda: T.local_thickness(x), 3, "cuda")
    out["gpu_800x800x200"] = {"median_s": med, "times_s": times}
    log(f"GPU 800x800x200 blobs: median {med:.3f} s ({fmt(times)})")
    # peak pool bytes of one call (fresh pool) against the estimate
    rows = []
    for name, arr in [("blobs 800x800x200", x), ("pores 256^3", cp.asarray(pores(256)))]:
        cp.cuda.Device().synchronize()
        pool.free_all_blocks()
        held = pool.total_bytes()
        r = T.local_thickness(arr)
        cp.cuda.Device().synchronize()
        peak = pool.total_bytes() - held
        est = T.thickness_memory_bytes(arr.shape, device="cuda")
        rows.append({"case": name, "peak_pool_bytes": peak, "estimate_bytes": est})
        log(f"GPU memory {name}: pool peak {peak / 2**30:.2f} GiB, estimate {est / 2**30:.2f} GiB")
        del r
    out["gpu_memory"] = rows
    if a.check_cpu:
        out["gpu_equals_cpu"] = check_against_cpu(log)


# Shapes, phases and spacings on which the GPU's result must equal the CPU's bit for bit.
AGAINST_CPU = [
    ("blobs 160^3", lambda: blobs((160,) * 3), (0.65, 0.65, 2.0)),
    ("blobs 101x77x130", lambda: blobs((101, 77, 130), seed=3), (0.3, 0.3, 0.3)),
    ("blobs 200x230x170, blobiness 2", lambda: blobs((200, 230, 170), 0.6, 2.0, seed=5),
     (0.65, 0.65, 2.0)),
    ("pores 112^3", lambda: pores(112, seed=1), (1, 1, 1)),
    ("pores 112^3", lambda: pores(112, seed=1), (0.7, 1.3, 1.0)),
    ("spheres 128^3", lambda: spheres(128, seed=2), (1, 3, 2)),
    ("cylinder 100^3", lambda: cylinder(100), (0.65, 0.65, 0.65)),
]


def check_against_cpu(log):
    """GPU == CPU, bit for bit, on every case of AGAINST_CPU; rows with both SHA-256s."""
    import hashlib

    import cupy as cp

    rows = []
    for name, make, spacing in AGAINST_CPU:
        phase = make()
        got = T.local_thickness(cp.asarray(phase), spacing=spacing).get()
        ref = T.local_thickness(phase, spacing=spacing, device="cpu")
        row = {"case": name, "spacing": list(spacing), "equal": bool(np.array_equal(got, ref)),
               "sha256_gpu": hashlib.sha256(got.tobytes()).hexdigest(),
               "sha256_cpu": hashlib.sha256(ref.tobytes()).hexdigest()}
        rows.append(row)
        log(f"GPU == CPU, {name}, spacing {spacing}: {row['equal']} "
            f"(sha256 {row['sha256_cpu'][:12]})")
    return rows


COMPILE_CHILD = r"""
import sys, time
t = time.perf_counter()
sys.path.insert(0, sys.argv[1] + "/workflow")
import numpy as np
import volsweep
x = np.ones((20, 21, 22), bool)
x[3, 4, 5] = False
volsweep.local_thickness(x)
print(time.perf_counter() - t)
"""


def part_compile(a, out, log):
    import tempfile

    cold, warm = [], []
    for _ in range(a.repeat):
        with tempfile.TemporaryDirectory() as cache:
            env = dict(os.environ, NUMBA_CACHE_DIR=cache)
            for store in (cold, warm):
                r = subprocess.run([sys.executable, "-c", COMPILE_CHILD, str(ROOT)], env=env,
                                   capture_output=True, text=True, check=True)
                store.append(float(r.stdout.strip().splitlines()[-1]))
    out["compile"] = {"cold_s": cold, "warm_s": warm}
    log(f"first call, empty numba cache: median {statistics.median(cold):.2f} s ({fmt(cold)}); "
        f"with the cache: {statistics.median(warm):.2f} s ({fmt(warm)})")


def part_weights(a, out, log):
    rows = []
    phases = [("blobs 128^3", blobs((128,) * 3)),
              ("blobs 160^3 0.6/2", blobs((160,) * 3, 0.6, 2, seed=4)),
              ("pores 96^3", pores(96, seed=2))]
    for name, phase in phases:
        for spacing in FIRST_SPACINGS:
            r = run_case(name, phase, a.device, a.repeat, spacing=spacing)
            rows.append(r)
            log(f"{name} spacing {spacing}: median {r['median_s']:.4f} s ({fmt(r['times_s'])})")
    out["weights"] = rows


NEEDS_CASES = [
    *((f"blobs 128^3 {sp}", lambda: blobs((128,) * 3), sp) for sp in FIRST_SPACINGS[:4]),
    ("pores 96^3 (1, 1, 1)", lambda: pores(96), (1, 1, 1)),
    ("pores 96^3 (2.79, 2.39, 2.39)", lambda: pores(96), (2.79, 2.39, 2.39)),
    ("pores 144^3 (0.65, 0.65, 2.0)", lambda: pores(144), (0.65, 0.65, 2.0)),
    ("pores 256^3 (0.65, 0.65, 2.0)", lambda: pores(256), (0.65, 0.65, 2.0)),
    ("pores 256^3 (0.7, 1.3, 1.0)", lambda: pores(256), (0.7, 1.3, 1.0)),
    ("blobs 250^3 (1, 1, 1)", lambda: blobs((250,) * 3), (1, 1, 1)),
    ("pores 256^3 (1, 1, 1)", lambda: pores(256), (1, 1, 1)),
]


def part_needs(a, out, log):
    import cupy as cp

    from volsweep.thickness import _gpu

    def call(x, spacing, clear):
        if clear:
            _gpu.DISC_NEEDS.clear()
        start, stop = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        T.local_thickness(x, spacing=spacing)
        stop.record()
        stop.synchronize()
        return cp.cuda.get_elapsed_time(start, stop) / 1e3

    rows = []
    for name, make, spacing in NEEDS_CASES:
        phase = make()
        x = on_device(phase, "cuda")
        got = T.local_thickness(x, spacing=spacing).get()
        uploaded, kept = [], []
        for _ in range(a.repeat):
            uploaded.append(call(x, spacing, True))
            kept.append(call(x, spacing, False))
        same = bool(np.array_equal(got, T.local_thickness(phase, spacing=spacing, device="cpu")))
        rows.append({"case": name, "spacing": list(spacing), "kept_s": kept,
                     "uploaded_s": uploaded, "gpu_equals_cpu": same})
        log(f"{name}: kept {statistics.median(kept) * 1e3:.2f} ms, uploaded in every call "
            f"{statistics.median(uploaded) * 1e3:.2f} ms, GPU == CPU {same}")
    out["needs"] = rows


def part_first(a, out, log):
    rows = []
    for spacing in FIRST_SPACINGS:
        first, second = [], []
        for seed in range(a.repeat):
            r = subprocess.run([sys.executable, "-c", FIRST_CHILD, str(ROOT), str(a.size),
                                str(seed), ",".join(map(str, spacing))],
                               capture_output=True, text=True, check=True)
            t1, t2 = (float(v) for v in r.stdout.split()[-2:])
            first.append(t1)
            second.append(t2)
        rows.append({"spacing": list(spacing), "size": a.size, "first_s": first,
                     "second_s": second})
        log(f"blobs {a.size}^3 spacing {spacing}, fresh process: first call median "
            f"{statistics.median(first):.3f} s ({fmt(first)}), second "
            f"{statistics.median(second):.3f} s ({fmt(second)})")
    out["first"] = rows


def fmt(times):
    return ", ".join(f"{t:.3g}" for t in times)


def _shape(text):
    """'800x800x200' -> (800, 800, 200)."""
    try:
        shape = tuple(int(v) for v in text.lower().split("x"))
    except ValueError:
        shape = ()
    if len(shape) != 3 or min(shape) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a 3D shape such as 800x800x200")
    return shape


def _porosity_blobiness(text):
    """``"0.5/2"`` -> (0.5, 2.0), for --porespy-cases."""
    try:
        porosity, blobiness = (float(v) for v in text.split("/"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected porosity/blobiness such as 0.5/2, got {text!r}") from None
    if not (0 < porosity < 1 and blobiness > 0):
        raise argparse.ArgumentTypeError(f"porosity must lie in (0, 1) and blobiness be > 0, "
                                         f"got {text!r}")
    return porosity, blobiness


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--parts", nargs="+", default=None)
    p.add_argument("--cases", nargs="+", default=list(CASES))
    p.add_argument("--size", type=int, default=128)
    p.add_argument("--pores-sizes", type=int, nargs="*", default=[64, 96, 128])
    p.add_argument("--pores-shapes", type=_shape, nargs="*", default=[],
                   help="more pores cases (scaling) of these shapes, e.g. 800x800x200")
    p.add_argument("--porespy-size", type=int, default=250)
    p.add_argument("--porespy-cases", type=_porosity_blobiness, nargs="+",
                   default=[(0.5, 1.0), (0.5, 2.0), (0.6, 1.0), (0.6, 2.0)],
                   help="PoreSpy blobs as porosity/blobiness (default 0.5/1 0.5/2 0.6/1 0.6/2)")
    p.add_argument("--spacing-pores", type=int, nargs="*", default=[])
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--calls", type=int, default=100)
    p.add_argument("--seed", type=int, default=0,
                   help="seed of the random cases (cases, scaling, stages, porespy)")
    p.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    p.add_argument("--check-cpu", action="store_true")
    p.add_argument("--out", type=Path)
    a = p.parse_args(argv)
    parts = a.parts or (["cases", "scaling", "spacing", "gpu"] if a.device == "cuda"
                        else ["cases", "scaling", "spacing", "porespy", "edt"])
    out = {"args": {k: str(v) for k, v in vars(a).items()},
           "hardware": {"platform": platform.platform(), "cpu_count": os.cpu_count(),
                        "affinity": len(os.sched_getaffinity(0))}}
    lines = []

    def log(msg):
        lines.append(msg)
        print(msg, flush=True)

    fns = {"cases": part_cases, "scaling": part_scaling, "stages": part_stages,
           "spacing": part_spacing,
           "porespy": part_porespy, "edt": part_edt, "gpu": part_gpu, "compile": part_compile,
           "first": part_first, "weights": part_weights, "needs": part_needs}
    for part in parts:
        fns[part](a, out, log)
        if a.out:
            a.out.write_text(json.dumps(out, indent=1))
    print("\n".join(["", "summary:"] + lines))


if __name__ == "__main__":
    main()
