"""cuFFT's 3D complex-to-real time per voxel by axis length: the tables of
``volsweep/_cufft_lengths.py``, and the model checked on whole shapes.

For every 7-smooth length, one float32 C2R transform (CUDA events, the mean of 6 after a
warm-up) of shape ``(n, n, 256)`` (the ``XY`` table) and ``(640, 640, n)`` (``Z``); then
measured against modelled time for a few shapes, and the engine's CPU-rule shape against
the GPU's choice (``volsweep.tiling.fft_lengths``) for an 800x800x200 sweep's block.

    PYTHONPATH=workflow python benchmarks/bench_cufft_lengths.py [--json out.json]
"""
import argparse
import json

import cupy as cp
import numpy as np
from cupy.cuda import cufft

from volsweep.engine import _gpu
from volsweep.tiling import _cufft_ps, fft_lengths, next_fast_len


def smooth(lo, hi):
    return sorted({next_fast_len(n) for n in range(lo, hi + 1)} - {next_fast_len(hi + 1)})


def c2r_ps(shape, reps=6):
    nx, ny, nz = shape
    y = cp.zeros((nx, ny, nz // 2 + 1), dtype=cp.complex64)
    yr = y.view(cp.float32)
    plan = _gpu.c2r_plan(shape)
    plan.fft(y, yr, cufft.CUFFT_INVERSE)
    a, b = cp.cuda.Event(), cp.cuda.Event()
    a.record()
    for _ in range(reps):
        plan.fft(y, yr, cufft.CUFFT_INVERSE)
    b.record()
    b.synchronize()
    ms = cp.cuda.get_elapsed_time(a, b) / reps
    del plan, y, yr
    cp.get_default_memory_pool().free_all_blocks()
    return ms * 1e9 / np.prod(shape)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", help="write the tables here")
    ap.add_argument("--no-tables", action="store_true", help="only the check against the model")
    args = ap.parse_args()
    out = {}
    if not args.no_tables:
        out["XY"] = {n: round(c2r_ps((n, n, 256)), 1) for n in smooth(96, 1600)}
        out["Z"] = {n: round(c2r_ps((640, 640, n)), 1) for n in smooth(32, 1024)}
        for name, table in out.items():
            print(f"{name} = {table}")
    print("shape: measured / modelled ps per voxel (the model includes no spectrum product)")
    from volsweep.tiling import GPU_SPECTRUM_PS

    for shape in [(972, 972, 375), (1000, 1000, 378), (896, 896, 300), (900, 900, 343), (640, 512, 200),
                  (1000, 980, 378), (1215, 1215, 125)]:
        model = _cufft_ps(shape) / np.prod(shape) - GPU_SPECTRUM_PS
        print(f"  {shape}: {c2r_ps(shape):.1f} / {model:.1f}")
    need = (968, 968, 368)
    cpu, gpu = fft_lengths(need), fft_lengths(need, device="cuda")
    t_cpu, t_gpu = c2r_ps(cpu) * np.prod(cpu), c2r_ps(gpu) * np.prod(gpu)
    print(f"800x800x200 with halo 84: CPU rule {cpu} {t_cpu / 1e9:.2f} ms, GPU choice {gpu} "
          f"{t_gpu / 1e9:.2f} ms per inverse FFT ({t_cpu / t_gpu:.2f}x)")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(out, fh, indent=1)


if __name__ == "__main__":
    main()
