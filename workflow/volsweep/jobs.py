"""Job planning: how many workflow jobs a volume's sweep and thickness take.

A job pays a fixed cost (a Python process, imports, the numba cache, CuPy's
start), so it must do far more work than that.  The sweep of a volume is one
job unless its estimated compute exceeds ``job_minutes`` (or more jobs are
asked for, to spread over several GPUs); the thickness of a volume is one job
unless the volume does not fit the memory budget.  Pure functions: nothing
here opens a file or imports CuPy, so the workflow's parse stays cheap.
"""

from __future__ import annotations

import functools
import math

import numpy as np


#: Cores behind the engine's CPU cost constants (``engine.sweep_cost``).
CPU_REFERENCE_THREADS = 2
#: Share of this machine's memory a thickness job plans with by default.
HOST_MEMORY_SHARE = 0.75


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


def thickness_chunk_shape(shape, *, budget_bytes: float, aligned_to, memory_bytes,
                          halo_fraction: float = 0.5) -> tuple[int, ...] | None:
    """``None`` when one call on the whole volume fits ``budget_bytes``, else a chunk (core) shape.

    ``memory_bytes(block_shape)`` is the call's peak memory model
    (:func:`volsweep.thickness.thickness_memory_bytes`).  A chunk's block is its
    core plus a halo of up to ``halo_fraction`` of the core on each side; cores
    are multiples of ``aligned_to`` (the store's shards), so chunk jobs write
    disjoint shards.

    Examples
    --------
    >>> per_voxel = lambda block: 24 * math.prod(block)
    >>> thickness_chunk_shape((64, 64, 64), budget_bytes=2**30, aligned_to=(32, 32, 32),
    ...                       memory_bytes=per_voxel) is None
    True
    >>> thickness_chunk_shape((256, 256, 256), budget_bytes=2**28, aligned_to=(32, 32, 32),
    ...                       memory_bytes=per_voxel)
    (64, 128, 128)
    """
    if memory_bytes(tuple(shape)) <= budget_bytes:
        return None
    core = [math.ceil(n / u) * u for n, u in zip(shape, aligned_to)]

    def block(c):
        return tuple(min(n, math.ceil(x * (1 + 2 * halo_fraction))) for x, n in zip(c, shape))

    while memory_bytes(block(core)) > budget_bytes:
        axis = int(np.argmax(core))
        if core[axis] <= aligned_to[axis]:
            raise MemoryError(f"thickness: a chunk of {tuple(aligned_to)} voxels with its halo "
                              f"needs more than the budget of {budget_bytes / 2**20:.0f} MiB")
        core[axis] = max(aligned_to[axis], math.ceil(core[axis] / 2 / aligned_to[axis]) * aligned_to[axis])
    return tuple(core)


def host_memory_bytes() -> int:
    """Physical memory of this machine, in bytes."""
    import os

    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


#: A CPU sweep estimated under this many seconds is scheduled on one core (its kernels
#: still use every core the process may run on), so that its volume's thickness, or
#: another volume's sweep, runs beside it instead of after it.
SHORT_SWEEP_SECONDS = 60


def sweep_seconds(shape, spacing, config: dict, *, gpu: bool, threads: int = CPU_REFERENCE_THREADS):
    """The engine's estimate (:func:`volsweep.engine.sweep_cost`) of a volume's whole grid,
    on the device the jobs will use, in seconds at ``threads`` CPU threads."""
    from volsweep.engine.wavelet import angle_values
    from volsweep.engine import sweep_cost

    sw = config["sweep"]
    theta, phi = angle_values(sw["theta"]), angle_values(sw["phi"])
    a = [1.0, 1.5] if sw["a"] == "auto" else sw["a"]  # auto: known only after the thickness
    kwargs = {"truncate": sw["truncate"]} if sw.get("truncate") is not None else {}
    cost = sweep_cost(tuple(shape), theta, phi, sw["xi"], a=a, spacing=spacing, mode=sw["mode"],
                      device="cuda" if gpu else "cpu", stats=tuple(sw["stats"]),
                      orientation_map=sw.get("orientation_map", False),
                      integration_scale=sw.get("integration_scale"),
                      orientation_boundary=sw.get("orientation_boundary", "mean"), **kwargs)
    return cost["seconds"] * (1.0 if gpu else CPU_REFERENCE_THREADS / max(1, threads))


def sweep_threads(seconds: float, *, gpu: bool, threads: int) -> int:
    """Cores a sweep job is scheduled on: ``threads``, or 1 for a short CPU sweep.

    Examples
    --------
    >>> sweep_threads(5.0, gpu=False, threads=2), sweep_threads(5.0, gpu=True, threads=2)
    (1, 2)
    """
    return 1 if not gpu and seconds < SHORT_SWEEP_SECONDS else threads


def sweep_plan(shape, spacing, config: dict, *, gpu: bool, threads: int = CPU_REFERENCE_THREADS,
               seconds: float | None = None):
    """Theta-index blocks of one volume's sweep jobs, from the engine's cost model.

    :func:`volsweep.engine.sweep_cost` estimates the whole grid's compute on
    the device the jobs will use; :func:`theta_blocks` splits it by
    ``sweep.job_minutes`` and ``sweep.min_jobs`` (or ``sweep.block_size``).
    ``seconds``: that estimate (:func:`sweep_seconds`) when the caller has it.

    Examples
    --------
    >>> cfg = {"sweep": {"theta": {"num": 8}, "phi": {"num": 8}, "xi": [1.0, 2.0], "a": 2.0,
    ...        "mode": "reflect", "truncate": None, "stats": ["energy"], "job_minutes": 30,
    ...        "min_jobs": 1, "block_size": None, "orientation_map": False}}
    >>> len(sweep_plan((64, 56, 48), (1, 1, 1), cfg, gpu=False))
    1
    """
    from volsweep.engine.wavelet import angle_values

    sw = config["sweep"]
    if seconds is None:
        seconds = sweep_seconds(shape, spacing, config, gpu=gpu, threads=threads)
    return theta_blocks(len(angle_values(sw["theta"])), seconds, job_minutes=sw["job_minutes"],
                        min_jobs=sw["min_jobs"], block_size=sw["block_size"])


def thickness_plan(shape, spacing, config: dict):
    """None: one thickness job for the whole volume; else the chunk jobs' core shape.

    Uses ``thickness.chunk`` when it is a shape; for ``auto``, the budget
    ``host_memory_mb`` (default :data:`HOST_MEMORY_SHARE` of this
    machine's memory) against the call's memory model at this ``spacing``.

    Examples
    --------
    >>> cfg = {"thickness": {"chunk": "auto"}, "host_memory_mb": 1024,
    ...        "storage": {"shards": [32, 32, 32]}}
    >>> thickness_plan((64, 56, 48), (1, 1, 1), cfg) is None
    True
    """
    from volsweep.thickness import thickness_memory_bytes

    th = config["thickness"]
    if th["chunk"] != "auto":
        return tuple(th["chunk"])
    budget = config["host_memory_mb"] * 2**20 if config.get("host_memory_mb") else HOST_MEMORY_SHARE * host_memory_bytes()
    return thickness_chunk_shape(tuple(shape), budget_bytes=budget,
                                 aligned_to=config["storage"]["shards"],
                                 memory_bytes=functools.partial(thickness_memory_bytes, spacing=spacing))
