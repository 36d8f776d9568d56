"""Shared benchmark helpers: CUDA-event timing and the duplicate-free kernel grid."""

import math

import numpy as np


def cuda_times(fn, reps, warm=1):
    """Seconds of ``fn()`` on the current stream, timed with CUDA events, after ``warm`` calls."""
    import cupy as cp

    for _ in range(warm):
        fn()
    cp.cuda.get_current_stream().synchronize()
    out = []
    for _ in range(reps):
        a, b = cp.cuda.Event(), cp.cuda.Event()
        a.record()
        fn()
        b.record()
        b.synchronize()
        out.append(cp.cuda.get_elapsed_time(a, b) / 1e3)
    return out


def kernel_grid(n_kernels):
    """θ, φ with no duplicate kernels (θ strictly inside (−π/2, π/2), φ in [0, π))."""
    m = int(math.ceil(math.sqrt(n_kernels)))
    return np.linspace(-1.4, 1.4, m), np.arange(m) * np.pi / m
