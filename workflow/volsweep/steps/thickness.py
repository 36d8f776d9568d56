"""Rules thickness, thickness_rmax, thickness_store, thickness_chunk and aggregate_thickness.

A volume's thickness is one job (the whole volume in one call) unless it
exceeds the host budget; then an R_max pass, an empty store whose shards are
the chunks, one job per chunk that writes its own shard, and a merge of the
chunks' exact value counts.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import numpy as np

from volsweep.io.atomic import atomic_dir, atomic_file
from volsweep.io.complete import IncompleteError, check_written, require_complete
from volsweep.io.store import create_store, open_store
from volsweep.steps._common import device_label, job_device, open_volume_store, store_root
from volsweep.tiling import plan_tiles

log = logging.getLogger("volsweep")


def _phase(volume, store, thickness: dict, **kwargs):
    """The phase of ``volume`` by the rule ingest resolved (an otsu threshold as a number)."""
    from volsweep.thickness import select_phase

    rule = store.attrs.get("phase") or thickness
    return select_phase(volume, threshold=rule["threshold"], label=rule["label"],
                        invert=rule["invert"], **kwargs)


def thickness(volume_zarr, out_zarr, out_nc, *, thickness: dict, device, provenance: dict, name):
    """Rule thickness: the whole volume's local thickness in one call, store and distribution."""
    from volsweep.backend import to_device, to_numpy
    from volsweep.io import datasets
    from volsweep.thickness import distribution_from_counts, local_thickness, value_counts

    device = job_device(device)
    store, spacing = open_volume_store(volume_zarr)
    binary = to_device(_phase(store[...], store, thickness, name=f"volumes.{name}"), device)
    start = time.perf_counter()
    lt = local_thickness(binary, spacing=spacing, device=device)
    values, counts = value_counts(lt)  # where it was computed: a sort of the phase's voxels
    lt = to_numpy(lt)
    log.info("thickness: %s voxels, %d in the phase, in %.2f s", lt.shape, int(counts.sum()),
             time.perf_counter() - start)
    with atomic_dir(store_root(out_zarr)) as tmp:
        out = _create_thickness_store(tmp, store, spacing, shards=store.shards)
        out[...] = lt
    ds = distribution_from_counts(values, counts, lt.size, bins=thickness["bins"], spacing=spacing)
    ds.attrs.update(provenance, source_sha256=store.attrs["source_sha256"],
                    r_max=float(values[-1]) / 2 if values.size else 0.0, device=device_label(device))
    datasets.write_netcdf(ds, out_nc)


def _create_thickness_store(path, volume_store, spacing, *, shards):
    attrs = {"long_name": "local thickness (diameter)",
             "units": volume_store.attrs.get("unit", "spacing units"),
             "source_sha256": volume_store.attrs["source_sha256"]}
    return create_store(path, volume_store.shape, chunks=volume_store.chunks, shards=shards,
                        attrs=attrs, spacing=spacing, unit=volume_store.attrs.get("unit"),
                        name=f"{volume_store.attrs['name']} local thickness")


def halo_warning(name, r_max, spacing, chunk) -> str | None:
    """A warning when the chunks' halo makes chunk jobs read far more than their core.

    A chunk job reads its core plus ``thickness_halo(r_max)`` on each side; past
    twice the core's volume it mostly recomputes its neighbours' work.

    Examples
    --------
    >>> halo_warning("v", 2.0, (1, 1, 1), (64, 64, 64)) is None
    True
    >>> halo_warning("v", 40.0, (1, 1, 1), (64, 64, 64)).split(":")[0]
    'volumes.v'
    """
    import math

    from volsweep.thickness import thickness_halo

    halo = thickness_halo(r_max, spacing)
    block = [c + 2 * h for c, h in zip(chunk, halo)]
    ratio = math.prod(block) / math.prod(chunk)
    if ratio <= 2:
        return None
    return (f"volumes.{name}: R_max = {r_max:.4g} needs a halo of {tuple(halo)} voxels around "
            f"thickness chunks of {tuple(chunk)}: each chunk job reads {ratio:.1f}x its core; "
            "raise host_memory_mb (or thickness.chunk) so the volume takes fewer, larger chunks")


def thickness_rmax(volume_zarr, out_json, *, thickness: dict, device, name, chunk=None):
    """Rule thickness_rmax: R_max, the largest inscribed radius of the phase (first pass).

    With the chunk shape, warns when the halo that R_max asks for dwarfs the chunks.
    """
    from volsweep.thickness import max_inscribed_radius

    device = job_device(device)
    store, spacing = open_volume_store(volume_zarr)
    binary = _phase(store[...], store, thickness, name=f"volumes.{name}")
    r_max = max_inscribed_radius(binary, spacing=spacing, device=device)
    warning = None if chunk is None else halo_warning(name, float(r_max), spacing, chunk)
    if warning:
        log.warning("%s", warning)
    info = {"r_max": float(r_max), "n_voxels": int(binary.size), "n_phase": int(binary.sum()),
            "spacing": list(spacing), "shape": list(binary.shape), "device": device_label(device),
            **({"warning": warning} if warning else {})}
    with atomic_file(out_json) as tmp:
        tmp.write_text(json.dumps(info, indent=2) + "\n")


def create_thickness_store(volume_zarr, out_zarr, *, chunk):
    """Rule thickness_store: an empty float32 store (the volume's chunks) whose shards are
    the thickness chunks."""
    store, spacing = open_volume_store(volume_zarr)
    with atomic_dir(store_root(out_zarr)) as tmp:
        arr = _create_thickness_store(tmp, store, spacing, shards=chunk)
    log.info("thickness store: chunks %s, shards %s", arr.chunks, arr.shards)


def thickness_chunk(volume_zarr, thickness_zarr, rmax_json, out_npz, *, shard, chunk, thickness: dict,
                    device):
    """Rule thickness_chunk: exact local thickness of one chunk's core, from core + halo.

    The chunk is the store's shard ``shard`` (its (i, j, k) index): the job
    writes that shard only, then the chunk's exact value counts to
    ``out_npz``, atomically and last.
    """
    from volsweep.thickness import local_thickness_core, thickness_halo, value_counts

    device = job_device(device)
    store, spacing = open_volume_store(volume_zarr)
    r_max = json.loads(Path(rmax_json).read_text())["r_max"]
    tiles = plan_tiles(store.shape, chunk, thickness_halo(r_max, spacing))
    tile = next(t for t in tiles if tuple(s.start // c for s, c in zip(t.core, chunk)) == tuple(shard))
    region, core_in_block = tile.clipped(store.shape)
    block = store[region]
    binary = _phase(block, store, thickness, whole=False)
    lt = local_thickness_core(binary, core_in_block, r_max, spacing=spacing, device=device)
    out = open_store(store_root(thickness_zarr), mode="r+")
    out[tile.core] = np.asarray(lt, dtype=np.float32)
    values, counts = value_counts(lt)
    with atomic_file(out_npz) as tmp, open(tmp, "wb") as fh:
        np.savez(fh, values=values, counts=counts, n_voxels=np.int64(np.prod(tile.core_shape)),
                 core_start=np.array([c.start for c in tile.core]),
                 core_stop=np.array([c.stop for c in tile.core]))
    log.info("thickness chunk %s: core %s, halo block %s", tuple(shard), tile.core, region)


def aggregate_thickness(chunk_npzs, rmax_json, volume_zarr, thickness_zarr, out_nc, *, bins,
                        provenance: dict):
    """Rule aggregate_thickness: merge every chunk's counts into ``results/{vol}/thickness.nc``.

    First checks that every chunk's marker is there (naming the missing ones),
    that the chunks cover the volume, and that the shared ``thickness.zarr``
    has every core written: all its shard files present and no NaN (the fill
    value) left in any core, read one chunk core at a time.
    """
    from volsweep.io import datasets
    from volsweep.thickness import distribution_from_counts, merge_value_counts

    store, spacing = open_volume_store(volume_zarr)
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
