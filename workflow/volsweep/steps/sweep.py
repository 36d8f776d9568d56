"""Rules sweep, sweep_block, aggregate_sweep and orientation_map.

A volume's whole grid is one job that writes ``sweep.nc`` and
``orientation.zarr``; a split grid writes one part per θ block, merged here
(statistics in block order, orientation maps by :mod:`volsweep.io.orientation`).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import threading
import time

import numpy as np

from volsweep.io import orientation as orientation_store
from volsweep.io.complete import require_complete
from volsweep.steps._common import MB, open_volume_store, store_root, uses_gpu

log = logging.getLogger("volsweep")


def sweep_scales(a, thickness_nc=None):
    """``(a, orientation_a)`` for the engine from the config's ``sweep.a``.

    ``auto`` derives both from the phase's local-thickness distribution
    (:func:`volsweep.engine.orientation.auto_scales`); otherwise ``a`` as given, and
    the map uses every scale.
    """
    from volsweep.io import datasets

    if a != "auto":
        return a, None
    from volsweep.engine.orientation import auto_scales

    dist = datasets.open_netcdf(thickness_nc)
    scales, a_map = auto_scales(dist)
    log.info("sweep: a = auto from the median thickness %.4g: a = %s (statistics), %.4g (map)",
             float(dist["median"]), [round(v, 4) for v in scales], a_map)
    return scales, a_map


def sweep(volume_zarr, out_nc, *, theta, phi, sweep: dict, device, provenance: dict,
          device_memory_mb=None, thickness_nc=None, orientation_zarr=None, block=None,
          theta_offset=0):
    """Rules sweep and sweep_block: the statistics of a volume's grid, or of one θ block.

    ``sweep`` is the config's ``sweep`` section (``a: auto`` reads
    ``thickness_nc``).  The whole grid (``block`` None) writes the final
    ``sweep.nc``, with its derived products and provenance; a block writes its
    part for :func:`aggregate_sweep`.  With ``orientation_zarr``, also the
    per-voxel orientation (:mod:`volsweep.io.orientation`), θ counted over the
    whole grid (``theta_offset``).
    """
    from volsweep.engine import memory_needs, sweep as run_sweep, sweep_cost

    dev = "cuda" if uses_gpu(device) else "cpu"
    gpu_ready = threading.Thread(target=_start_gpu, daemon=True)
    if dev == "cuda":  # the CUDA context and the engine's kernels load while the volume is read
        gpu_ready.start()
    store, spacing = open_volume_store(volume_zarr)
    start = time.perf_counter()
    volume = store[...]
    log.info("sweep: read %s %s in %.2f s", volume.dtype, volume.shape, time.perf_counter() - start)
    a, orientation_a = sweep_scales(sweep["a"], thickness_nc)
    xi, truncate = sweep["xi"], sweep["truncate"]
    omap = orientation_zarr is not None
    kwargs = {"truncate": truncate} if truncate is not None else {}
    kwargs.update(integration_scale=sweep.get("integration_scale"),
                  orientation_boundary=sweep.get("orientation_boundary", "mean"))
    est = sweep_cost(volume.shape, theta, phi, xi, a=a, spacing=spacing, mode=sweep["mode"],
                     device=dev, stats=tuple(sweep["stats"]),
                     orientation_map=omap, orientation_a=orientation_a, **kwargs)
    log.info("sweep: %d unique kernels, FFT shapes %s, estimated %.1f s, %.2f GB",
             est["n_unique_kernels"], est["fft_shapes"], est["seconds"], est["peak_bytes"] / 1e9)
    run = functools.partial(run_sweep, volume, np.asarray(theta), np.asarray(phi), np.asarray(xi),
                            a=a, spacing=spacing, mode=sweep["mode"], stats=tuple(sweep["stats"]),
                            device=device, progress=True, orientation_map=omap,
                            orientation_a=orientation_a, unit=store.attrs.get("unit"), **kwargs)
    untiled, smallest = memory_needs(volume.shape, theta, phi, xi, a=a, spacing=spacing,
                                     orientation_map=omap, mode=sweep["mode"], device=dev,
                                     orientation_a=orientation_a, **kwargs)
    limit = None if device_memory_mb is None else device_memory_mb * MB
    with contextlib.ExitStack() as stack:
        if omap:  # the map's arrays are stored while the statistics pass runs
            attrs = None if block is not None else _orientation_attrs(theta, phi, xi, provenance)
            put = stack.enter_context(orientation_store.writing(
                store_root(orientation_zarr), volume.shape, theta_offset=theta_offset,
                chunks=store.chunks, shards=store.shards, spacing=spacing, attrs=attrs))
            run = functools.partial(run, on_map=functools.partial(_put_once, put, stored := set()))
        if gpu_ready.is_alive():
            start = time.perf_counter()
            gpu_ready.join()
            log.info("sweep: waited %.2f s for the GPU", time.perf_counter() - start)
        start = time.perf_counter()
        ds = _sweep_halving_on_oom(run, limit, untiled, smallest)
        log.info("sweep: computed in %.2f s (estimated %.1f s)", time.perf_counter() - start,
                 est["seconds"])
        if omap:
            put({n: ds[n].values for n in orientation_store.per_voxel(ds) if n not in stored})
        # the statistics are written while the store's last array is
        ds = ds.drop_vars([v for v in ds.data_vars if "x" in ds[v].dims])  # per-voxel: the store's
        if block is None:
            _write_sweep(ds, out_nc, store, provenance)
        else:
            from volsweep.io import datasets

            # Votes count each voxel's winner: only the merged map knows it (aggregate_sweep).
            ds = ds.drop_vars([v for v in ("orientation_votes",) if v in ds])
            ds.attrs["block"] = int(block)
            datasets.write_netcdf(ds, out_nc)
        stats_written = time.perf_counter()
    if omap:
        log.info("sweep: orientation store complete %.2f s after the statistics",
                 time.perf_counter() - stats_written)


def _start_gpu():
    """Create the CUDA context and load the engine's compiled kernels (errors are left to
    the engine, which reports them with its own message)."""
    try:
        import cupy

        from volsweep.engine import _gpu

        cupy.zeros(1).sum()
        _gpu._module(False, names=()).get_function("mul_spec")
        _gpu._energy_module()
    except Exception:  # noqa: BLE001 - the sweep itself raises the real error
        pass


def _put_once(put, stored, arrays):
    """``put`` the arrays, remembering their names (a retry after running out of memory
    stores its own, later, over them)."""
    put(arrays)
    stored.update(arrays)


def _write_sweep(ds, out_nc, store, provenance):
    from volsweep.io import datasets
    from volsweep.engine.products import with_products

    ds = datasets.with_provenance(with_products(ds), provenance)
    ds.attrs["source_sha256"] = store.attrs["source_sha256"]
    datasets.write_netcdf(ds, out_nc)


def _out_of_memory_errors() -> tuple:
    errors = [MemoryError]
    try:
        from cupy.cuda.memory import OutOfMemoryError
        errors.append(OutOfMemoryError)
    except ImportError:
        pass
    return tuple(errors)


def _sweep_halving_on_oom(run, limit, untiled, smallest):
    """``run(memory_limit=limit)``, halving the limit after each out-of-memory error.

    The engine tiles space under the limit and merges the tiles' float64
    partial statistics in a fixed order, so a smaller limit changes only the
    FFT rounding (tests hold tiled against untiled to 1e-6 relative).  Without
    a limit, the first retry takes half the ``untiled`` need; the halving stops
    with a :class:`MemoryError` below the ``smallest`` tile's need.
    """
    errors = _out_of_memory_errors()
    while True:
        try:
            return run(memory_limit=limit)
        except errors as exc:
            limit = (untiled if limit is None else limit) / 2
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            if limit < smallest:
                raise MemoryError(f"sweep: out of memory ({reason}) and a 1-voxel tile with its "
                                  f"halo needs {smallest} bytes") from exc
            log.warning("sweep: out of memory (%s); retrying with memory_limit=%.0f bytes", reason, limit)


def _orientation_attrs(theta, phi, xi, provenance):
    return {"theta": list(map(float, theta)), "phi": list(map(float, phi)),
            "xi": list(map(float, xi)), **provenance, "tie_rule": orientation_store.TIE_RULE}


def merge_orientation(block_zarrs, out_zarr, *, theta, phi, xi, provenance: dict, threads=None):
    """Rule orientation_map: the blocks' maps merged by maximum (ties: the earlier block)."""
    orientation_store.merge([store_root(p) for p in block_zarrs], store_root(out_zarr),
                            attrs=_orientation_attrs(theta, phi, xi, provenance), threads=threads)


def aggregate_sweep(block_ncs, volume_zarr, out_nc, *, provenance: dict, orientation_zarr=None):
    """Rule aggregate_sweep: the blocks, in order, become ``results/{vol}/sweep.nc``.

    With the merged ``orientation_zarr``, the per-voxel orientation votes are
    counted from it (each voxel once, for its winning kernel).
    """
    from volsweep.io import datasets

    require_complete(block_ncs, "sweep block")
    store, _ = open_volume_store(volume_zarr)
    ds = datasets.merge_sweep_blocks(block_ncs, unit=store.attrs.get("unit"))
    if orientation_zarr is not None:
        ds = _with_votes(ds, orientation_store.open_group(store_root(orientation_zarr)))
    _write_sweep(ds, out_nc, store, provenance)


def _with_votes(ds, group):
    from volsweep.engine.orientation import votes_from_map

    dims = [d for d in ("a", "theta", "phi", "xi") if d in ds.dims]
    names = {d: f"argmax_{d}" for d in dims}
    if orientation_store.CRITERION not in group or any(n not in group for n in names.values()):
        return ds
    grid = tuple(ds.sizes[d] for d in dims)
    votes = votes_from_map(group[orientation_store.CRITERION][...],
                           [group[names[d]][...] for d in dims], grid)
    return ds.assign(orientation_votes=(tuple(dims), votes))
