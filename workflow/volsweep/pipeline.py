"""The workflow's steps: one function per Snakemake rule, called by its thin script.

Each step reads its inputs, calls the pure-array cores, and writes its
outputs atomically (temporary name, then rename), so a killed job leaves no
half-written file behind.  The one shared store, ``thickness.zarr``, is
written by the chunk jobs on disjoint shards; each chunk job's ``.npz`` is
written last and is its completion marker, and the aggregation checks every
marker and every shard before it merges.

Faults can be injected for tests through the environment variable
``VOLSWEEP_FAULT`` (see :func:`inject_fault`); unset, it costs nothing.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
import signal
import time
from pathlib import Path

import numpy as np

from volsweep.io import datasets
from volsweep.io.readers import open_volume, source_sha256, volume_where
from volsweep.io.atomic import atomic_dir, atomic_file
from volsweep.io.store import create_store, ingest, open_store
from volsweep.products import with_products
from volsweep.tiling import plan_tiles

log = logging.getLogger("volsweep")

#: Environment variable of the test fault switch: comma-separated ``step:action[:arg]``.
FAULT_ENV = "VOLSWEEP_FAULT"
#: Seconds a ``hang`` fault sleeps (a test kills the run meanwhile).
HANG_S = 3600
MB = 2**20


class InjectedFault(RuntimeError):
    """A failure injected by ``VOLSWEEP_FAULT`` (tests only)."""


def _faults(step: str):
    for spec in filter(None, os.environ.get(FAULT_ENV, "").split(",")):
        name, _, rest = spec.partition(":")
        action, _, arg = rest.partition(":")
        if name == step:
            yield action, arg


def inject_fault(step: str) -> None:
    """Act on ``VOLSWEEP_FAULT`` entries for ``step`` (a pipeline function name).

    Actions: ``kill`` (SIGKILL this process), ``hang`` (log, then sleep
    :data:`HANG_S`), ``fail-once:PATH`` (raise :class:`InjectedFault` unless
    the marker file PATH exists, creating it: the retry succeeds).  Called
    where a step has written part of its output.
    """
    for action, arg in _faults(step):
        if action == "kill":
            log.warning("fault: %s killed midway", step)
            os.kill(os.getpid(), signal.SIGKILL)
        elif action == "hang":
            log.warning("fault: %s hanging midway", step)
            for h in log.handlers:
                h.flush()
            time.sleep(HANG_S)
        elif action == "fail-once":
            marker = Path(arg)
            if not marker.exists():
                marker.touch()
                raise InjectedFault(f"fault: {step} failed once (transient)")
        elif action != "oom":
            raise ValueError(f"{FAULT_ENV}: unknown action {action!r} for {step}")


def _injected_oom(limit) -> None:
    """``VOLSWEEP_FAULT=sweep_block:oom:BYTES``: out of memory when ``limit`` exceeds BYTES."""
    for action, arg in _faults("sweep_block"):
        if action == "oom" and (limit is None or limit > float(arg)):
            raise MemoryError(f"fault: simulated out-of-memory at memory_limit={limit}")


@contextlib.contextmanager
def logged_to(log_path):
    """Send stderr and the ``volsweep`` logger to ``log_path`` for the duration."""
    Path(log_path).parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w") as fh, contextlib.redirect_stderr(fh):
        handler = logging.StreamHandler(fh)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        try:
            yield
        except Exception:
            log.exception("step failed")
            raise
        finally:
            log.removeHandler(handler)


def config_sha256(config: dict) -> str:
    """sha256 of the config as canonical JSON."""
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()


def package_versions() -> dict:
    """Versions of volsweep and the libraries that shape its numbers."""
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for dist in ("volsweep", "numpy", "scipy", "xarray", "zarr", "edt", "cupy-cuda12x",
                 "cupy-cuda13x", "snakemake"):
        try:
            out[f"version_{dist.split('-')[0]}"] = version(dist)
        except PackageNotFoundError:
            continue
    return out


def provenance(config: dict) -> dict:
    """Provenance attrs shared by every output: config hash and package versions."""
    return {"config_sha256": config_sha256(config), **package_versions()}


def ingest_volume(entry: dict, name: str, out, *, chunks, shards, memory_budget_mb: float):
    """Rule ingest: any input format becomes ``results/{vol}/volume.zarr``."""
    source = open_volume(entry, name, memory_budget=memory_budget_mb * 2**20)
    attrs = {
        "name": name,
        "spacing": [float(s) for s in entry["spacing"]],
        "shape": [int(n) for n in source.shape],
        "source": entry.get("path", "synthetic"),
        "format": entry.get("format", "synthetic"),
        "source_dtype": str(np.dtype(source.dtype)),
        "source_sha256": source_sha256(entry, source),
        **({"unit": entry["unit"]} if entry.get("unit") else {}),
    }
    ingest(source, out, chunks=chunks, shards=shards, memory_budget=memory_budget_mb * 2**20,
           attrs=attrs, name=name, spacing=entry["spacing"], unit=entry.get("unit"),
           where=volume_where(entry, name), on_block=lambda i: inject_fault("ingest_volume"))


def _volume(volume_zarr):
    store = open_store(volume_zarr)
    return store, tuple(store.attrs["spacing"])


ORIENTATION_VARS = ("response_max", "argmax_theta", "argmax_phi", "argmax_xi")


def sweep_block(volume_zarr, out_nc, *, theta, phi, xi, a, mode, truncate, stats, device,
                memory_budget_mb=None, block=0, theta_offset=0, orientation_zarr=None):
    """Rule sweep_block: the statistics of one parameter block of one volume.

    With ``orientation_zarr``, also the block's per-voxel maximum response and
    its (θ, φ, ξ) indices, θ counted over the whole grid (``theta_offset``).
    """
    from volsweep.engine import memory_needs, sweep

    store, spacing = _volume(volume_zarr)
    volume = store[...]
    kwargs = {} if truncate is None else {"truncate": truncate}
    run = functools.partial(sweep, volume, np.asarray(theta), np.asarray(phi), np.asarray(xi), a=a,
                            spacing=spacing, mode=mode, stats=tuple(stats), device=device,
                            progress=True, orientation_map=orientation_zarr is not None, **kwargs)
    untiled, smallest = memory_needs(volume.shape, theta, phi, xi, a=a, spacing=spacing,
                                     orientation_map=orientation_zarr is not None, **kwargs)
    ds = _sweep_halving_on_oom(run, None if memory_budget_mb is None else memory_budget_mb * MB,
                               untiled, smallest)
    if orientation_zarr is not None:
        write_orientation(orientation_zarr, ds, theta_offset=theta_offset, chunks=store.chunks,
                          shards=store.shards, spacing=spacing)
    inject_fault("sweep_block")
    ds = ds.drop_vars([v for v in ORIENTATION_VARS if v in ds.variables])
    ds.attrs["block"] = int(block)
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
            _injected_oom(limit)
            return run(memory_limit=limit)
        except errors as exc:
            limit = (untiled if limit is None else limit) / 2
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            if limit < smallest:
                raise MemoryError(f"sweep: out of memory ({reason}) and a 1-voxel tile with its "
                                  f"halo needs {smallest} bytes") from exc
            log.warning("sweep: out of memory (%s); retrying with memory_limit=%.0f bytes", reason, limit)


def _create_orientation(path, shape, *, chunks, shards, spacing, attrs=None):
    out = create_store(path, shape, chunks=chunks, shards=shards, spacing=spacing, attrs=attrs,
                       name="maximum wavelet response")
    group = zarr_group(path, mode="r+")
    for name in ORIENTATION_VARS[1:]:
        group.create_array(name, shape=tuple(shape), chunks=out.chunks, shards=out.shards,
                           dtype=np.uint16, fill_value=np.iinfo(np.uint16).max,
                           dimension_names=("x", "y", "z"))
    return group


def write_orientation(path, arrays, *, theta_offset=0, chunks, shards, spacing):
    """An orientation store: ``0`` = maximum response (OME image), plus uint16 index arrays."""
    resp = np.asarray(arrays["response_max"], dtype=np.float32)
    with atomic_dir(Path(path)) as tmp:
        group = _create_orientation(tmp, resp.shape, chunks=chunks, shards=shards, spacing=spacing)
        group["0"][...] = resp
        for name in ORIENTATION_VARS[1:]:
            index = np.asarray(arrays[name], dtype=np.uint16)
            group[name][...] = index + np.uint16(theta_offset) if name == "argmax_theta" else index


def zarr_group(path, mode="r"):
    import zarr

    return zarr.open_group(str(path), mode=mode)


def merge_orientation(block_zarrs, out_zarr, *, theta, phi, xi, provenance: dict):
    """Rule orientation_map: merge the blocks' maps by maximum, one shard region at a time.

    Ties keep the earlier block, whose (θ, φ, ξ) flat index is lower, so the
    result is the lowest flat index among the maxima, as within a block.
    """
    require_complete(block_zarrs, "orientation block")
    blocks = [zarr_group(p) for p in block_zarrs]
    for path, group in zip(block_zarrs, blocks):
        for name in ("0",) + ORIENTATION_VARS[1:]:
            missing = _missing_shards(group[name], Path(path) / name)
            if missing:
                raise IncompleteError(f"{path}: {name} has {len(missing)} shard(s) never written: "
                                      f"{', '.join(missing[:3])}")
    ref = blocks[0]["0"]
    attrs = {"theta": list(map(float, theta)), "phi": list(map(float, phi)),
             "xi": list(map(float, xi)), **provenance,
             "tie_rule": "lowest flat (theta, phi, xi) index among equal maxima"}
    with atomic_dir(Path(out_zarr)) as tmp:
        out = _create_orientation(tmp, ref.shape, chunks=ref.chunks, shards=ref.shards,
                                  spacing=tuple(ref.attrs["spacing"]), attrs=attrs)
        for tile in plan_tiles(ref.shape, ref.shards):
            best = None
            for g in blocks:
                parts = [g["0"][tile.core]] + [g[name][tile.core] for name in ORIENTATION_VARS[1:]]
                if best is None:
                    best = parts
                    continue
                better = parts[0] > best[0]
                best = [np.where(better, new, old) for new, old in zip(parts, best)]
            out["0"][tile.core] = best[0]
            for name, part in zip(ORIENTATION_VARS[1:], best[1:]):
                out[name][tile.core] = part


def thickness_rmax(volume_zarr, out_json, *, threshold, label, invert, device, name):
    """Rule thickness_rmax: R_max, the largest inscribed radius of the phase (first pass)."""
    from volsweep.backend import device_name, resolve_device
    from volsweep.thickness import max_inscribed_radius, select_phase

    store, spacing = _volume(volume_zarr)
    binary = select_phase(store[...], threshold=threshold, label=label, invert=invert,
                          name=f"volumes.{name}")
    r_max = max_inscribed_radius(binary, spacing=spacing, device=device)
    info = {"r_max": float(r_max), "n_voxels": int(binary.size), "n_phase": int(binary.sum()),
            "spacing": list(spacing), "shape": list(binary.shape),
            "device": device_name(resolve_device(device))}
    with atomic_file(out_json) as tmp:
        tmp.write_text(json.dumps(info, indent=2) + "\n")


def create_thickness_store(volume_zarr, out_zarr, *, chunks, chunk):
    """Rule thickness_store: an empty float32 store whose shards are the thickness chunks."""
    store, spacing = _volume(volume_zarr)
    attrs = {"long_name": "local thickness (diameter)", "units": store.attrs.get("unit", "spacing units"),
             "source_sha256": store.attrs["source_sha256"]}
    create_store(out_zarr, store.shape, chunks=chunks, shards=chunk, attrs=attrs, spacing=spacing,
                 unit=store.attrs.get("unit"), name=f"{store.attrs['name']} local thickness")


def thickness_chunk(volume_zarr, thickness_zarr, rmax_json, out_npz, *, index, chunk, threshold,
                    label, invert, device):
    """Rule thickness_chunk: exact local thickness of one chunk's core, from core + halo.

    Writes the core into the shared store (its own shards only), then the
    chunk's exact value counts to ``out_npz``, atomically and last: the
    ``.npz`` is the completion marker.  A job killed before it leaves no
    ``.npz``, so Snakemake reruns the chunk, which rewrites the same shards.
    """
    from volsweep.thickness import local_thickness_core, select_phase, thickness_halo, value_counts

    store, spacing = _volume(volume_zarr)
    r_max = json.loads(Path(rmax_json).read_text())["r_max"]
    tile = plan_tiles(store.shape, chunk, thickness_halo(r_max, spacing))[index]
    start = [max(0, s) for s in tile.start]
    stop = [min(n, s) for n, s in zip(store.shape, tile.stop)]
    block = store[tuple(slice(a, b) for a, b in zip(start, stop))]
    core_in_block = tuple(slice(c.start - a, c.stop - a) for c, a in zip(tile.core, start))
    binary = select_phase(block, threshold=threshold, label=label, invert=invert, whole=False)
    lt = local_thickness_core(binary, core_in_block, r_max, spacing=spacing, device=device)
    out = open_store(thickness_zarr, mode="r+")
    out[tile.core] = np.asarray(lt, dtype=np.float32)
    inject_fault("thickness_chunk")
    values, counts = value_counts(lt)
    with atomic_file(out_npz) as tmp, open(tmp, "wb") as fh:
        np.savez(fh, values=values, counts=counts, n_voxels=np.int64(np.prod(tile.core_shape)),
                 core_start=np.array([c.start for c in tile.core]),
                 core_stop=np.array([c.stop for c in tile.core]))
    log.info("thickness chunk %d: core %s, halo block %s..%s", index, tile.core, start, stop)


class IncompleteError(RuntimeError):
    """Parts of a merge are missing or unwritten; the message names them."""


def require_complete(paths, what: str) -> None:
    """Raise :class:`IncompleteError` naming every one of ``paths`` that is not there."""
    missing = [str(p) for p in paths if not Path(p).exists()]
    if missing:
        raise IncompleteError(f"{len(missing)} of {len(paths)} {what}(s) missing, rerun them: "
                              f"{', '.join(missing)}")


def _missing_shards(array, root: Path) -> list[str]:
    grid = [-(-n // s) for n, s in zip(array.shape, array.shards or array.chunks)]
    keys = (array.metadata.encode_chunk_key(c) for c in np.ndindex(*grid))
    return [k for k in keys if not (root / k).is_file()]


def check_written(store_zarr, cores, markers) -> None:
    """Every shard of a NaN-filled store exists and no core holds NaN (a never-written voxel)."""
    arr = open_store(store_zarr)
    missing = _missing_shards(arr, Path(store_zarr) / "0")
    if missing:
        raise IncompleteError(f"{store_zarr}: {len(missing)} shard(s) never written: "
                              f"{', '.join(missing[:3])}")
    for core, marker in zip(cores, markers):
        if np.isnan(arr[core]).any():
            raise IncompleteError(f"{store_zarr}: unwritten (NaN) voxels in the core of {marker}; "
                                  "delete that file and rerun")


def aggregate_sweep(block_ncs, volume_zarr, out_nc, *, provenance: dict):
    """Rule aggregate_sweep: the blocks, in order, become ``results/{vol}/sweep.nc``."""
    require_complete(block_ncs, "sweep block")
    store, _ = _volume(volume_zarr)
    ds = with_products(datasets.merge_sweep_blocks(block_ncs))
    ds.attrs.update(provenance, source_sha256=store.attrs["source_sha256"])
    datasets.write_netcdf(ds, out_nc)


def aggregate_thickness(chunk_npzs, rmax_json, volume_zarr, out_nc, *, bins, provenance: dict,
                        thickness_zarr=None):
    """Rule aggregate_thickness: merge every chunk's counts into ``results/{vol}/thickness.nc``.

    First checks that every chunk's marker is there (naming the missing ones),
    that the chunks cover the volume, and that the shared ``thickness.zarr``
    (default: next to ``thickness/``) has every core written: all its shard
    files present and no NaN (the fill value) left in any core, read one chunk
    core at a time.
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
    if thickness_zarr is None:  # the rule's layout: results/{vol}/thickness/rmax.json
        thickness_zarr = Path(rmax_json).parent.parent / "thickness.zarr"
    if Path(thickness_zarr).exists():
        check_written(thickness_zarr, cores, chunk_npzs)
    values, counts = merge_value_counts(pairs)
    ds = distribution_from_counts(values, counts, n_voxels, bins=bins, spacing=spacing)
    rmax = json.loads(Path(rmax_json).read_text())
    ds.attrs.update(provenance, source_sha256=store.attrs["source_sha256"], r_max=rmax["r_max"],
                    device=rmax.get("device", "unknown"))
    datasets.write_netcdf(ds, out_nc)


def summarize(paths, names, out_nc):
    """Rule summary: per-volume datasets stacked along a ``volume`` dimension."""
    datasets.write_netcdf(datasets.stack_volumes(paths, names), out_nc)


def run_script(func, snakemake_obj, **kwargs):
    """Entry point of the workflow scripts: log to ``log[0]``, run one step.

    A step with a ``device`` gets its own GPU first (:func:`volsweep.devices.claim_gpu`).
    """
    from volsweep.devices import claim_gpu

    with logged_to(snakemake_obj.log[0]), claim_gpu(kwargs.get("device", "cpu")):
        log.info("%s: rule %s, wildcards %s", func.__name__, snakemake_obj.rule,
                 dict(snakemake_obj.wildcards.items()))
        func(**kwargs)


def plot_sweep(sweep_nc, out_png, *, name):
    """Rule plot_sweep: energy maps over (θ, φ) for each ξ."""
    from volsweep import plots

    plots.energy_maps(datasets.open_netcdf(sweep_nc), out_png, title=name)


def plot_thickness(thickness_nc, volume_zarr, thickness_zarr, hist_png, slice_png, *, axis, name):
    """Rule plot_thickness: the histogram, and a mid-slice with a thickness overlay."""
    from volsweep import plots

    plots.thickness_histogram(datasets.open_netcdf(thickness_nc), hist_png, title=name)
    plots.thickness_slice(open_store(volume_zarr), open_store(thickness_zarr), slice_png,
                          axis=axis, title=name)


def plot_orientation(volume_zarr, orientation_zarr, out_png, *, axis, name):
    """Rule plot_orientation: a mid-slice coloured by the strongest wavelet's axis."""
    from volsweep import plots

    g = zarr_group(orientation_zarr)
    plots.orientation_slice(open_store(volume_zarr), g["0"], g["argmax_theta"], g["argmax_phi"],
                            g.attrs["theta"], g.attrs["phi"], out_png, axis=axis, title=name)
