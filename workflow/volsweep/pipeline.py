"""The workflow's steps: one function per Snakemake rule, called by its thin script.

Each step reads its inputs, calls the pure-array cores, and writes its
outputs atomically (temporary name, then rename), so a killed job leaves no
half-written file behind.  A store is named by its folder or by its root
``zarr.json`` (the file the rules declare).  A volume's sweep and thickness
are one job each unless :mod:`volsweep.jobs` splits them; split sweeps are
merged by :func:`aggregate_sweep` and :func:`merge_orientation`, chunked
thickness writes one store shard per chunk job.
"""

from __future__ import annotations

import functools
import json
import logging
import time
from pathlib import Path

import numpy as np

from volsweep.io import datasets
from volsweep.io import orientation as orientation_store
from volsweep.io.atomic import atomic_dir, atomic_file
from volsweep.io.complete import IncompleteError, check_written, require_complete
from volsweep.io.readers import VolumeError, open_volume, source_sha256, volume_where
from volsweep.io.store import create_store, ingest, open_store
from volsweep.runner import run_script
from volsweep.tiling import plan_tiles

log = logging.getLogger("volsweep")

MB = 2**20
ORIENTATION_VARS = orientation_store.VARIABLES
__all__ = ["IncompleteError", "require_complete", "run_script"]


def store_root(path) -> Path:
    """The folder of a store given by its folder or by its root ``zarr.json``."""
    path = Path(path)
    return path.parent if path.name == "zarr.json" else path


def _volume(volume_zarr):
    store = open_store(store_root(volume_zarr))
    return store, tuple(store.attrs["spacing"])


def ingest_volume(entry: dict, name: str, out, *, chunks, shards, buffer_mb: float,
                  phase: dict | None = None):
    """Rule ingest: any input format becomes ``results/{vol}/volume.zarr``.

    With ``phase`` (the config's ``thickness`` section, when thickness runs),
    the phase rule is resolved first (an ``otsu``/``li``/``yen`` threshold from
    a histogram streamed from the input), checked (an empty or full phase
    stops here, before any store is written; under 1% or over 95% warns), and
    recorded in the store's attrs as ``phase`` for the thickness jobs.
    """
    from volsweep.phase import check_phase, value_range

    source = open_volume(entry, name, memory_budget=buffer_mb * MB)
    lo, hi = value_range(source)
    if lo == hi:
        raise VolumeError(f"{volume_where(entry, name)}: every voxel is {lo}: a constant volume "
                          "has no structure to sweep or measure")
    rule = None
    if phase is not None:
        rule = check_phase(source, name, threshold=phase["threshold"], label=phase["label"],
                           invert=phase["invert"])
        if rule["warning"]:
            log.warning("%s", rule["warning"])
        log.info("ingest %s: phase %s, %.4f of the volume", name, rule, rule["phase_fraction"])
    spacing = [float(s) for s in getattr(source, "spacing", entry["spacing"])]
    unit = getattr(source, "unit", None) or entry.get("unit")
    axes = getattr(source, "axes", "xyz")
    attrs = {
        "name": name,
        "spacing": spacing,
        "shape": [int(n) for n in source.shape],
        "source": entry.get("path", "synthetic"),
        "format": entry.get("format", "synthetic"),
        "source_dtype": str(np.dtype(source.dtype)),
        "source_sha256": source_sha256(entry, source),
        "value_range": [lo, hi],
        "file_axes": axes,
        "axes_from_file": {c: axes.index(c) for c in "xyz"},
        **({"unit": unit} if unit else {}),
        **({"phase": rule} if rule else {}),
    }
    ingest(source, store_root(out), chunks=chunks, shards=shards, memory_budget=buffer_mb * MB,
           attrs=attrs, name=name, spacing=spacing, unit=unit,
           where=volume_where(entry, name))


def sweep_scales(a, thickness_nc=None):
    """``(a, orientation_a)`` for the engine from the config's ``sweep.a``.

    ``auto`` derives both from the phase's local-thickness distribution
    (:func:`volsweep.orientation.scale_from_thickness`): the statistics' scale
    and the per-voxel map's scale; otherwise ``a`` as given, and the map uses
    every scale.
    """
    if a != "auto":
        return a, None
    from volsweep.orientation import MAP_SCALE_PER_RADIUS, scale_from_thickness

    dist = datasets.open_netcdf(thickness_nc)
    a_stats = float(scale_from_thickness(dist))
    a_map = float(scale_from_thickness(dist, factor=MAP_SCALE_PER_RADIUS))
    log.info("sweep: a = auto from the median thickness %.4g: a = %.4g (statistics), %.4g (map)",
             float(dist["median"]), a_stats, a_map)
    return sorted({a_map, a_stats}), a_map


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

    store, spacing = _volume(volume_zarr)
    volume = store[...]
    a, orientation_a = sweep_scales(sweep["a"], thickness_nc)
    xi, truncate = sweep["xi"], sweep["truncate"]
    omap = orientation_zarr is not None
    kwargs = {"truncate": truncate} if truncate is not None else {}
    kwargs.update(integration_scale=sweep.get("integration_scale"))
    est = sweep_cost(volume.shape, theta, phi, xi, a=a, spacing=spacing, mode=sweep["mode"],
                     device="cuda" if _uses_gpu(device) else "cpu", stats=tuple(sweep["stats"]),
                     orientation_map=omap, **kwargs)
    log.info("sweep: %d unique kernels, FFT shapes %s, estimated %.1f s, %.2f GB",
             est["n_unique_kernels"], est["fft_shapes"], est["seconds"], est["peak_bytes"] / 1e9)
    run = functools.partial(run_sweep, volume, np.asarray(theta), np.asarray(phi), np.asarray(xi),
                            a=a, spacing=spacing, mode=sweep["mode"], stats=tuple(sweep["stats"]),
                            device=device, progress=True, orientation_map=omap,
                            orientation_a=orientation_a, unit=store.attrs.get("unit"), **kwargs)
    untiled, smallest = memory_needs(volume.shape, theta, phi, xi, a=a, spacing=spacing,
                                     orientation_map=omap, **kwargs)
    start = time.perf_counter()
    limit = None if device_memory_mb is None else device_memory_mb * MB
    ds = _sweep_halving_on_oom(run, limit, untiled, smallest)
    log.info("sweep: computed in %.2f s (estimated %.1f s)", time.perf_counter() - start,
             est["seconds"])
    if omap:
        attrs = None if block is not None else _orientation_attrs(theta, phi, xi, provenance)
        orientation_store.write(store_root(orientation_zarr), ds, theta_offset=theta_offset,
                                chunks=store.chunks, shards=store.shards, spacing=spacing,
                                attrs=attrs)
    ds = ds.drop_vars([v for v in ds.data_vars if "x" in ds[v].dims])  # per-voxel: the store's
    if block is None:
        _write_sweep(ds, out_nc, store, provenance)
    else:
        # Votes count each voxel's winner: only the merged map knows it (aggregate_sweep).
        ds = ds.drop_vars([v for v in ("orientation_votes",) if v in ds])
        ds.attrs["block"] = int(block)
        datasets.write_netcdf(ds, out_nc)


def _uses_gpu(device) -> bool:
    from volsweep.backend import resolve_device

    return resolve_device(device) == "cuda"


def _write_sweep(ds, out_nc, store, provenance):
    from volsweep.products import with_products

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
    require_complete(block_ncs, "sweep block")
    store, _ = _volume(volume_zarr)
    ds = datasets.merge_sweep_blocks(block_ncs, unit=store.attrs.get("unit"))
    if orientation_zarr is not None:
        ds = _with_votes(ds, orientation_store.open_group(store_root(orientation_zarr)))
    _write_sweep(ds, out_nc, store, provenance)


def _with_votes(ds, group):
    from volsweep.orientation import votes_from_map

    dims = [d for d in ("a", "theta", "phi", "xi") if d in ds.dims]
    names = {d: f"argmax_{d}" for d in dims}
    if orientation_store.CRITERION not in group or any(n not in group for n in names.values()):
        return ds
    grid = tuple(ds.sizes[d] for d in dims)
    votes = votes_from_map(group[orientation_store.CRITERION][...],
                           [group[names[d]][...] for d in dims], grid)
    return ds.assign(orientation_votes=(tuple(dims), votes))


def _phase(volume, store, thickness: dict, **kwargs):
    """The phase of ``volume`` by the rule ingest resolved (an otsu threshold as a number)."""
    from volsweep.thickness import select_phase

    rule = store.attrs.get("phase") or thickness
    return select_phase(volume, threshold=rule["threshold"], label=rule["label"],
                        invert=rule["invert"], **kwargs)


def _device_label(device) -> str:
    from volsweep.backend import device_name, resolve_device

    return device_name(resolve_device(device))


def thickness(volume_zarr, out_zarr, out_nc, *, thickness: dict, device, provenance: dict, name):
    """Rule thickness: the whole volume's local thickness in one call, store and distribution."""
    from volsweep.thickness import distribution_from_counts, local_thickness, value_counts

    store, spacing = _volume(volume_zarr)
    binary = _phase(store[...], store, thickness, name=f"volumes.{name}")
    start = time.perf_counter()
    lt = np.asarray(local_thickness(binary, spacing=spacing, device=device), dtype=np.float32)
    log.info("thickness: %s voxels, %d in the phase, in %.2f s", lt.shape, int(binary.sum()),
             time.perf_counter() - start)
    with atomic_dir(store_root(out_zarr)) as tmp:
        out = _create_thickness_store(tmp, store, spacing, shards=store.shards)
        out[...] = lt
    values, counts = value_counts(lt)
    ds = distribution_from_counts(values, counts, lt.size, bins=thickness["bins"], spacing=spacing)
    ds.attrs.update(provenance, source_sha256=store.attrs["source_sha256"],
                    r_max=float(lt.max()) / 2, device=_device_label(device))
    datasets.write_netcdf(ds, out_nc)


def _create_thickness_store(path, volume_store, spacing, *, shards):
    attrs = {"long_name": "local thickness (diameter)",
             "units": volume_store.attrs.get("unit", "spacing units"),
             "source_sha256": volume_store.attrs["source_sha256"]}
    return create_store(path, volume_store.shape, chunks=volume_store.chunks, shards=shards,
                        attrs=attrs, spacing=spacing, unit=volume_store.attrs.get("unit"),
                        name=f"{volume_store.attrs['name']} local thickness")


def thickness_rmax(volume_zarr, out_json, *, thickness: dict, device, name):
    """Rule thickness_rmax: R_max, the largest inscribed radius of the phase (first pass)."""
    from volsweep.thickness import max_inscribed_radius

    store, spacing = _volume(volume_zarr)
    binary = _phase(store[...], store, thickness, name=f"volumes.{name}")
    r_max = max_inscribed_radius(binary, spacing=spacing, device=device)
    info = {"r_max": float(r_max), "n_voxels": int(binary.size), "n_phase": int(binary.sum()),
            "spacing": list(spacing), "shape": list(binary.shape), "device": _device_label(device)}
    with atomic_file(out_json) as tmp:
        tmp.write_text(json.dumps(info, indent=2) + "\n")


def create_thickness_store(volume_zarr, out_zarr, *, chunks, chunk):
    """Rule thickness_store: an empty float32 store whose shards are the thickness chunks."""
    store, spacing = _volume(volume_zarr)
    with atomic_dir(store_root(out_zarr)) as tmp:
        arr = _create_thickness_store(tmp, store, spacing, shards=chunk)
        if tuple(arr.chunks) != tuple(chunks) and tuple(chunks) != tuple(store.chunks):
            log.info("thickness store: chunks %s", arr.chunks)


def thickness_chunk(volume_zarr, thickness_zarr, rmax_json, out_npz, *, shard, chunk, thickness: dict,
                    device):
    """Rule thickness_chunk: exact local thickness of one chunk's core, from core + halo.

    The chunk is the store's shard ``shard`` (its (i, j, k) index): the job
    writes that shard only, then the chunk's exact value counts to
    ``out_npz``, atomically and last.
    """
    from volsweep.thickness import local_thickness_core, thickness_halo, value_counts

    store, spacing = _volume(volume_zarr)
    r_max = json.loads(Path(rmax_json).read_text())["r_max"]
    tiles = plan_tiles(store.shape, chunk, thickness_halo(r_max, spacing))
    tile = next(t for t in tiles if tuple(s.start // c for s, c in zip(t.core, chunk)) == tuple(shard))
    start = [max(0, s) for s in tile.start]
    stop = [min(n, s) for n, s in zip(store.shape, tile.stop)]
    block = store[tuple(slice(a, b) for a, b in zip(start, stop))]
    core_in_block = tuple(slice(c.start - a, c.stop - a) for c, a in zip(tile.core, start))
    binary = _phase(block, store, thickness, whole=False)
    lt = local_thickness_core(binary, core_in_block, r_max, spacing=spacing, device=device)
    out = open_store(store_root(thickness_zarr), mode="r+")
    out[tile.core] = np.asarray(lt, dtype=np.float32)
    values, counts = value_counts(lt)
    with atomic_file(out_npz) as tmp, open(tmp, "wb") as fh:
        np.savez(fh, values=values, counts=counts, n_voxels=np.int64(np.prod(tile.core_shape)),
                 core_start=np.array([c.start for c in tile.core]),
                 core_stop=np.array([c.stop for c in tile.core]))
    log.info("thickness chunk %s: core %s, halo block %s..%s", tuple(shard), tile.core, start, stop)


def aggregate_thickness(chunk_npzs, rmax_json, volume_zarr, thickness_zarr, out_nc, *, bins,
                        provenance: dict):
    """Rule aggregate_thickness: merge every chunk's counts into ``results/{vol}/thickness.nc``.

    First checks that every chunk's marker is there (naming the missing ones),
    that the chunks cover the volume, and that the shared ``thickness.zarr``
    has every core written: all its shard files present and no NaN (the fill
    value) left in any core, read one chunk core at a time.
    """
    from volsweep.thickness import distribution_from_counts, merge_value_counts

    store, spacing = _volume(volume_zarr)
    require_complete(chunk_npzs, "thickness chunk")
    pairs, n_voxels, cores = [], 0, []
    for path in chunk_npzs:
        with np.load(path) as z:
            pairs.append((z["values"], z["counts"]))
            n_voxels += int(z["n_voxels"])
            cores.append(tuple(slice(int(a), int(b)) for a, b in zip(z["core_start"], z["core_stop"])))
    if n_voxels != int(np.prod(store.shape)):
        raise IncompleteError(f"thickness chunks cover {n_voxels} voxels, the volume has "
                              f"{int(np.prod(store.shape))}")
    root = store_root(thickness_zarr)
    check_written(open_store(root), root / "0", cores, chunk_npzs)
    values, counts = merge_value_counts(pairs)
    ds = distribution_from_counts(values, counts, n_voxels, bins=bins, spacing=spacing)
    rmax = json.loads(Path(rmax_json).read_text())
    ds.attrs.update(provenance, source_sha256=store.attrs["source_sha256"], r_max=rmax["r_max"],
                    device=rmax.get("device", "unknown"))
    datasets.write_netcdf(ds, out_nc)


def summarize(paths, names, out_nc):
    """Rule summary: per-volume datasets stacked along a ``volume`` dimension."""
    datasets.write_netcdf(datasets.stack_volumes(paths, names), out_nc)
