"""Readers: every input format opens as a lazily sliceable 3D array in (x, y, z) order.

Nothing here loads a whole volume: NumPy files are memory-mapped, TIFF, Zarr
and HDF5 are read block by block through their own libraries.  The axis order
and the voxel size come from the file's metadata where it has them (OME-TIFF,
ImageJ TIFF, OME-Zarr, HDF5 attributes such as ``element_size_um``); the
volume's config entry overrides both (``axes``, ``spacing``, ``unit``).  A file
whose axes are (z, y, x) is read through a transposing view, block by block.

Hostile or damaged files are rejected from their headers, before anything is
mapped or decoded:

- anything that is not a regular file or folder (a FIFO, a device, a socket),
  and, when a project folder is given, a link inside a folder that leads out of it;
- a header that declares more bytes than the file holds, a pickled ``.npy``;
- a TIFF strip or tile, HDF5 chunk or Zarr chunk that would decode to more than
  the memory budget; an RGB or multi-channel TIFF;
- an HDF5 external link, virtual dataset, external storage or a chunk never
  written (HDF5 would read it silently as the fill value);
- a Zarr chunk that is missing (Zarr would read it silently as the fill value),
  a Zarr codec chain whose decoded size cannot be bounded from the chunk's own
  header, or a compressed frame that declares a size other than its chunk's.

The completeness checks list the chunks that exist: their cost is in proportion
to what is stored, not to the declared shape.
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import re
import stat
import warnings
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import numpy as np

READ_BLOCK_BYTES = 8 << 20
#: Memory budget of the header checks when the caller gives none (the schema's
#: default ``ingest_buffer_mb``).
DEFAULT_MEMORY_BUDGET = 512 << 20
#: Missing or bad Zarr chunks named in one message, at most.
MAX_NAMED = 3
_ZSTD_MAGIC = b"\x28\xb5\x2f\xfd"
#: Bytes read from the start of a compressed chunk to learn its decoded size.
_HEAD_BYTES = 18
_BLOSC_HEADER = 16
_LZ4_HEADER = 4
#: Sharding index entry: (offset, nbytes) as two little-endian uint64; both all ones = empty.
_SHARD_ENTRY = 16
_SHARD_EMPTY = 2**64 - 1
_CRC32C_BYTES = 4
#: Files a folder input may hold besides its data, never read (completion markers, metadata).
IGNORED_FILES = frozenset({".snakemake_timestamp", ".DS_Store", "Thumbs.db"})
_ZARR_META = frozenset({"zarr.json", ".zarray", ".zattrs", ".zgroup", ".zmetadata"})
#: Units as written in files, mapped to the UDUNITS names the outputs carry.
UNITS = {"µm": "micrometer", "μm": "micrometer", "um": "micrometer", "micron": "micrometer",
         "microns": "micrometer", "micrometer": "micrometer", "micrometre": "micrometer",
         "nm": "nanometer", "nanometer": "nanometer", "mm": "millimeter", "millimeter": "millimeter",
         "cm": "centimeter", "m": "meter", "meter": "meter", "å": "angstrom", "angstrom": "angstrom"}
AXES = "xyz"


def quiet_abandoned_reads() -> None:
    """After a failed read, let the process end without asyncio's report of the reader's
    abandoned tasks or never-awaited coroutines (zarr reads chunks concurrently): the
    error itself was reported."""
    logging.getLogger("asyncio").setLevel(logging.CRITICAL)
    warnings.filterwarnings("ignore", message=r"coroutine .* was never awaited",
                            category=RuntimeWarning)


class VolumeError(ValueError):
    """An input volume that cannot be used; the message names the file and the problem."""


@dataclass(frozen=True)
class FileMetadata:
    """What a file says about its axes and voxel size, in the file's own axis order.

    ``axes`` is a permutation of ``"xyz"`` (``axes[i]`` names file axis ``i``) or
    None; ``spacing`` three floats or None; ``unit`` a UDUNITS name or None;
    ``source`` says where they were read (e.g. ``"ImageJ TIFF"``).
    """

    axes: str | None = None
    spacing: tuple | None = None
    unit: str | None = None
    source: str | None = None


def normalise_unit(unit) -> str | None:
    """A file's unit string as a UDUNITS name (``"µm"`` → ``"micrometer"``); None if unknown.

    Examples
    --------
    >>> normalise_unit("\\u00b5m")
    'micrometer'
    >>> normalise_unit("pixel") is None
    True
    """
    if unit is None:
        return None
    text = str(unit).strip()
    if text.startswith("\\u00B5") or text.startswith("\\u00b5"):  # ImageJ's escaped micro sign
        text = "µ" + text[6:]
    return UNITS.get(text.lower(), UNITS.get(text))


def _axes_from_letters(letters: str) -> str | None:
    """'ZYX' → 'zyx' when the letters are exactly the three spatial axes, else None."""
    low = str(letters).lower()
    return low if sorted(low) == ["x", "y", "z"] else None


# ----------------------------------------------------------------------------- file checks
def _check_kind(path, where: str, *, want: str = "any") -> os.stat_result:
    """Refuse what is not a regular file or a folder (FIFO, device, socket) before opening it."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise VolumeError(f"{where}: file not found") from None
    except OSError as exc:
        raise VolumeError(f"{where}: cannot stat: {exc.strerror}") from None
    mode = st.st_mode
    if stat.S_ISREG(mode):
        kind = "file"
    elif stat.S_ISDIR(mode):
        kind = "folder"
    else:
        what = ("a FIFO (named pipe)" if stat.S_ISFIFO(mode) else "a device" if stat.S_ISCHR(mode)
                or stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode) else "not a regular file")
        raise VolumeError(f"{where}: is {what}; only regular files and folders are read")
    if want != "any" and kind != want:
        raise VolumeError(f"{where}: is a {kind}, expected a {want}")
    return st


def _walk_folder(root: Path, where: str, inside: Path | None) -> list[Path]:
    """Every regular file under ``root`` (links followed and checked), ignored names left out."""
    files = []
    stack = [root]
    seen = set()
    while stack:
        folder = stack.pop()
        real = folder.resolve()
        if real in seen:
            raise VolumeError(f"{where}: {folder} links back to a folder above it")
        seen.add(real)
        with os.scandir(folder) as it:
            entries = sorted(it, key=lambda e: e.name)
        for e in entries:
            if e.name in IGNORED_FILES:
                continue
            p = Path(e.path)
            if e.is_symlink():
                target = p.resolve()
                if inside is not None and inside != target and inside not in target.parents:
                    raise VolumeError(f"{where}: {p.relative_to(root)} links to {target}, outside "
                                      f"the project directory {inside}")
            _check_kind(p, f"{where}: {p.relative_to(root)}")
            (stack if p.is_dir() else files).append(p)
    return files


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


def _tiff_metadata(tif, series) -> FileMetadata:
    """Axes and voxel size of an OME-TIFF or an ImageJ TIFF; empty for other TIFFs."""
    axes = _axes_from_letters(series.axes)
    if tif.is_ome and tif.ome_metadata:
        try:
            root = ET.fromstring(tif.ome_metadata)
        except ET.ParseError:
            return FileMetadata(axes=axes, source="OME-TIFF")
        pixels = next((el for el in root.iter() if el.tag.endswith("Pixels")), None)
        if pixels is None or axes is None:
            return FileMetadata(axes=axes, source="OME-TIFF")
        sizes, units = {}, set()
        for a in "XYZ":
            value = pixels.get(f"PhysicalSize{a}")
            if value is not None:
                sizes[a.lower()] = float(value)
                units.add(pixels.get(f"PhysicalSize{a}Unit", "µm"))
        spacing = tuple(sizes[a] for a in axes) if len(sizes) == 3 else None
        unit = normalise_unit(units.pop()) if len(units) == 1 else None
        return FileMetadata(axes=axes, spacing=spacing, unit=unit, source="OME-TIFF")
    if tif.is_imagej and axes is not None:
        meta = tif.imagej_metadata or {}
        page = tif.pages[0]
        sizes = {}
        for a, tag in (("x", "XResolution"), ("y", "YResolution")):
            t = page.tags.get(tag)
            if t is not None:
                num, den = t.value
                if num > 0 and den > 0:
                    sizes[a] = den / num
        if "spacing" in meta:
            sizes["z"] = float(meta["spacing"])
        spacing = tuple(sizes[a] for a in axes) if len(sizes) == 3 else None
        return FileMetadata(axes=axes, spacing=spacing, unit=normalise_unit(meta.get("unit")),
                            source="ImageJ TIFF")
    return FileMetadata()


def _check_tiff_file(path: str, where: str, budget: float, *, slice_of_folder=False) -> FileMetadata:
    """Check a TIFF's tags: greyscale, data inside the file, strips and tiles within the budget."""
    import tifffile

    _check_kind(path, where, want="file")
    size = _file_size(path)
    handler = _TiffWarnings()
    logger = logging.getLogger("tifffile")
    logger.addHandler(handler)
    try:
        with tifffile.TiffFile(path) as tif:
            series = tif.series[0]
            colour = [a for a, n in zip(series.axes, series.shape) if a in "SCT" and n > 1]
            if colour:
                raise VolumeError(f"{where}: is a colour or multi-channel image (axes {series.axes}, "
                                  f"shape {tuple(series.shape)}); volsweep reads one greyscale "
                                  "channel: save it as a single-channel stack")
            if slice_of_folder and len(series.shape) != 2:
                raise VolumeError(f"{where}: a slice of a folder must be 2D, this one has shape "
                                  f"{tuple(series.shape)} (axes {series.axes})")
            pages = [p for p in tif.pages if p is not None]
            for page in pages:
                key = getattr(page, "keyframe", None) or page  # a frame shares its key page's layout
                itemsize = np.dtype(key.dtype).itemsize if key.dtype is not None else 1
                what = "tile" if key.is_tiled else "strip"
                _decodes_within(where, f"{what} of page {page.index}, shape", key.chunks, itemsize, budget)
                for offset, count in zip(page.dataoffsets, page.databytecounts):
                    if offset + count > size:
                        raise VolumeError(f"{where}: truncated: page {page.index} data ends at byte "
                                          f"{offset + count}, the file has {size}")
            if series.dataoffset is not None:  # contiguous: the pages past the first are implied
                end = series.dataoffset + series.size * np.dtype(series.dtype).itemsize
                if end > size:
                    raise VolumeError(f"{where}: truncated: series {series.shape} ends at byte {end}, "
                                      f"the file has {size}")
            meta = _tiff_metadata(tif, series) if not slice_of_folder else FileMetadata()
    except VolumeError:
        raise
    except Exception as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise VolumeError(f"{where}: not a readable TIFF: {first}") from exc
    finally:
        logger.removeHandler(handler)
    damaged = [m for m in handler.messages if any(w in m.lower() for w in ("invalid", "corrupt", "truncat"))]
    if damaged:
        raise VolumeError(f"{where}: damaged TIFF: {damaged[0].splitlines()[0]}")
    return meta


def natural_key(name: str):
    """Sort key that orders numbers by value: ``slice2`` before ``slice10``.

    Examples
    --------
    >>> sorted(["s10.tif", "s2.tif", "s1.tif"], key=natural_key)
    ['s1.tif', 's2.tif', 's10.tif']
    """
    return [(0, int(t), t) if t.isdigit() else (1, 0, t.lower()) for t in re.split(r"(\d+)", name) if t]


def _open_tif(path: str, where: str, budget: float, inside=None):
    import tifffile
    import zarr

    p = Path(path)
    if p.is_dir():  # a folder of 2D slices, in natural name order (slice2 before slice10)
        files = [f for f in _walk_folder(p, where, inside) if f.parent == p
                 and f.suffix.lower() in (".tif", ".tiff")]
        files = sorted((str(f) for f in files), key=lambda f: natural_key(Path(f).name))
        if not files:
            raise VolumeError(f"{path}: folder holds no .tif/.tiff files")
        for f in files:
            _check_tiff_file(f, f"{where} {Path(f).name}", budget, slice_of_folder=True)
        store = tifffile.TiffSequence(files, sort=False).aszarr()
        meta = FileMetadata()
    else:
        meta = _check_tiff_file(path, where, budget)
        store = tifffile.imread(path, aszarr=True)
    try:
        return zarr.open(store, mode="r"), meta, store.close
    except BaseException:
        store.close()
        raise


# ----------------------------------------------------------------------------- HDF5
def _h5_metadata(arr) -> FileMetadata:
    attrs = arr.attrs
    axes = None
    for key in ("axes", "axis_order", "dimension_order"):
        if key in attrs:
            value = attrs[key]
            value = value.decode() if isinstance(value, bytes) else str(value)
            axes = _axes_from_letters(value)
            break
    if axes is None:
        labels = "".join(str(d.label) for d in arr.dims) if len(arr.dims) == 3 else ""
        axes = _axes_from_letters(labels)
    spacing, unit, source = None, None, None
    if "element_size_um" in attrs:  # ImageJ/Fiji and ilastik: (z, y, x) in micrometers
        spacing, unit, source = tuple(float(v) for v in np.ravel(attrs["element_size_um"])), "micrometer", \
            "HDF5 element_size_um"
        axes = axes or "zyx"
    elif "spacing" in attrs:
        spacing, source = tuple(float(v) for v in np.ravel(attrs["spacing"])), "HDF5 spacing"
    if "unit" in attrs:
        value = attrs["unit"]
        unit = normalise_unit(value.decode() if isinstance(value, bytes) else value) or unit
    if spacing is not None and len(spacing) != 3:
        spacing = None
    return FileMetadata(axes=axes, spacing=spacing, unit=unit, source=source or ("HDF5" if axes else None))


def _open_h5(path: str, dataset: str, where: str, budget: float):
    import h5py

    _check_kind(path, where, want="file")
    fh = h5py.File(path, "r")
    try:
        return (*_h5_dataset(fh, dataset, where, budget), fh.close)
    except BaseException:
        fh.close()
        raise


def _h5_dataset(fh, dataset: str, where: str, budget: float):
    """(dataset, FileMetadata) of an open HDF5 file, after the checks that it can be read."""
    import h5py

    parts = [p for p in dataset.split("/") if p]
    node = fh
    for i, part in enumerate(parts):
        link = node.get(part, getlink=True) if isinstance(node, h5py.Group) else None
        if link is None:
            raise VolumeError(f"{where}: dataset {dataset!r} not found "
                              f"(has: {', '.join(fh.keys()) or 'nothing'})")
        if isinstance(link, h5py.ExternalLink):
            raise VolumeError(f"{where}: {'/'.join(parts[:i + 1])!r} is an external link to "
                              f"{link.filename}:{link.path}; external links are not followed")
        node = node[part]
    arr = node
    if not isinstance(arr, h5py.Dataset):
        raise VolumeError(f"{where}: {dataset!r} is an HDF5 group, not a dataset")
    if arr.is_virtual:
        raise VolumeError(f"{where}: {dataset!r} is a virtual dataset (its voxels live in other "
                          "files); copy it into a real dataset")
    if arr.external:
        raise VolumeError(f"{where}: {dataset!r} keeps its voxels in external files "
                          f"({arr.external[0][0]}); copy it into the HDF5 file")
    if arr.chunks is not None:
        _decodes_within(where, f"HDF5 chunk of {dataset!r}, shape", arr.chunks,
                        np.dtype(arr.dtype).itemsize, budget)
        expected = math.prod(math.ceil(n / c) for n, c in zip(arr.shape, arr.chunks))
        written = arr.id.get_num_chunks()
        if written < expected:
            raise VolumeError(f"{where}: {expected - written} of {expected} HDF5 chunk(s) of "
                              f"{dataset!r} never written (HDF5 would read them as the fill value)")
    elif arr.size and arr.id.get_storage_size() == 0 and arr.id.get_offset() is None:
        raise VolumeError(f"{where}: {dataset!r} was never written (HDF5 would read it as the "
                          "fill value)")
    return arr, _h5_metadata(arr)
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
    if compressor == "lz4":
        if len(head) < _LZ4_HEADER:
            return "shorter than an lz4 header"
        return int.from_bytes(head[:4], "little")
    raise AssertionError(compressor)


#: Zarr v2 filters whose encoded size is known: bytes per element of their output.
_V2_FILTER_ITEMSIZE = {
    "delta": lambda f, dt: np.dtype(f.astype or dt).itemsize,
    "shuffle": lambda f, dt: dt.itemsize,
    "astype": lambda f, dt: np.dtype(f.encode_dtype).itemsize,
    "fixedscaleoffset": lambda f, dt: np.dtype(f.astype or dt).itemsize,
    "quantize": lambda f, dt: np.dtype(f.astype or dt).itemsize,
    "bitround": lambda f, dt: dt.itemsize,
}
_SIZED = {"zstd": "zstd", "blosc": "blosc", "lz4": "lz4"}
_V3_SIZED = {"ZstdCodec": "zstd", "BloscCodec": "blosc"}


@dataclass(frozen=True)
class CodecPlan:
    """How a stored chunk's decoded size is bounded before anything is decoded.

    ``kind`` is the compressor whose header declares the size (``zstd``,
    ``blosc``, ``lz4``) or ``"none"`` (the stored bytes are the data);
    ``declared`` the size that header (or the blob) must show; ``extra`` bytes
    stored after the compressor's frame (checksums).
    """

    kind: str
    declared: int
    extra: int = 0


def codec_plan(arr, where: str) -> CodecPlan:
    """The size check of every codec chain this reader accepts; VolumeError for the others.

    A chain is accepted when every codec's output size is known from the
    chunk's shape and dtype (size-preserving filters, ``bytes``, ``crc32c``)
    and at most one compressor sits in it, one whose frame header declares the
    decoded size (zstd, blosc, lz4).  Gzip, zlib, bz2, lzma and unknown codecs
    declare no size, so a decompression bomb could not be caught before
    decoding: those chains are refused.
    """
    meta = arr.metadata
    dtype = np.dtype(arr.dtype)
    n = math.prod(int(c) for c in arr.chunks)
    refuse = ("; recompress it with zstd or blosc (e.g. zarr.create_array(..., compressors="
              "zarr.codecs.ZstdCodec())), whose headers declare the decoded size")
    if meta.zarr_format == 2:
        size = n * dtype.itemsize
        for f in meta.filters or ():
            cid = getattr(f, "codec_id", type(f).__name__).lower()
            if cid not in _V2_FILTER_ITEMSIZE:
                raise VolumeError(f"{where}: Zarr filter {cid!r} has no known decoded size, so its "
                                  f"chunks cannot be checked before decoding{refuse}")
            size = n * _V2_FILTER_ITEMSIZE[cid](f, dtype)
        comp = meta.compressor
        if comp is None:
            return CodecPlan("none", size)
        cid = getattr(comp, "codec_id", type(comp).__name__).lower()
        if cid not in _SIZED:
            raise VolumeError(f"{where}: Zarr compressor {cid!r} declares no decoded size, so a chunk "
                              f"could decode to any size{refuse}")
        return CodecPlan(_SIZED[cid], size)
    codecs = list(meta.codecs)
    if type(codecs[0]).__name__ == "ShardingCodec":
        shard = codecs[0]
        index = [type(c).__name__ for c in shard.index_codecs]
        if str(getattr(shard.index_location, "value", shard.index_location)) != "end" or \
                index != ["BytesCodec", "Crc32cCodec"]:
            raise VolumeError(f"{where}: Zarr shard index with codecs {index} at "
                              f"{shard.index_location} cannot be checked; write shards with the "
                              "default index (bytes + crc32c, at the end)")
        codecs = list(shard.codecs)
    size, kind, extra = None, None, 0
    for c in codecs:
        name = type(c).__name__
        if name == "TransposeCodec" and size is None:
            continue
        if name == "BytesCodec" and size is None:
            size = n * dtype.itemsize
        elif name == "Crc32cCodec" and size is not None:
            if kind is None:
                size += _CRC32C_BYTES
            else:
                extra += _CRC32C_BYTES
        elif name in _V3_SIZED and size is not None and kind is None:
            kind = _V3_SIZED[name]
        else:
            raise VolumeError(f"{where}: Zarr codec {name} in the chain "
                              f"{[type(x).__name__ for x in codecs]} has no known decoded size, so "
                              f"its chunks cannot be checked before decoding{refuse}")
    return CodecPlan(kind or "none", size, extra)


def _stored_keys(root: Path, where: str, inside) -> set[str]:
    """Relative keys of every stored file under a Zarr array's folder (metadata left out)."""
    keys = set()
    for f in _walk_folder(root, where, inside):
        if f.name in _ZARR_META:
            continue
        keys.add(f.relative_to(root).as_posix())
    return keys


def _chunk_coords(key: str, arr, grid) -> tuple | None:
    """The grid coordinates of a stored key, or None if it names no chunk of the array."""
    numbers = re.findall(r"\d+", key)
    if len(numbers) != len(grid):
        return None
    coords = tuple(int(v) for v in numbers)
    if any(c >= g for c, g in zip(coords, grid)) or arr.metadata.encode_chunk_key(coords) != key:
        return None
    return coords


def _check_zarr_chunks(arr, root: Path, where: str, budget: float, inside=None) -> None:
    """Every stored chunk of ``arr`` exists and decodes within the budget to its declared size.

    Zarr reads a missing chunk (or an empty entry of a shard's index) as the
    fill value, silently: here it is an error.  Compressed frames declare their
    decoded size (:func:`codec_plan`), checked against the chunk's size before
    anything is decoded (a decompression bomb declares more).  The stored keys
    are listed once: the cost follows the chunks that exist.
    """
    itemsize = np.dtype(arr.dtype).itemsize
    inner = tuple(arr.chunks)
    _decodes_within(where, "Zarr chunk", inner, itemsize, budget)
    plan = codec_plan(arr, where)
    sharded = getattr(arr, "shards", None) is not None
    outer = tuple(arr.shards) if sharded else inner
    grid = [math.ceil(n / c) for n, c in zip(arr.shape, outer)]
    expected = math.prod(grid)
    stored = {}
    for key in _stored_keys(root, where, inside):
        coords = _chunk_coords(key, arr, grid)
        if coords is not None:
            stored[coords] = key
    missing, bad = [], []
    n_missing = expected - len(stored)
    if n_missing:
        for coords in np.ndindex(*grid):  # stops at the first few: at most len(stored) + MAX_NAMED steps
            if coords not in stored:
                missing.append(arr.metadata.encode_chunk_key(coords))
                if len(missing) >= MAX_NAMED:
                    break
    for coords in sorted(stored):
        key = stored[coords]
        path = root / key
        blobs = [(key, 0, path.stat().st_size)]
        if sharded:
            inner_missing = []
            blobs = _shard_blobs(path, key, coords, arr.shape, outer, inner, inner_missing, bad)
            n_missing += len(inner_missing)
            missing += inner_missing[:max(0, MAX_NAMED - len(missing))]
        with open(path, "rb") as fh:
            for name, offset, nbytes in blobs:
                if plan.kind == "none":
                    if nbytes != plan.declared + plan.extra:
                        bad.append(f"{name} (holds {nbytes} bytes, the chunk has {plan.declared})")
                    continue
                fh.seek(offset)
                declared = _declared_size(fh.read(min(nbytes, _HEAD_BYTES)), plan.kind)
                if isinstance(declared, str):
                    bad.append(f"{name} ({declared})")
                elif declared != plan.declared:
                    bad.append(f"{name} (declares {declared} decoded bytes, the chunk has {plan.declared})")
    if n_missing:
        more = f" and {n_missing - len(missing)} more" if n_missing > len(missing) else ""
        raise VolumeError(f"{where}: {n_missing} Zarr chunk(s) missing: "
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


def _ome_zarr_metadata(path: str, dataset: str | None) -> FileMetadata:
    """Axes and scale of an OME-Zarr multiscale image (NGFF 0.4 or 0.5) for its ``dataset``."""
    import zarr

    try:
        attrs = dict(zarr.open_group(path, mode="r").attrs)
    except Exception:  # not a group: a bare array has no OME metadata
        return FileMetadata()
    multiscales = (attrs.get("ome") or {}).get("multiscales") or attrs.get("multiscales")
    if not multiscales:
        return FileMetadata()
    ms = multiscales[0]
    names = [a.get("name", "") if isinstance(a, dict) else str(a) for a in ms.get("axes", [])]
    axes = _axes_from_letters("".join(names)) if all(len(n) == 1 for n in names) else None
    units = {a.get("unit") for a in ms.get("axes", []) if isinstance(a, dict)}
    spacing = None
    for ds in ms.get("datasets", []):
        if ds.get("path") == (dataset or ""):
            for t in ds.get("coordinateTransformations", []):
                if t.get("type") == "scale" and len(t.get("scale", [])) == 3:
                    spacing = tuple(float(s) for s in t["scale"])
    unit = normalise_unit(units.pop()) if len(units) == 1 else None
    return FileMetadata(axes=axes, spacing=spacing, unit=unit, source="OME-Zarr")


def _open_zarr(path: str, dataset: str | None, where: str, budget: float, inside=None):
    import zarr

    _check_kind(path, where, want="folder")
    node = zarr.open(path, mode="r")
    if dataset:
        node = node[dataset]
    if not hasattr(node, "shape"):
        raise VolumeError(f"{where}: is a Zarr group; give dataset: the array's path inside it")
    _check_array(node, where)
    root = Path(path) / (dataset or "")
    if root.is_dir():  # a local store: its chunks can be listed and inspected
        _check_zarr_chunks(node, root, where, budget, inside)
    meta = _ome_zarr_metadata(path, dataset) if dataset else FileMetadata()
    return node, meta


# ----------------------------------------------------------------------------- the volume
class Volume:
    """A 3D input in (x, y, z) order, read lazily from a file whose axes may be in another order.

    Parameters
    ----------
    data : array-like
        The file's array (``shape``, ``dtype``, slicing), in the file's axis order.
    axes : str
        Which of x, y, z each file axis is, e.g. ``"zyx"`` for a (Z, Y, X) stack.
    spacing : 3 floats
        Voxel size along x, y, z.
    unit : str or None
        Unit of the spacing.
    source : str
        Where ``axes``/``spacing`` came from: ``config``, a metadata kind, or ``default``.
    close : callable, keyword-only, optional
        Releases the file handles ``data`` reads through; :meth:`close` and the end of a
        ``with`` block call it.

    Examples
    --------
    >>> v = Volume(np.arange(24).reshape(2, 3, 4), axes="zyx")
    >>> v.shape, v[3, 2, 1]
    ((4, 3, 2), np.int64(23))
    >>> with open_volume({"synthetic": {"shape": [4, 4, 4]}}) as v:
    ...     v.shape
    (4, 4, 4)
    """

    ndim = 3

    def __init__(self, data, axes: str = AXES, spacing=(1.0, 1.0, 1.0), unit=None, source="default",
                 *, close=None):
        self.data, self.axes = data, axes
        self._close = close
        self.spacing = [float(s) for s in spacing]
        self.unit, self.source = unit, source
        #: File axis that becomes x, y, z.
        self.file_axis = tuple(axes.index(c) for c in AXES)
        self.shape = tuple(int(data.shape[p]) for p in self.file_axis)
        self.dtype = np.dtype(data.dtype)
        self.size = math.prod(self.shape)
        self.nbytes = self.size * self.dtype.itemsize

    def __len__(self):
        return self.shape[0]

    def close(self) -> None:
        """Release the file the volume reads (idempotent); it cannot be read after.

        TIFF and HDF5 handles close here; a memory map (npy, raw) is unmapped once no
        array taken from it is left.
        """
        close, self._close = self._close, None
        self.data = _CLOSED
        if close is not None:
            close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _key(self, key) -> tuple:
        key = key if isinstance(key, tuple) else (key,)
        if any(k is Ellipsis for k in key):
            i = key.index(Ellipsis)
            key = key[:i] + (slice(None),) * (3 - len(key) + 1) + key[i + 1:]
        key = key + (slice(None),) * (3 - len(key))
        if len(key) != 3 or not all(isinstance(k, (slice, int, np.integer)) for k in key):
            raise IndexError(f"a volume takes up to 3 ints or slices, got {key!r}")
        return key

    def __getitem__(self, key):
        if self.axes == AXES:
            return self.data[key]
        key = self._key(key)
        file_key = [slice(None)] * 3
        for out_axis, p in enumerate(self.file_axis):
            file_key[p] = key[out_axis]
        block = np.asarray(self.data[tuple(file_key)])
        kept = [p for p in range(3) if not isinstance(file_key[p], (int, np.integer))]
        order = [kept.index(p) for p in self.file_axis if p in kept]
        return block.transpose(order) if block.ndim else block[()]

    def __array__(self, dtype=None, copy=None):
        out = np.asarray(self[...])
        return out if dtype is None else out.astype(dtype)

    def __repr__(self):
        return (f"Volume(shape={self.shape}, dtype={self.dtype}, axes={self.axes!r}, "
                f"spacing={self.spacing}, unit={self.unit!r})")


class _Closed:
    """The data of a closed :class:`Volume`."""

    def __getitem__(self, key):
        raise ValueError("the volume is closed")


_CLOSED = _Closed()


def _check_axes(axes, where: str) -> str:
    if not isinstance(axes, str) or sorted(axes.lower()) != ["x", "y", "z"]:
        raise VolumeError(f"{where}: axes = {axes!r}: give the file's axis order as a permutation "
                          "of xyz, e.g. zyx")
    return axes.lower()


def resolve_metadata(entry: dict, meta: FileMetadata, where: str) -> dict:
    """Axes, spacing (x, y, z) and unit of a volume: the config entry's, else the file's, else defaults.

    Returns a dict with ``axes`` (file axis order), ``spacing`` (x, y, z),
    ``unit``, ``axes_from`` and ``spacing_from`` (``config``, the metadata's
    kind, or ``default``).

    Examples
    --------
    >>> r = resolve_metadata({}, FileMetadata("zyx", (2.0, 0.5, 0.5), "micrometer", "ImageJ TIFF"), "v")
    >>> r["axes"], r["spacing"], r["unit"]
    ('zyx', [0.5, 0.5, 2.0], 'micrometer')
    """
    if entry.get("axes") is not None:
        axes, axes_from = _check_axes(entry["axes"], where), "config"
    elif meta.axes is not None:
        axes, axes_from = meta.axes, meta.source or "metadata"
    else:
        axes, axes_from = AXES, "default"
    if entry.get("spacing") is not None:
        spacing, spacing_from = [float(s) for s in entry["spacing"]], "config"
    elif meta.spacing is not None:
        if not all(math.isfinite(s) and s > 0 for s in meta.spacing):
            raise VolumeError(f"{where}: the file's {meta.source} voxel size {list(meta.spacing)} is "
                              "not positive and finite; give spacing: [x, y, z] in the config")
        file_axes = meta.axes or axes
        spacing = [float(meta.spacing[file_axes.index(c)]) for c in AXES]
        spacing_from = meta.source or "metadata"
    else:
        spacing, spacing_from = [1.0, 1.0, 1.0], "default"
    unit = entry.get("unit") or (meta.unit if spacing_from not in ("config", "default") else None)
    return {"axes": axes, "spacing": spacing, "unit": unit, "axes_from": axes_from,
            "spacing_from": spacing_from}


def _open_raw(entry: dict, name: str, memory_budget: float, inside=None):
    """(array in file order, FileMetadata, close) of a non-synthetic entry, after its header
    checks; ``close()`` releases the file handles the array reads through (TIFF, HDF5)."""
    where = volume_where(entry, name)
    fmt, path = entry["format"], entry["path"]
    if not os.path.lexists(path):
        raise VolumeError(f"{where}: file not found")
    if fmt in ("npy", "raw", "h5"):
        _check_kind(path, where, want="file")
    meta = FileMetadata()
    close = _nothing_to_close
    try:
        if fmt == "npy":
            _check_npy(path, where)
            arr = np.load(path, mmap_mode="r", allow_pickle=False)
        elif fmt == "raw":
            _check_raw(path, entry, where)
            arr = np.memmap(path, dtype=np.dtype(entry["dtype"]), mode="r",
                            offset=entry.get("offset", 0), shape=tuple(entry["shape"]))
        elif fmt == "h5":
            arr, meta, close = _open_h5(path, entry["dataset"], where, memory_budget)
        elif fmt == "zarr":
            arr, meta = _open_zarr(path, entry.get("dataset"), where, memory_budget, inside)
        elif fmt in ("tif", "tiff"):
            arr, meta, close = _open_tif(path, where, memory_budget, inside)
        else:
            raise VolumeError(f"{where}: format {fmt!r} is not one of npy, tif, zarr, h5, raw")
    except VolumeError:
        raise
    except Exception as exc:  # the library's own error, reworded to name the file
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise VolumeError(f"{where}: cannot open as {fmt}: {first}") from exc
    try:
        return _check_array(arr, where), meta, close
    except BaseException:
        close()
        raise


def _nothing_to_close():
    """Readers whose arrays hold no open file (memory maps, zarr stores)."""


def open_volume(entry: dict, name: str = "volume", *, memory_budget: float = DEFAULT_MEMORY_BUDGET,
                inside=None) -> Volume:
    """Open a volume entry (normalised by :func:`volsweep.config.volume_entries`).

    Parameters
    ----------
    entry : dict
        A volume entry: ``path`` + ``format`` (+ ``dataset``, ``shape``, ``dtype``,
        ``offset``), or ``synthetic``; optional ``axes``, ``spacing``, ``unit``.
    name : str
        The volume's name, for messages.
    memory_budget : float, keyword-only
        Bytes one decoded chunk, strip or tile of the input may take.
    inside : path, optional
        The project folder: a link inside a folder input must stay under it.

    Returns
    -------
    Volume
        A lazily sliceable 3D array in (x, y, z) order with ``shape``, ``dtype``,
        and the resolved ``spacing``, ``unit``, ``axes`` (the file's axis order);
        synthetic entries are generated in memory.

    Raises
    ------
    VolumeError
        When the file cannot be used; the one-line message names the volume,
        the file and the problem.

    Examples
    --------
    >>> v = open_volume({"synthetic": {"shape": [8, 6, 4]}, "spacing": [1, 1, 2]}, "demo")
    >>> v.shape, v.spacing, v.axes
    ((8, 6, 4), [1.0, 1.0, 2.0], 'xyz')
    """
    where = volume_where(entry, name)
    if "synthetic" in entry:
        from volsweep.synthetic import synthetic_volume

        spec = entry["synthetic"]
        spacing = entry.get("spacing") or [1.0, 1.0, 1.0]
        arr = synthetic_volume(spec["shape"], fibres=spec.get("fibres", ()),
                               pores=spec.get("pores", ()), seed=spec.get("seed", 0),
                               noise=spec.get("noise", 0.05), spacing=spacing)
        return Volume(arr, AXES, spacing, entry.get("unit"), "config" if "spacing" in entry else "default")
    arr, meta, close = _open_raw(entry, name, memory_budget, inside)
    try:
        r = resolve_metadata(entry, meta, where)
    except BaseException:
        close()
        raise
    return Volume(arr, r["axes"], r["spacing"], r["unit"], r["spacing_from"], close=close)


def source_metadata(entry: dict, name: str = "volume", *, memory_budget: float = DEFAULT_MEMORY_BUDGET,
                    inside=None) -> dict:
    """What ingest records about a volume's geometry, from its header (no voxels read).

    Returns
    -------
    dict
        ``spacing`` (x, y, z), ``unit`` (or None), ``axes`` (the file's axis
        order, e.g. ``"zyx"``), ``axes_from_file`` (``{"x": i, "y": j, "z": k}``:
        the file axis that became x, y, z), ``axes_from`` and ``spacing_from``
        (``config``, the metadata's kind, or ``default``).

    Examples
    --------
    >>> source_metadata({"synthetic": {"shape": [4, 4, 4]}})["axes_from_file"]
    {'x': 0, 'y': 1, 'z': 2}
    """
    if "synthetic" in entry:
        r = resolve_metadata(entry, FileMetadata(), volume_where(entry, name))
    else:
        _, meta, close = _open_raw(entry, name, memory_budget, inside)
        close()
        r = resolve_metadata(entry, meta, volume_where(entry, name))
    r["axes_from_file"] = {c: r["axes"].index(c) for c in AXES}
    return r


def volume_where(entry: dict, name: str) -> str:
    """How messages name a volume: its config key and its file."""
    return f"volumes.{name} ({entry.get('path', 'synthetic')})"


def source_shape(entry: dict, name: str = "volume") -> tuple[int, int, int]:
    """Shape (x, y, z) of a volume entry without reading its voxels (from config or the file header)."""
    if "synthetic" in entry:
        return tuple(entry["synthetic"]["shape"])
    if "shape" in entry and entry.get("format") == "raw":
        shape = tuple(entry["shape"])
        axes = entry.get("axes") or AXES
        return tuple(shape[axes.index(c)] for c in AXES)
    with open_volume(entry, name) as volume:
        return tuple(volume.shape)


def _hash_file(h, path: Path):
    with open(path, "rb") as fh:
        while chunk := fh.read(READ_BLOCK_BYTES):
            h.update(chunk)


def source_sha256(entry: dict, volume=None) -> str:
    """sha256 of the source: the file, every file of a folder (names included), or the voxels.

    Completion markers and desktop files in a folder (:data:`IGNORED_FILES`) are left out.
    """
    h = hashlib.sha256()
    if "synthetic" in entry:
        h.update(memoryview(np.ascontiguousarray(volume)).cast("B"))  # no copy
        return h.hexdigest()
    path = Path(entry["path"])
    if path.is_dir():
        for f in sorted(p for p in path.rglob("*") if p.is_file() and p.name not in IGNORED_FILES):
            h.update(str(f.relative_to(path)).encode() + b"\0")
            _hash_file(h, f)
    else:
        _hash_file(h, path)
    return h.hexdigest()
