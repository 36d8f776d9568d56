"""Per-kernel cost of the GPU sweep at 800x800x200 (FFT shape 1000x1000x392), by launch.

CUDA events around the spectrum product (mul_spec), the inverse FFT, the statistics
(core_stats) and the local energy of one kernel; medians over 55 kernels.

    PYTHONPATH=workflow python benchmarks/bench_kernel_breakdown.py
"""
import statistics

import cupy as cp
import numpy as np
from cupy.cuda import cufft

from volsweep.engine import INTEGRATION_SCALE_PER_A, _gpu, _plan, unique_kernels

N = (1000, 1000, 392); core = (800, 800, 200); off = (100, 100, 96)
blk = _plan.Block((0, 0, 0), N, tuple(slice(0, c) for c in core), off)
th = np.linspace(0, np.pi, 16, endpoint=False)
ks = unique_kernels(th, th, np.array([2.0, 4.0]), np.array([3.0]))
params = _plan.kernel_table(ks, (1.0, 1.0, 1.0), N, 1.0 / np.prod(N))
prm = cp.asarray(params.astype(np.float32))
nx, ny, nz = N; nzh = nz // 2 + 1; total = nx * ny * nzh
B = cp.random.random((nx, ny, nzh), dtype=cp.float32).astype(cp.complex64)
Y = cp.empty_like(B); Yr = Y.view(cp.float32)
plan = _gpu.c2r_plan(N)
mod = _gpu._module(False, names=())
mul, stats = mod.get_function("mul_spec"), mod.get_function("core_stats")
ncore = int(np.prod(core)); nb = _gpu._n_blocks(ncore); nbm = _gpu._n_blocks(total)
part = cp.empty((4, nb, 4)); resp = cp.full(core, -cp.inf, cp.float32); arg = cp.zeros(core, cp.int32)
best = cp.full(core, -cp.inf, cp.float32)
en = _gpu.LocalEnergy(blk); taps = _plan.gaussian_taps(3.0 * INTEGRATION_SCALE_PER_A, (1, 1, 1))


def ev():
    return cp.cuda.Event()


T = {"mul": [], "fft": [], "stats": [], "energy": []}
for j in range(0, 60):
    e = [ev() for _ in range(5)]
    e[0].record(); mul((nbm,), (256,), (B, Y, prm, np.int32(j), np.int32(nx), np.int32(ny), np.int32(nzh), np.uint32(total)))
    e[1].record(); plan.fft(Y, Yr, cufft.CUFFT_INVERSE)
    e[2].record(); stats((nb,), (256,), (Yr, part, np.int32(0), np.int32(ny), np.int32(2 * nzh), *(np.int32(o) for o in off), *(np.int32(c) for c in core), np.uint32(ncore), resp, arg, np.int32(j), np.int32(2)))
    e[3].record(); en.fold(Yr, taps, 1.0, best, arg, j)
    e[4].record(); e[4].synchronize()
    if j >= 5:
        for k, name in enumerate(T):
            T[name].append(cp.cuda.get_elapsed_time(e[k], e[k + 1]))
print({k: round(statistics.median(v), 3) for k, v in T.items()}, "ms per kernel; sum", round(sum(statistics.median(v) for v in T.values()), 2))
