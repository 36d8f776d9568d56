"""The engine's per-kernel local energy on the GPU: fused passes against cupyx filters.

Per kernel of an orientation map, the engine squares the response, integrates it with a
separable Gaussian over the core and folds it into the running maximum.  This times the
fused CUDA passes (``volsweep.engine._gpu.LocalEnergy``) against the same arithmetic in
``cupyx.scipy.ndimage.correlate1d`` plus an elementwise maximum, and against one inverse
FFT of the block (the rest of a kernel's cost), with CUDA events, median of ``--repeat``.

    PYTHONPATH=workflow python benchmarks/bench_local_energy.py --shape 800 800 200 --a 3
"""

from __future__ import annotations

import argparse
import statistics

import numpy as np

from _timing import cuda_times


def main(argv=None):
    import cupy as cp
    import cupyx.scipy.fft as cfft
    import cupyx.scipy.ndimage as cndi

    from volsweep.engine import INTEGRATION_SCALE_PER_A, _gpu, _plan

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--shape", type=int, nargs=3, default=[800, 800, 200])
    p.add_argument("--a", type=float, default=3.0)
    p.add_argument("--halo", type=int, default=100, help="voxels of halo per side (the kernel's reach)")
    p.add_argument("--repeat", type=int, default=7)
    args = p.parse_args(argv)

    core = tuple(args.shape)
    taps = _plan.gaussian_taps(INTEGRATION_SCALE_PER_A * args.a, (1.0, 1.0, 1.0))
    off = (args.halo,) * 3
    fft = tuple(c + 2 * h for c, h in zip(core, off))
    block = _plan.Block((0, 0, 0), fft, tuple(slice(0, c) for c in core), off)
    spec = cp.zeros(fft[:2] + (fft[2] // 2 + 1,), cp.complex64)
    spec[0, 0, 0] = 1
    g = cfft.irfftn(spec, s=fft)
    g += cp.random.default_rng(0).standard_normal(fft, dtype=cp.float32)
    best = cp.full(core, -cp.inf, cp.float32)
    arg = cp.zeros(core, cp.int32)
    energy = _gpu.LocalEnergy(block)
    keep = cp.ElementwiseKernel("float32 e, int32 kid", "float32 best, int32 arg",
                                "if (e > best) { best = e; arg = kid; }", "bench_keep_max")

    def fused():
        energy.fold(g, taps, 0.5, best, arg, 1)

    def filters():
        keep(_plan.local_energy(g, block, taps, 0.5, cp, cndi), np.int32(1), best, arg)

    def irfft():
        cfft.irfftn(spec, s=fft)

    ref = _plan.local_energy(g, block, taps, 0.5, cp, cndi)
    best.fill(-cp.inf)
    fused()
    err = float(cp.max(cp.abs(best - ref) / cp.abs(ref)))
    rows = {name: statistics.median(cuda_times(fn, args.repeat))
            for name, fn in (("fused", fused), ("cupyx filters", filters), ("irfftn of the block", irfft))}
    print(f"core {core}, FFT shape {fft}, taps {[len(w) for w in taps]}, max rel. difference {err:.2e}")
    for name, t in rows.items():
        print(f"{name:22s} {t * 1e3:8.2f} ms  ({t / rows['fused']:.2f}x fused)")


if __name__ == "__main__":
    main()
