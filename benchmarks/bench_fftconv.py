"""Time and peak memory of volsweep.fftconvolve against scipy (CPU) and cupyx (GPU), one run.

CPU peak memory is tracemalloc's peak of new allocations (inputs excluded); GPU peak
is the highest ``used_bytes`` of a fresh CuPy memory pool during the call (cuFFT
plan work areas included; the plan cache is cleared first).  Times are medians of
``--repeat`` runs after one warm-up; GPU times use CUDA events.

    python benchmarks/bench_fftconv.py --device both --repeat 7 --out bench.md
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import time
import tracemalloc

import numpy as np
import scipy
import scipy.signal

from _timing import cuda_times
from volsweep import fftconvolve
from volsweep.fftconv import MemoryLimitError, estimate_peak_bytes

MiB = 2**20


def pi_case(rng):
    image = rng.integers(0, 256, (640, 480), dtype=np.uint8)
    y, x = np.mgrid[-640:640, -480:480].astype(np.float64)
    gabor = np.exp(-(x**2 + y**2) / (2 * 150.0**2)) * np.exp(1j * (0.07 * x + 0.03 * y))
    return gabor, image


def cases(device, rng, big):
    """(name, in1, in2, mode) on the CPU as NumPy arrays; moved to the GPU by the caller."""
    g, im = pi_case(rng)
    out = [("pi 1280x960 c128 * 640x480 u8 valid", g, im, "valid")]
    if device == "cpu":
        out.append(("3D 128^3 f32 * 31^3 same", rng.random((128,) * 3, dtype=np.float32),
                    rng.random((31,) * 3, dtype=np.float32), "same"))
    else:
        out.append(("3D 200^3 f32 * 61^3 same", rng.random((200,) * 3, dtype=np.float32),
                    rng.random((61,) * 3, dtype=np.float32), "same"))
        if big:
            out.append(("3D 800x800x200 f32 * 61^3 same",
                        rng.random((800, 800, 200), dtype=np.float32),
                        rng.random((61,) * 3, dtype=np.float32), "same"))
    return out


def _out_nbytes(a, b, mode):
    shape = [x + y - 1 if mode == "full" else (x if mode == "same" else abs(x - y) + 1)
             for x, y in zip(a.shape, b.shape)]
    return int(np.prod(shape)) * np.result_type(a.dtype, b.dtype, np.float32).itemsize


def variants(a, b, mode, gpu):
    _, whole = estimate_peak_bytes(a, b, mode)
    if gpu:
        import cupyx.scipy.signal as ref_signal
        ref = ("cupyx.scipy.signal.fftconvolve", lambda: ref_signal.fftconvolve(a, b, mode))
    else:
        ref = ("scipy.signal.fftconvolve", lambda: scipy.signal.fftconvolve(a, b, mode))
    out = [ref, ("volsweep.fftconvolve", lambda: fftconvolve(a, b, mode))]
    if a.dtype.kind == "c" or b.dtype.kind == "c":
        out.append(("volsweep dtype=complex64",
                    lambda: fftconvolve(a, b, mode, dtype=np.complex64)))
    # half-way between the output alone and the one-shot cost (or the least that holds a block)
    out_bytes = whole - estimate_peak_bytes(a, b, mode)[1] + _out_nbytes(a, b, mode)
    limit = int(out_bytes + (whole - out_bytes) / 2)
    for _ in range(8):
        try:
            estimate_peak_bytes(a, b, mode, memory_limit=limit)
            break
        except MemoryLimitError:
            limit = int(limit * 1.15)
    out.append((f"volsweep memory_limit={limit / MiB:.1f} MiB",
                lambda: fftconvolve(a, b, mode, memory_limit=limit)))
    return out


def measure_cpu(fn, repeat):
    tracemalloc.start()
    res = fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return res, statistics.median(times), peak


def measure_gpu(fn, repeat):
    import cupy as cp

    times = cuda_times(fn, repeat)  # after one warm-up call (plans, kernels)
    # peak: a fresh pool, plan cache cleared, the allocator hooked
    pool = cp.cuda.MemoryPool()
    peak = [0]

    def malloc(size):
        mem = pool.malloc(size)
        peak[0] = max(peak[0], pool.used_bytes())
        return mem

    cp.fft.config.get_plan_cache().clear()
    cp.get_default_memory_pool().free_all_blocks()
    cp.cuda.set_allocator(malloc)
    try:
        res = fn()
        cp.cuda.Device().synchronize()
        res = res.get()
    finally:
        cp.cuda.set_allocator(cp.get_default_memory_pool().malloc)
        cp.fft.config.get_plan_cache().clear()
        pool.free_all_blocks()
    return res, statistics.median(times), peak[0]


def hardware(gpu):
    import os

    cpu = platform.processor() or platform.machine()
    line = f"CPU: {cpu}, {os.cpu_count()} logical cores; numpy {np.__version__}, scipy {scipy.__version__}"
    if gpu:
        import cupy as cp

        props = cp.cuda.runtime.getDeviceProperties(0)
        name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
        line += f"; GPU: {name}, CuPy {cp.__version__}, CUDA runtime {cp.cuda.runtime.runtimeGetVersion()}"
    return line


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", choices=["cpu", "gpu", "both"], default="both")
    ap.add_argument("--repeat", type=int, default=5, help="timed repetitions (median)")
    ap.add_argument("--big", action="store_true", help="GPU: add the 800x800x200 case")
    ap.add_argument("--out", help="write the markdown table here (and .json beside it)")
    args = ap.parse_args(argv)
    devices = ["cpu", "gpu"] if args.device == "both" else [args.device]
    rows = []
    for device in devices:
        gpu = device == "gpu"
        if gpu:
            import cupy as cp
        rng = np.random.default_rng(0)
        for name, a, b, mode in cases(device, rng, args.big):
            ref_np = None
            if gpu:
                a, b = cp.asarray(a), cp.asarray(b)
            for label, fn in variants(a, b, mode, gpu):
                res, t, peak = (measure_gpu if gpu else measure_cpu)(fn, args.repeat)
                res = np.asarray(res)
                if ref_np is None:
                    ref_np = res
                rel = float(np.linalg.norm((res - ref_np).ravel()) / np.linalg.norm(ref_np.ravel()))
                row = dict(device=device, case=name, impl=label, median_s=t, peak_mib=peak / MiB,
                           rel_err_vs_first=rel)
                rows.append(row)
                print(f"{device:4s} | {name:34s} | {label:36s} | {t * 1e3:10.2f} ms | "
                      f"{peak / MiB:9.1f} MiB | {rel:.1e}", flush=True)
            del a, b
    table = ["| device | case | implementation | median time | peak memory | rel. diff vs reference |",
             "| --- | --- | --- | ---: | ---: | ---: |"]
    for r in rows:
        table.append(f"| {r['device']} | {r['case']} | {r['impl']} | {r['median_s'] * 1e3:.2f} ms | "
                     f"{r['peak_mib']:.1f} MiB | {r['rel_err_vs_first']:.1e} |")
    text = "\n".join(table) + "\n\n" + hardware("gpu" in devices) + "\n"
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)
        with open(args.out.rsplit(".", 1)[0] + ".json", "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
