"""Readers: every input format opens as a lazily sliceable 3D array.

Nothing here loads a whole volume: NumPy files are memory-mapped, TIFF, Zarr
and HDF5 are read block by block through their own libraries.

Hostile or damaged files are rejected from their headers, before anything is
mapped or decoded: a header that declares more bytes than the file holds, a
pickled ``.npy``, a TIFF strip or tile, HDF5 chunk or Zarr chunk that would
decode to more than the memory budget, a Zarr chunk that is missing (Zarr
would read it silently as the fill value) or whose compressed frame declares a
size other than its chunk's.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
from pathlib import Path

import numpy as np

READ_BLOCK_BYTES = 8 << 20
#: Memory budget of the header checks when the caller gives none (the schema's
#: default ``memory_budget_mb``).
DEFAULT_MEMORY_BUDGET = 512 << 20
#: Missing or bad Zarr chunks named in one message, at most.
MAX_NAMED = 3
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
#: Bytes read from the start of a compressed chunk to learn its decoded size.
_HEAD_BYTES = 18
_BLOSC_HEADER = 16
#: Sharding index entry: (offset, nbytes) as two little-endian uint64; both all ones = empty.
_SHARD_ENTRY = 16
_SHARD_EMPTY = 2**64 - 1
_CRC32C_BYTES = 4


class VolumeError(ValueError):
    """An input volume that cannot be used; the message names the file and the problem."""


def _check_array(arr, where: str):
    if not hasattr(arr, "shape") or not hasattr(arr, "dtype"):
        raise VolumeError(f"{where}: is not an array ({type(arr).__name__})")
    if len(arr.shape) != 3:
        raise VolumeError(f"{where}: shape {tuple(arr.shape)} is not 3D")
    if any(n == 0 for n in arr.shape):
        raise VolumeError(f"{where}: shape {tuple(arr.shape)} is empty")
    dtype = np.dtype(arr.dtype)
    if dtype.kind not in "biuf":
        raise VolumeError(f"{where}: dtype {dtype} is not a real number type (bool, int, uint, float)")
    return arr


def _decodes_within(where: str, what: str, shape, itemsize: int, budget: float) -> None:
    """Refuse a unit of decoding (chunk, strip, tile) larger than ``budget`` bytes."""
    nbytes = math.prod(int(n) for n in shape) * itemsize
    if nbytes > budget:
        raise VolumeError(f"{where}: {what} {tuple(int(n) for n in shape)} decodes to {nbytes} bytes, "
                          f"more than the memory budget of {int(budget)} bytes")


def _file_size(path) -> int:
    return os.stat(path).st_size


def _check_npy(path: str, where: str) -> None:
    """Check a .npy header against the file size, before mapping it."""
    fmt = np.lib.format
    with open(path, "rb") as fh:
        try:
            version = fmt.read_magic(fh)
            read = fmt.read_array_header_1_0 if version == (1, 0) else fmt.read_array_header_2_0
            shape, _, dtype = read(fh)
        except ValueError as exc:
            raise VolumeError(f"{where}: not a valid .npy header: {exc}") from None
        offset = fh.tell()
    if dtype.hasobject:
        raise VolumeError(f"{where}: cannot open as npy: dtype {dtype} holds Python objects (a pickled .npy); "
                          "pickles are never loaded")
    need = math.prod(shape) * dtype.itemsize
    have = _file_size(path) - offset
    if need > have:
        raise VolumeError(f"{where}: header declares shape {tuple(shape)} of {dtype} = {need} bytes, "
                          f"the file holds {have}")


def _check_raw(path: str, entry: dict, where: str) -> None:
    need = entry.get("offset", 0) + math.prod(entry["shape"]) * np.dtype(entry["dtype"]).itemsize
    have = _file_size(path)
    if need > have:
        raise VolumeError(f"{where}: offset + shape {tuple(entry['shape'])} of {entry['dtype']} = "
                          f"{need} bytes, the file holds {have}")


class _TiffWarnings(logging.Handler):
    """Collect tifffile's warnings about damaged files (it logs them and reads on)."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def _check_tiff_file(path: str, where: str, budget: float) -> None:
    """Check a TIFF's tags: data inside the file, strips and tiles within the budget."""
    import tifffile

    size = _file_size(path)
    handler = _TiffWarnings()
    logger = logging.getLogger("tifffile")
    logger.addHandler(handler)
    try:
        with tifffile.TiffFile(path) as tif:
            series = tif.series[0]
            pages = [p for p in tif.pages if p is not None]
            for page in pages:
                itemsize = np.dtype(page.dtype).itemsize if page.dtype is not None else 1
                what = "tile" if page.is_tiled else "strip"
                _decodes_within(where, f"{what} of page {page.index}, shape", page.chunks, itemsize, budget)
                for offset, count in zip(page.dataoffsets, page.databytecounts):
                    if offset + count > size:
                        raise VolumeError(f"{where}: truncated: page {page.index} data ends at byte "
                                          f"{offset + count}, the file has {size}")
            if series.dataoffset is not None:  # contiguous: the pages past the first are implied
                end = series.dataoffset + series.size * np.dtype(series.dtype).itemsize
                if end > size:
                    raise VolumeError(f"{where}: truncated: series {series.shape} ends at byte {end}, "
                                      f"the file has {size}")
    except VolumeError:
        raise
    except Exception as exc:
        raise VolumeError(f"{where}: not a readable TIFF: {exc}") from exc
    finally:
        logger.removeHandler(handler)
    damaged = [m for m in handler.messages if any(w in m.lower() for w in ("invalid", "corrupt", "truncat"))]
    if damaged:
        raise VolumeError(f"{where}: damaged TIFF: {damaged[0].splitlines()[0]}")


def _open_tif(path: str, where: str, budget: float):
    import tifffile
    import zarr

    p = Path(path)
    if p.is_dir():  # a folder of 2D slices, in name order
        files = sorted(str(f) for f in p.iterdir() if f.suffix.lower() in (".tif", ".tiff"))
        if not files:
            raise VolumeError(f"{path}: folder holds no .tif/.tiff files")
        for f in files:
            _check_tiff_file(f, f"{where} {Path(f).name}", budget)
        store = tifffile.TiffSequence(files).aszarr()
    else:
        _check_tiff_file(path, where, budget)
        store = tifffile.imread(path, aszarr=True)
    return zarr.open(store, mode="r")


def _open_h5(path: str, dataset: str, where: str, budget: float):
    import h5py

    fh = h5py.File(path, "r")
    if dataset not in fh:
        raise VolumeError(f"{where}: dataset {dataset!r} not found "
                          f"(has: {', '.join(fh.keys()) or 'nothing'})")
    arr = fh[dataset]
    if not isinstance(arr, h5py.Dataset):
        raise VolumeError(f"{where}: {dataset!r} is an HDF5 group, not a dataset")
    if arr.chunks is not None:
        _decodes_within(where, f"HDF5 chunk of {dataset!r}, shape", arr.chunks,
                        np.dtype(arr.dtype).itemsize, budget)
    return arr


def _zstd_content_size(head: bytes):
    """Decoded size declared by a zstd frame header; None when it declares none."""
    descriptor = head[4]
    single_segment = (descriptor >> 5) & 1
    pos = 5 + (0 if single_segment else 1) + (0, 1, 2, 4)[descriptor & 3]
    width = (1 if single_segment else 0, 2, 4, 8)[descriptor >> 6]
    if width == 0:
        return None
    return int.from_bytes(head[pos:pos + width], "little") + (256 if width == 2 else 0)


def _declared_size(head: bytes, compressor: str):
    """Decoded size a compressed chunk's header declares, or a string saying what is wrong."""
    if compressor == "zstd":
        if head[:4] != _ZSTD_MAGIC:
            return "not a zstd frame"
        n = _zstd_content_size(head)
        return "zstd frame without a declared size" if n is None else n
    if compressor == "blosc":
        if len(head) < _BLOSC_HEADER:
            return "shorter than a blosc header"
        return int.from_bytes(head[4:8], "little")
    return None  # no header to inspect: the decoder's own size checks apply


def _compressor(arr) -> str | None:
    meta = arr.metadata
    if arr.metadata.zarr_format == 2:
        codecs = [meta.compressor] if meta.compressor is not None else []
        if meta.filters:
            return None  # filters may change sizes: no header check
    else:
        codecs = list(meta.codecs)
        if type(codecs[0]).__name__ == "ShardingCodec":
            codecs = list(codecs[0].codecs)
        if any(type(c).__name__ not in ("BytesCodec", "ZstdCodec", "BloscCodec") for c in codecs):
            return None
    names = {type(c).__name__.lower() + " " + str(getattr(c, "codec_id", "")) for c in codecs}
    for kind in ("zstd", "blosc"):
        if any(kind in n for n in names):
            return kind
    return None


def _check_zarr_chunks(arr, root: Path, where: str, budget: float) -> None:
    """Every stored chunk of ``arr`` exists and decodes within the budget to its declared size.

    Zarr reads a missing chunk (or an empty entry of a shard's index) as the
    fill value, silently: here it is an error.  Compressed frames that declare a
    decoded size are checked against the chunk's size before anything is decoded
    (a decompression bomb declares more).
    """
    itemsize = np.dtype(arr.dtype).itemsize
    inner = tuple(arr.chunks)
    _decodes_within(where, "Zarr chunk", inner, itemsize, budget)
    chunk_bytes = math.prod(inner) * itemsize
    sharded = getattr(arr, "shards", None) is not None
    outer = tuple(arr.shards) if sharded else inner
    grid = [math.ceil(n / c) for n, c in zip(arr.shape, outer)]
    compressor = _compressor(arr)
    missing, bad = [], []
    for coords in np.ndindex(*grid):
        key = arr.metadata.encode_chunk_key(coords)
        path = root / key
        if not path.is_file():
            missing.append(key)
            continue
        blobs = [(key, 0, path.stat().st_size)]
        if sharded:
            blobs = _shard_blobs(path, key, coords, arr.shape, outer, inner, missing, bad)
        if compressor is None:
            continue
        with open(path, "rb") as fh:
            for name, offset, nbytes in blobs:
                fh.seek(offset)
                declared = _declared_size(fh.read(min(nbytes, _HEAD_BYTES)), compressor)
                if isinstance(declared, str):
                    bad.append(f"{name} ({declared})")
                elif declared != chunk_bytes:
                    bad.append(f"{name} (declares {declared} decoded bytes, the chunk has {chunk_bytes})")
    if missing:
        more = f" and {len(missing) - MAX_NAMED} more" if len(missing) > MAX_NAMED else ""
        raise VolumeError(f"{where}: {len(missing)} Zarr chunk(s) missing: "
                          f"{', '.join(missing[:MAX_NAMED])}{more} (Zarr would read them as the "
                          "fill value; write inputs with write_empty_chunks=True)")
    if bad:
        more = f" and {len(bad) - MAX_NAMED} more" if len(bad) > MAX_NAMED else ""
        raise VolumeError(f"{where}: corrupt Zarr chunk(s): {', '.join(bad[:MAX_NAMED])}{more}")


def _shard_blobs(path: Path, key, coords, shape, outer, inner, missing, bad):
    """(name, offset, nbytes) of each inner chunk of a shard, from its index at the end."""
    per = [o // i for o, i in zip(outer, inner)]
    n = math.prod(per)
    size = path.stat().st_size
    index_bytes = n * _SHARD_ENTRY + _CRC32C_BYTES
    if size < index_bytes:
        bad.append(f"{key} (shorter than its index)")
        return []
    with open(path, "rb") as fh:
        fh.seek(size - index_bytes)
        index = np.frombuffer(fh.read(n * _SHARD_ENTRY), dtype="<u8").reshape(*per, 2)
    blobs = []
    for local in np.ndindex(*per):
        start = [(c * o + j * i) for c, o, j, i in zip(coords, outer, local, inner)]
        if any(s >= n_ for s, n_ in zip(start, shape)):
            continue  # past the array's edge: never stored
        offset, nbytes = (int(v) for v in index[local])
        name = f"{key}[{','.join(map(str, local))}]"
        if offset == _SHARD_EMPTY and nbytes == _SHARD_EMPTY:
            missing.append(name)
        elif offset + nbytes > size - index_bytes:
            bad.append(f"{name} (index points past the shard's data)")
        else:
            blobs.append((name, offset, nbytes))
    return blobs


def _open_zarr(path: str, dataset: str | None, where: str, budget: float):
    import zarr

    node = zarr.open(path, mode="r")
    if dataset:
        node = node[dataset]
    if not hasattr(node, "shape"):
        raise VolumeError(f"{where}: is a Zarr group; give dataset: the array's path inside it")
    _check_array(node, where)
    root = Path(path) / (dataset or "")
    if root.is_dir():  # a local store: its chunks can be listed and inspected
        _check_zarr_chunks(node, root, where, budget)
    return node


def open_volume(entry: dict, name: str = "volume", *, memory_budget: float = DEFAULT_MEMORY_BUDGET):
    """Open a volume entry (normalised by :func:`volsweep.config.volume_entries`).

    Parameters
    ----------
    entry : dict
        A normalised volume entry.
    name : str
        The volume's name, for messages.
    memory_budget : float, keyword-only
        Bytes one decoded chunk, strip or tile of the input may take.

    Returns
    -------
    array-like
        A lazily sliceable 3D array with ``shape`` and ``dtype``; synthetic
        entries are generated in memory.

    Raises
    ------
    VolumeError
        When the file cannot be used; the one-line message names the volume,
        the file and the problem.
    """
    where = volume_where(entry, name)
    if "synthetic" in entry:
        from volsweep.synthetic import synthetic_volume

        spec = entry["synthetic"]
        return synthetic_volume(spec["shape"], fibres=spec.get("fibres", ()),
                                pores=spec.get("pores", ()), seed=spec.get("seed", 0),
                                noise=spec.get("noise", 0.05), spacing=entry["spacing"])
    fmt, path = entry["format"], entry["path"]
    if not Path(path).exists():
        raise VolumeError(f"{where}: file not found")
    try:
        if fmt == "npy":
            _check_npy(path, where)
            arr = np.load(path, mmap_mode="r", allow_pickle=False)
        elif fmt == "raw":
            _check_raw(path, entry, where)
            arr = np.memmap(path, dtype=np.dtype(entry["dtype"]), mode="r",
                            offset=entry.get("offset", 0), shape=tuple(entry["shape"]))
        elif fmt == "h5":
            arr = _open_h5(path, entry["dataset"], where, memory_budget)
        elif fmt == "zarr":
            arr = _open_zarr(path, entry.get("dataset"), where, memory_budget)
        elif fmt == "tif":
            arr = _open_tif(path, where, memory_budget)
        else:
            raise VolumeError(f"{where}: format {fmt!r} is not one of npy, tif, zarr, h5, raw")
    except VolumeError:
        raise
    except Exception as exc:  # the library's own error, reworded to name the file
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise VolumeError(f"{where}: cannot open as {fmt}: {first}") from exc
    return _check_array(arr, where)


def volume_where(entry: dict, name: str) -> str:
    """How messages name a volume: its config key and its file."""
    return f"volumes.{name} ({entry.get('path', 'synthetic')})"


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
