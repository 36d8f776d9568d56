"""Zarr v3 stores: creation, streaming ingest and atomic publication."""

from __future__ import annotations

import logging
import math
from pathlib import Path

import numpy as np

from volsweep.io.atomic import atomic_dir
from volsweep.io.readers import VolumeError, quiet_abandoned_reads
from volsweep.tiling import plan_tiles

log = logging.getLogger("volsweep")


AXES = ("x", "y", "z")


def ome_metadata(name: str, spacing, unit=None) -> dict:
    """OME-NGFF 0.5 multiscale metadata of a single-resolution 3D image at path ``0``."""
    axes = [{"name": a, "type": "space", **({"unit": unit} if unit else {})} for a in AXES]
    return {"version": "0.5", "multiscales": [{
        "name": name, "axes": axes,
        "datasets": [{"path": "0", "coordinateTransformations": [
            {"type": "scale", "scale": [float(s) for s in spacing]}]}]}]}


#: Arrays volsweep writes store every chunk it is given: testing each for the fill value
#: costs more than it saves (our writers fill whole shards).
WRITE_CONFIG = {"write_empty_chunks": True}


def compressors(dtype):
    """The codecs of every array volsweep writes: Blosc LZ4 with byte shuffle, level 1.

    Its header declares the decoded size (the readers bound it), and it encodes 2-5x
    faster than zarr's default zstd for a few percent more bytes on float32 maps (and
    about 1.5x the bytes of zstd for uint16 indices).
    """
    from zarr.codecs import BloscCodec

    return (BloscCodec(cname="lz4", clevel=1, shuffle="shuffle", typesize=np.dtype(dtype).itemsize),)


def create_store(path, shape, *, chunks, shards, dtype="float32", attrs=None,
                 fill_value=float("nan"), spacing=(1.0, 1.0, 1.0), unit=None, name="volume"):
    """Create an OME-Zarr (NGFF 0.5, Zarr v3) image whose sharded array is at ``0``.

    Shards shrink to the fewest chunks covering the shape.  A NaN fill value
    makes a never-written chunk visible instead of a silent 0.  Returns the array.
    """
    import zarr

    shards = tuple(min(s, math.ceil(n / c) * c) for s, c, n in zip(shards, chunks, shape))
    attrs = {"spacing": [float(s) for s in spacing], **(attrs or {})}
    group = zarr.create_group(store=str(path), zarr_format=3, overwrite=True,
                              attributes={"ome": ome_metadata(name, spacing, unit), **attrs})
    return group.create_array("0", shape=tuple(shape), chunks=tuple(chunks), shards=shards,
                              dtype=dtype, fill_value=fill_value, attributes=attrs,
                              compressors=compressors(dtype), config=WRITE_CONFIG,
                              dimension_names=AXES)


def open_store(path, mode="r"):
    """The full-resolution array (``0``) of a store made by :func:`create_store`."""
    import zarr

    return zarr.open_group(str(path), mode=mode)["0"]


def block_shape_for_budget(shape, aligned_to, bytes_per_voxel: float, budget: float):
    """A block shape, aligned to ``aligned_to`` where possible, within ``budget`` bytes.

    Starts from the whole volume and halves the longest axis (in units of the
    alignment while it is larger than one unit) until the block fits.
    """
    block = list(shape)
    while math.prod(block) * bytes_per_voxel > budget:
        axis = int(np.argmax(block))
        if block[axis] == 1:
            break
        unit = aligned_to[axis]
        half = math.ceil(block[axis] / 2)
        block[axis] = max(unit, math.ceil(half / unit) * unit) if block[axis] > unit else half
        if block[axis] >= shape[axis] and half < shape[axis]:
            block[axis] = half
    if math.prod(block) * bytes_per_voxel > budget:
        raise MemoryError(f"memory budget of {budget:.0f} bytes cannot hold one voxel row")
    return tuple(block)


def ingest(source, out_path, *, chunks, shards, memory_budget: float, attrs=None, name="volume",
           spacing=(1.0, 1.0, 1.0), unit=None, where=None, on_block=None, late_attrs=None):
    """Copy ``source`` block by block into a float32 Zarr v3 store at ``out_path``.

    At most ``memory_budget`` bytes of input (plus its float32 copy) are held
    at once; a block with NaN or Inf voxels, or one the reader fails on (a
    corrupt chunk), stops the ingest with a :class:`VolumeError` naming the
    volume (``where``, default ``volumes.{name}``) and the block.  The store
    appears only when complete.  ``on_block(i)`` is called after block ``i``
    is written (the tests inject faults there).  ``late_attrs()``, called once every block
    is written and before the store appears, returns attrs computed meanwhile (a checksum
    hashed in another thread), added to the group's and the array's.
    """
    where = where or f"volumes.{name}"
    shape = tuple(int(n) for n in source.shape)
    itemsize = np.dtype(source.dtype).itemsize
    block = block_shape_for_budget(shape, shards, itemsize + 4, memory_budget)
    tiles = plan_tiles(shape, block)
    log.info("ingest %s: shape %s, %d blocks of %s", name, shape, len(tiles), block)
    with atomic_dir(Path(out_path)) as tmp:
        arr = create_store(tmp, shape, chunks=chunks, shards=shards, attrs=attrs, spacing=spacing,
                           unit=unit, name=name)
        for i, tile in enumerate(tiles):
            try:
                data = np.asarray(source[tile.core], dtype=np.float32)
            except Exception as exc:  # the reader's own error, reworded to name the file and block
                quiet_abandoned_reads()
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
                region = [[s.start, s.stop] for s in tile.core]
                raise VolumeError(f"{where}: cannot read block {region}: {type(exc).__name__}: "
                                  f"{first}") from exc
            if not np.all(np.isfinite(data)):
                local = tuple(np.argwhere(~np.isfinite(data))[0])
                index = tuple(int(i + s.start) for i, s in zip(local, tile.core))
                raise VolumeError(f"{where}: non-finite voxel {data[local]} at index {index}")
            arr[tile.core] = data
            if on_block is not None:
                on_block(i)
            if (i + 1) % max(1, len(tiles) // 10) == 0:
                log.info("ingest %s: %d/%d blocks", name, i + 1, len(tiles))
        if late_attrs is not None:
            import zarr

            extra = late_attrs()
            zarr.open_group(str(tmp), mode="r+").attrs.update(extra)
            arr.attrs.update(extra)
    return block
