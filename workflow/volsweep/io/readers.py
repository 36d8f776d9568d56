"""Readers: every input format opens as a lazily sliceable 3D array.

Nothing here loads a whole volume: NumPy files are memory-mapped, TIFF, Zarr
and HDF5 are read block by block through their own libraries.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

READ_BLOCK_BYTES = 8 << 20


class VolumeError(ValueError):
    """An input volume that cannot be used; the message names the file and the problem."""


def _check_array(arr, where: str):
    if len(arr.shape) != 3:
        raise VolumeError(f"{where}: shape {tuple(arr.shape)} is not 3D")
    if any(n == 0 for n in arr.shape):
        raise VolumeError(f"{where}: shape {tuple(arr.shape)} is empty")
    dtype = np.dtype(arr.dtype)
    if dtype.kind not in "biuf":
        raise VolumeError(f"{where}: dtype {dtype} is not a real number type (bool, int, uint, float)")
    return arr


def _open_zarr(path: str, dataset: str | None):
    import zarr

    node = zarr.open(path, mode="r")
    if dataset:
        node = node[dataset]
    if not hasattr(node, "shape"):
        raise VolumeError(f"{path}: is a Zarr group; give dataset: the array's path inside it")
    return node


def _open_tif(path: str):
    import tifffile
    import zarr

    p = Path(path)
    if p.is_dir():  # a folder of 2D slices, in name order
        files = sorted(str(f) for f in p.iterdir() if f.suffix.lower() in (".tif", ".tiff"))
        if not files:
            raise VolumeError(f"{path}: folder holds no .tif/.tiff files")
        store = tifffile.TiffSequence(files).aszarr()
    else:
        store = tifffile.imread(path, aszarr=True)
    return zarr.open(store, mode="r")


def open_volume(entry: dict, name: str = "volume"):
    """Open a volume entry (normalised by :func:`volsweep.config.volume_entries`).

    Returns a lazily sliceable array with ``shape`` and ``dtype``; synthetic
    entries are generated in memory.
    """
    where = f"volumes.{name} ({entry.get('path', 'synthetic')})"
    if "synthetic" in entry:
        from volsweep.synthetic import synthetic_volume

        spec = entry["synthetic"]
        return synthetic_volume(spec["shape"], fibres=spec.get("fibres", ()),
                                pores=spec.get("pores", ()), seed=spec.get("seed", 0),
                                noise=spec.get("noise", 0.05), spacing=entry["spacing"])
    fmt, path = entry["format"], entry["path"]
    try:
        if fmt == "npy":
            arr = np.load(path, mmap_mode="r", allow_pickle=False)
        elif fmt == "raw":
            arr = np.memmap(path, dtype=np.dtype(entry["dtype"]), mode="r",
                            offset=entry.get("offset", 0), shape=tuple(entry["shape"]))
        elif fmt == "h5":
            import h5py

            fh = h5py.File(path, "r")
            if entry["dataset"] not in fh:
                raise VolumeError(f"{where}: dataset {entry['dataset']!r} not found "
                                  f"(has: {', '.join(fh.keys()) or 'nothing'})")
            arr = fh[entry["dataset"]]
        elif fmt == "zarr":
            arr = _open_zarr(path, entry.get("dataset"))
        elif fmt == "tif":
            arr = _open_tif(path)
        else:
            raise VolumeError(f"{where}: format {fmt!r} is not one of npy, tif, zarr, h5, raw")
    except VolumeError:
        raise
    except Exception as exc:  # the library's own error, reworded to name the file
        raise VolumeError(f"{where}: cannot open as {fmt}: {exc}") from exc
    return _check_array(arr, where)


def source_shape(entry: dict, name: str = "volume") -> tuple[int, int, int]:
    """Shape of a volume entry without reading its voxels (from config or the file header)."""
    if "synthetic" in entry:
        return tuple(entry["synthetic"]["shape"])
    if "shape" in entry and entry.get("format") == "raw":
        return tuple(entry["shape"])
    return tuple(open_volume(entry, name).shape)


def _hash_file(h, path: Path):
    with open(path, "rb") as fh:
        while chunk := fh.read(READ_BLOCK_BYTES):
            h.update(chunk)


def source_sha256(entry: dict, volume=None) -> str:
    """sha256 of the source: the file, every file of a folder (names included), or the voxels."""
    h = hashlib.sha256()
    if "synthetic" in entry:
        h.update(np.ascontiguousarray(volume).tobytes())
        return h.hexdigest()
    path = Path(entry["path"])
    if path.is_dir():
        for f in sorted(p for p in path.rglob("*") if p.is_file()):
            h.update(str(f.relative_to(path)).encode() + b"\0")
            _hash_file(h, f)
    else:
        _hash_file(h, path)
    return h.hexdigest()
