"""The orientation store: the per-voxel maximum response and its (θ, φ, ξ) indices.

An OME-Zarr image whose array ``0`` is the maximum response (float32), beside
uint16 arrays ``argmax_theta``, ``argmax_phi`` and ``argmax_xi`` of the same
shape, chunks and shards.  Blocks of a split grid are merged by maximum;
ties go to the lowest flat (θ, φ, ξ) index, as within one block.

A sweep writes the store whole, in the background while it computes, and
readers take it by shard: by default each shard is one chunk, as in the
workflow's default ``storage``.  zarr spends about a millisecond of Python per
chunk it writes, so 64³ chunks in 128³ shards make writing a map take about
twice as long.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from volsweep.io.atomic import atomic_dir
from volsweep.io.complete import missing_shards, IncompleteError, require_complete
from volsweep.io.store import WRITE_CONFIG, compressors, create_store

log = logging.getLogger("volsweep")

#: The store's variables: the response at ``0``, then the index arrays.
VARIABLES = ("response_max", "argmax_theta", "argmax_phi", "argmax_xi")
INDEX_ARRAYS = VARIABLES[1:]
#: The criterion the indices maximise, when the sweep reports it (else ``0``).
CRITERION = "local_energy_max"
#: The index arrays' fill value: never a valid index.
NO_INDEX = np.iinfo(np.uint16).max
TIE_RULE = "lowest flat (theta, phi, xi) index among equal maxima"


def open_group(path, mode="r"):
    import zarr

    return zarr.open_group(str(path), mode=mode)


def per_voxel(arrays) -> list[str]:
    """The per-voxel variables of a sweep result: ``response_max``, then the rest sorted."""
    if hasattr(arrays, "data_vars"):
        names = [n for n in arrays.data_vars if arrays[n].dims == ("x", "y", "z")]
    else:
        names = [n for n in arrays if np.ndim(arrays[n]) == 3]
    return ["response_max"] + sorted(n for n in names if n != "response_max")


def create(path, shape, *, chunks, shards, spacing, arrays=INDEX_ARRAYS, dtypes=None, attrs=None):
    """An empty orientation store at ``path`` with the given per-voxel ``arrays``; its group."""
    out = create_store(path, shape, chunks=chunks, shards=shards, spacing=spacing, attrs=attrs,
                       name="maximum wavelet response")
    group = open_group(path, mode="r+")
    for name in arrays:
        _create_array(group, out, name, (dtypes or {}).get(name, np.uint16))
    return group


def _create_array(group, like, name, dtype):
    """A per-voxel array beside ``like`` (the image ``0``), its fill never a valid value."""
    dtype = np.dtype(dtype)
    fill = NO_INDEX if dtype == np.uint16 else float("nan")
    return group.create_array(name, shape=like.shape, chunks=like.chunks, shards=like.shards,
                              dtype=dtype, fill_value=fill, compressors=compressors(dtype),
                              config=WRITE_CONFIG, dimension_names=("x", "y", "z"),
                              overwrite=True)


def _put(group, arrays, theta_offset):
    for name, arr in arrays.items():
        if name == "response_max":
            group["0"][...] = np.asarray(arr, dtype=np.float32)
            continue
        dtype = np.uint16 if name.startswith("argmax_") else np.float32
        out = _create_array(group, group["0"], name, dtype)
        value = np.asarray(arr, dtype=dtype)
        out[...] = value + np.uint16(theta_offset) if name == "argmax_theta" else value


@contextmanager
def writing(path, shape, *, theta_offset=0, shards, spacing, chunks=None, attrs=None):
    """Yield ``put(arrays)``, which stores per-voxel arrays in a background thread.

    ``arrays`` maps names to arrays as in a sweep's result: ``response_max``
    becomes the image ``0``, ``argmax_*`` uint16 arrays (θ indices shifted by
    ``theta_offset`` into the whole grid's) and ``local_energy_max`` float32.
    The store appears at ``path`` once the block ends and every write is done;
    an error inside the block, or in a write, leaves nothing there.  ``chunks``
    defaults to ``shards`` (one chunk per shard).

    Examples
    --------
    >>> import tempfile
    >>> path = tempfile.mkdtemp() + "/orientation.zarr"
    >>> with writing(path, (4, 3, 2), shards=(4, 4, 2), spacing=(1, 1, 1)) as put:
    ...     put({"argmax_theta": np.zeros((4, 3, 2), np.uint16)})
    ...     put({"response_max": np.ones((4, 3, 2))})
    >>> sorted(name for name, _ in open_group(path).arrays())
    ['0', 'argmax_theta']
    """
    with atomic_dir(Path(path)) as tmp:
        group = create(tmp, shape, chunks=shards if chunks is None else chunks, shards=shards,
                       spacing=spacing, arrays=(), attrs=attrs)
        with ThreadPoolExecutor(1) as pool:
            writes = []
            yield lambda arrays: writes.append(pool.submit(_put, group, dict(arrays), theta_offset))
            for done in writes:
                done.result()


def write(path, arrays, *, theta_offset=0, shards, spacing, chunks=None, attrs=None):
    """Write a sweep's per-voxel results as an orientation store (:func:`writing`, at once)."""
    shape = np.shape(arrays["response_max"])
    with writing(path, shape, theta_offset=theta_offset, chunks=chunks, shards=shards,
                 spacing=spacing, attrs=attrs) as put:
        put({n: arrays[n] for n in per_voxel(arrays)})


def _arrays(group) -> list[str]:
    return sorted(name for name, _ in group.arrays() if name != "0")


def _check_blocks(block_paths):
    require_complete(block_paths, "orientation block")
    for path in block_paths:
        group = open_group(path)
        for name in ["0"] + _arrays(group):
            missing = missing_shards(group[name], Path(path) / name)
            if missing:
                raise IncompleteError(f"{path}: {name} has {len(missing)} shard(s) never written: "
                                      f"{', '.join(missing[:3])}")


def merge(block_paths, out_path, *, attrs=None, threads=None):
    """Merge the blocks' stores into one at ``out_path``, in block order.

    The response ``0`` is the maximum over the blocks.  The other arrays come,
    per voxel, from the block with the largest criterion (``local_energy_max``
    when the stores hold it, else the response); ties keep the earlier block.  A dask graph reads each block's shards once and writes
    each output shard once, ``threads`` shards at a time (default: dask's).
    """
    import dask
    import dask.array as da

    _check_blocks(block_paths)
    groups = [open_group(p) for p in block_paths]
    ref = groups[0]["0"]
    shards = ref.shards or ref.chunks
    names = ["0"] + _arrays(groups[0])
    key = names.index(CRITERION) if CRITERION in names else 0
    best = None
    for g in groups:  # block order: a later block wins only when strictly greater
        parts = [da.from_zarr(g[name], chunks=shards) for name in names]
        if best is None:
            best = parts
            continue
        better = parts[key] > best[key]
        best = [da.maximum(new, old) if i == 0 and key != 0 else da.where(better, new, old)
                for i, (new, old) in enumerate(zip(parts, best))]
    with atomic_dir(Path(out_path)) as tmp:
        out = create(tmp, ref.shape, chunks=ref.chunks, shards=ref.shards,
                     spacing=tuple(ref.attrs["spacing"]), arrays=names[1:],
                     dtypes={n: groups[0][n].dtype for n in names[1:]}, attrs=attrs)
        with dask.config.set(scheduler="threads", num_workers=threads):
            da.store(best, [out[name] for name in names], lock=False)
    log.info("orientation: merged %d blocks of shape %s", len(groups), tuple(ref.shape))
