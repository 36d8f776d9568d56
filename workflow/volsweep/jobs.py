"""Job planning: how many workflow jobs a volume's sweep and thickness take.

A job pays a fixed cost (a Python process, imports, the numba cache, CuPy's
start), so it must do far more work than that.  The sweep of a volume is one
job unless its estimated compute exceeds ``job_minutes`` (or more jobs are
asked for, to spread over several GPUs); the thickness of a volume is one job
unless the volume does not fit the memory budget.  Pure functions: nothing
here opens a file or imports CuPy, so the workflow's parse stays cheap.
"""

from __future__ import annotations

import math

import numpy as np

from volsweep import wavelet
from volsweep.tiling import fast_shape

#: Seconds per kernel per voxel of the FFT shape: about 1.15 inverse real FFTs.
#: Measured: H200, irfftn of 800x800x200 float32 in 3.05 ms; 2-core CPU,
#: scipy.fft.irfftn of 200^3 in 0.10 s (the CPU figure scales with 2/threads).
SECONDS_PER_KERNEL_VOXEL = {"cuda": 1.15 * 3.05e-3 / (800 * 800 * 200),
                            "cpu": 1.15 * 0.10 / 200 ** 3}
#: Cores behind the CPU figure above.
CPU_REFERENCE_THREADS = 2
#: Bytes per voxel of the engine's padded working set (spectrum, response, scratch).
SWEEP_BYTES_PER_VOXEL = 16
#: Bytes per voxel of a whole-volume local thickness (volume, phase, squared
#: distances, ranks, result): the host budget a thickness job plans with.
THICKNESS_BYTES_PER_VOXEL = 24


def unique_kernel_count(theta, phi, xi) -> int:
    """Number of distinct kernels of the grid (ψ depends on (θ, φ) only through ±u).

    Examples
    --------
    >>> unique_kernel_count([0.0, np.pi], [0.0], [2.0])
    1
    """
    t, p = np.meshgrid(np.asarray(theta, float), np.asarray(phi, float), indexing="ij")
    u = np.round(wavelet.axis_vector(t.ravel(), p.ravel()), 9) + 0.0
    first = np.argmax(np.abs(u) > 1e-9, axis=1)
    sign = np.sign(u[np.arange(len(u)), first])
    sign[sign == 0] = 1.0
    axes = np.unique(np.round(u * sign[:, None], 9) + 0.0, axis=0)
    xi = np.unique(np.asarray(xi, float))
    return int(len(axes) * np.sum(xi != 1.0) + np.sum(xi == 1.0))


def sweep_estimate(shape, theta, phi, xi, *, a, spacing=(1, 1, 1), truncate=None, device="cpu",
                   threads=CPU_REFERENCE_THREADS) -> dict:
    """Estimated compute and memory of one volume's whole sweep.

    Parameters
    ----------
    shape : 3 ints
    theta, phi, xi : 1D sequences
    a : float
    spacing : 3 floats
    truncate : float, optional
        The engine's truncation (default :data:`volsweep.wavelet.DEFAULT_TRUNCATE`).
    device : {'cpu', 'cuda'}
    threads : int
        CPU threads of the job.

    Returns
    -------
    dict
        ``kernels`` (unique), ``halo``, ``fft_shape``, ``seconds`` and ``bytes``
        (the untiled working set).

    Examples
    --------
    >>> est = sweep_estimate((64, 56, 48), [0.0, 1.0], [0.0], [2.0], a=2.0)
    >>> est["kernels"], est["seconds"] > 0
    (2, True)
    """
    truncate = wavelet.DEFAULT_TRUNCATE if truncate is None else truncate
    halo = wavelet.halo_for(a, np.atleast_1d(np.asarray(xi, float)), theta, phi, spacing, truncate)
    fshape = fast_shape(shape, halo)
    kernels = unique_kernel_count(theta, phi, xi)
    per_voxel = SECONDS_PER_KERNEL_VOXEL["cuda" if device == "cuda" else "cpu"]
    if device != "cuda":
        per_voxel *= CPU_REFERENCE_THREADS / max(1, threads)
    return {"kernels": kernels, "halo": tuple(halo), "fft_shape": tuple(fshape),
            "seconds": kernels * math.prod(fshape) * per_voxel,
            "bytes": math.prod(fshape) * SWEEP_BYTES_PER_VOXEL}


def theta_blocks(n_theta: int, seconds: float, *, job_minutes: float, min_jobs: int = 1,
                 block_size: int | None = None) -> list[np.ndarray]:
    """Theta indices of each sweep job; every job covers all φ and ξ.

    ``block_size`` fixes the θ values per job; otherwise the grid is split into
    the fewest contiguous, near-equal blocks that keep each job under
    ``job_minutes`` of estimated compute, and into at least ``min_jobs``.

    Examples
    --------
    >>> [b.tolist() for b in theta_blocks(5, 30.0, job_minutes=30)]
    [[0, 1, 2, 3, 4]]
    >>> [b.tolist() for b in theta_blocks(5, 7200.0, job_minutes=30)]
    [[0, 1], [2], [3], [4]]
    """
    if block_size is not None:
        return [np.arange(i, min(n_theta, i + block_size)) for i in range(0, n_theta, block_size)]
    jobs = max(int(min_jobs), math.ceil(seconds / (60.0 * job_minutes)))
    jobs = max(1, min(n_theta, jobs))
    return [block for block in np.array_split(np.arange(n_theta), jobs)]


def thickness_chunk_shape(shape, *, budget_bytes: float, aligned_to,
                          bytes_per_voxel: float = THICKNESS_BYTES_PER_VOXEL,
                          halo: int = 0) -> tuple[int, ...] | None:
    """``None`` when the whole volume fits ``budget_bytes``, else a chunk (core) shape.

    The chunk's core plus ``halo`` on each side must fit the budget; cores are
    multiples of ``aligned_to`` (the store's shards) so chunk jobs write
    disjoint shards.

    Examples
    --------
    >>> thickness_chunk_shape((64, 64, 64), budget_bytes=2**30, aligned_to=(32, 32, 32)) is None
    True
    >>> thickness_chunk_shape((256, 256, 256), budget_bytes=64 * 2**20, aligned_to=(32, 32, 32))
    (128, 128, 64)
    """
    if math.prod(shape) * bytes_per_voxel <= budget_bytes:
        return None
    core = [math.ceil(n / u) * u for n, u in zip(shape, aligned_to)]
    while math.prod(c + 2 * halo for c in core) * bytes_per_voxel > budget_bytes:
        axis = int(np.argmax(core))
        if core[axis] <= aligned_to[axis]:
            raise MemoryError(f"thickness: a chunk of {tuple(aligned_to)} voxels with a halo of "
                              f"{halo} needs more than the budget of {budget_bytes / 2**20:.0f} MiB")
        core[axis] = max(aligned_to[axis], math.ceil(core[axis] / 2 / aligned_to[axis]) * aligned_to[axis])
    return tuple(core)


def host_memory_bytes() -> int:
    """Physical memory of this machine, in bytes."""
    import os

    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
