"""Readers, streaming ingest and NetCDF writes."""

import hashlib
import os
import tracemalloc
from pathlib import Path

import h5py
import numpy as np
import pytest
import tifffile
import xarray as xr
import zarr

from volsweep.io.datasets import merge_sweep_blocks, open_netcdf, stack_volumes, write_netcdf
from volsweep.io.readers import VolumeError, open_volume, source_sha256, source_shape
from volsweep.io.store import block_shape_for_budget, ingest, open_store
from volsweep.steps.ingest import ingest_volume


@pytest.fixture
def vol():
    return np.random.default_rng(3).normal(size=(9, 13, 7)).astype(np.float32)


def write_all_formats(tmp_path, vol):
    np.save(tmp_path / "v.npy", vol)
    tifffile.imwrite(tmp_path / "v.tif", vol)
    (tmp_path / "slices").mkdir()
    for i, sl in enumerate(vol):
        tifffile.imwrite(tmp_path / "slices" / f"s{i:03d}.tif", sl)
    with h5py.File(tmp_path / "v.h5", "w") as fh:
        fh["grp/data"] = vol
    zarr.create_array(str(tmp_path / "v.zarr"), data=vol, chunks=(4, 4, 4))
    vol.astype(">f4").tofile(tmp_path / "v.raw")
    return {
        "npy": {"path": str(tmp_path / "v.npy"), "format": "npy"},
        "tif": {"path": str(tmp_path / "v.tif"), "format": "tif"},
        "tif-folder": {"path": str(tmp_path / "slices"), "format": "tif"},
        "h5": {"path": str(tmp_path / "v.h5"), "format": "h5", "dataset": "grp/data"},
        "zarr": {"path": str(tmp_path / "v.zarr"), "format": "zarr"},
        "raw": {"path": str(tmp_path / "v.raw"), "format": "raw", "shape": list(vol.shape),
                "dtype": ">f4"},
    }


def test_every_format_reads_the_same_voxels(tmp_path, vol):
    for name, entry in write_all_formats(tmp_path, vol).items():
        arr = open_volume(entry, name)
        assert source_shape(entry, name) == vol.shape, name
        np.testing.assert_array_equal(np.asarray(arr[2:7, 1:12, 3:5], dtype=np.float32),
                                      vol[2:7, 1:12, 3:5], err_msg=name)


def _open_files(folder):
    """Files under ``folder`` this process holds open (its /proc file descriptors)."""
    held = []
    for fd in Path("/proc/self/fd").iterdir():
        try:
            target = Path(os.readlink(fd))
        except OSError:
            continue
        if target.is_relative_to(folder):
            held.append(target.name)
    return held


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="reads /proc/self/fd")
def test_volumes_release_their_files(tmp_path, vol):
    # after close(), a with block, source_shape, a failed open and an ingest, no input
    # file stays open (TIFF, a TIFF folder and HDF5 hold handles; npy/raw a memory map)
    for name, entry in write_all_formats(tmp_path, vol).items():
        with open_volume(entry, name) as v:
            np.testing.assert_array_equal(v[1:3, 2:4, 0], vol[1:3, 2:4, 0], err_msg=name)
        assert _open_files(tmp_path) == [], name
        v = open_volume(entry, name)
        v.close()
        v.close()
        assert _open_files(tmp_path) == [], name
        with pytest.raises(ValueError, match="closed"):
            v[0, 0, 0]
        assert source_shape(entry, name) == vol.shape
        assert _open_files(tmp_path) == [], name
        ingest_volume(entry, name, tmp_path / "out" / name / "volume.zarr", chunks=[4, 4, 4],
                      shards=[8, 8, 8], buffer_mb=1)
        assert _open_files(tmp_path) == [], name
    with pytest.raises(VolumeError, match="dataset 'nope' not found") as failed:
        open_volume({"path": str(tmp_path / "v.h5"), "format": "h5", "dataset": "nope"}, "x")
    assert failed.traceback and _open_files(tmp_path) == []
    tifffile.imwrite(tmp_path / "2d.tif", vol[0])
    with pytest.raises(VolumeError, match="2d.tif") as failed:
        open_volume({"path": str(tmp_path / "2d.tif"), "format": "tif"}, "flat")
    assert failed.traceback and _open_files(tmp_path) == []


def test_ingest_roundtrip_attrs_and_checksum(tmp_path, vol):
    entry = write_all_formats(tmp_path, vol)["npy"]
    entry["spacing"] = [0.5, 1.0, 2.0]
    out = tmp_path / "out" / "volume.zarr"
    ingest_volume(entry, "v", out, chunks=[4, 4, 4], shards=[8, 8, 8], buffer_mb=1)
    arr = zarr.open_group(str(out))["0"]
    np.testing.assert_array_equal(arr[...], vol)
    assert arr.dtype == np.float32 and arr.metadata.zarr_format == 3
    assert arr.chunks == (4, 4, 4) and arr.shards == (8, 8, 8)  # 7 along z: still one shard
    assert arr.attrs["spacing"] == [0.5, 1.0, 2.0] and arr.attrs["shape"] == [9, 13, 7]
    assert arr.attrs["source_sha256"] == hashlib.sha256((tmp_path / "v.npy").read_bytes()).hexdigest()


class RecordingSource:
    """A sliceable source that records the largest read."""

    def __init__(self, data):
        self.data, self.shape, self.dtype, self.largest = data, data.shape, data.dtype, 0

    def __getitem__(self, key):
        out = self.data[key]
        self.largest = max(self.largest, out.nbytes)
        return out


def test_ingest_streams_within_the_budget(tmp_path):
    data = np.random.default_rng(0).random((41, 30, 23))  # float64, 221 kB
    budget = 24_000
    src = RecordingSource(data)
    ingest(src, tmp_path / "s.zarr", chunks=(4, 4, 4), shards=(8, 8, 8), memory_budget=budget)
    np.testing.assert_array_equal(open_store(tmp_path / "s.zarr")[...],
                                  data.astype(np.float32))
    assert data.nbytes > 5 * budget
    assert 0 < src.largest * (8 + 4) / 8 <= budget


def test_ingest_peak_memory_on_a_memory_mapped_file(tmp_path):
    data = np.random.default_rng(1).random((160, 128, 64), dtype=np.float32)  # 5.2 MB
    np.save(tmp_path / "big.npy", data)
    del data
    budget = 512 * 1024
    src = open_volume({"path": str(tmp_path / "big.npy"), "format": "npy"})
    tracemalloc.start()
    ingest(src, tmp_path / "big.zarr", chunks=(16, 16, 16), shards=(32, 32, 32), memory_budget=budget)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    assert peak < 4 * budget < src.nbytes / 2, peak


def test_block_shape_for_budget_is_aligned_and_fits():
    block = block_shape_for_budget((100, 80, 60), (16, 16, 16), 12, 12 * 40_000)
    assert np.prod(block) <= 40_000
    assert all(b % 16 == 0 or b == n for b, n in zip(block, (100, 80, 60)))


def test_bad_inputs_are_named(tmp_path):
    np.save(tmp_path / "flat.npy", np.zeros((4, 5)))
    with pytest.raises(VolumeError, match=r"flat.npy.*shape \(4, 5\) is not 3D"):
        open_volume({"path": str(tmp_path / "flat.npy"), "format": "npy"}, "flat")
    np.save(tmp_path / "c.npy", np.zeros((2, 2, 2), dtype=complex))
    with pytest.raises(VolumeError, match="c.npy.*complex128 is not a real"):
        open_volume({"path": str(tmp_path / "c.npy"), "format": "npy"}, "c")
    np.save(tmp_path / "e.npy", np.zeros((2, 0, 2)))
    with pytest.raises(VolumeError, match="is empty"):
        open_volume({"path": str(tmp_path / "e.npy"), "format": "npy"}, "e")
    with open(tmp_path / "p.npy", "wb") as fh:
        np.save(fh, np.array([{"evil": 1}], dtype=object), allow_pickle=True)
    with pytest.raises(VolumeError, match="p.npy.*cannot open as npy"):
        open_volume({"path": str(tmp_path / "p.npy"), "format": "npy"}, "p")
    with h5py.File(tmp_path / "x.h5", "w") as fh:
        fh["other"] = np.zeros((2, 2, 2))
    with pytest.raises(VolumeError, match="dataset 'data' not found"):
        open_volume({"path": str(tmp_path / "x.h5"), "format": "h5", "dataset": "data"}, "x")
    nan = np.ones((6, 5, 4), dtype=np.float32)
    nan[4, 1, 2] = np.nan
    with pytest.raises(VolumeError, match=r"non-finite voxel nan at index \(4, 1, 2\)"):
        ingest(nan, tmp_path / "nan.zarr", chunks=(2, 2, 2), shards=(2, 2, 2), memory_budget=1e6)
    assert not (tmp_path / "nan.zarr").exists()


def test_synthetic_checksum_follows_the_voxels():
    entry = {"synthetic": {"shape": [12, 10, 8], "seed": 1, "noise": 0.1,
                           "pores": [{"radius": 2, "count": 1}]}, "spacing": [1, 1, 1]}
    a, b = open_volume(entry), open_volume(entry)
    np.testing.assert_array_equal(a, b)
    assert source_sha256(entry, a) == source_sha256(entry, b)
    entry["synthetic"]["seed"] = 2
    assert source_sha256(entry, open_volume(entry)) != source_sha256(entry, a)


def _block(theta, seed):
    rng = np.random.default_rng(seed)
    coords = {"theta": theta, "phi": [0.0, 1.0], "xi": [0.5, 2.0]}
    return xr.Dataset({"energy": (("theta", "phi", "xi"), rng.random((len(theta), 2, 2))),
                       "wavelet_energy": (("xi",), [1.0, 2.0])}, coords=coords,
                      attrs={"block": 0, "spacing": (1.0, 1.0, 1.0), "flag": True})


def test_netcdf_blocks_merge_in_order_and_rewrite_identically(tmp_path):
    paths = []
    for i, theta in enumerate(([0.0, 0.5], [1.0], [1.5, 2.0])):
        paths.append(tmp_path / f"{i}.nc")
        write_netcdf(_block(theta, i), paths[-1])
    merged = merge_sweep_blocks(paths)
    assert merged["theta"].values.tolist() == [0.0, 0.5, 1.0, 1.5, 2.0]
    np.testing.assert_array_equal(merged["energy"].values[2], _block([1.0], 1)["energy"].values[0])
    assert merged["wavelet_energy"].dims == ("xi",)
    with pytest.raises(ValueError, match="out of order"):
        merge_sweep_blocks(paths[::-1])
    write_netcdf(merged, tmp_path / "a.nc")
    write_netcdf(merged, tmp_path / "b.nc")
    assert (tmp_path / "a.nc").read_bytes() == (tmp_path / "b.nc").read_bytes()
    back = open_netcdf(tmp_path / "a.nc")
    xr.testing.assert_identical(back[["energy"]], merged[["energy"]].assign_attrs(back.attrs))
    stacked = stack_volumes([tmp_path / "a.nc", tmp_path / "b.nc"], ["v1", "v2"])
    assert stacked["energy"].dims == ("volume", "theta", "phi", "xi")
    assert stacked["volume"].values.tolist() == ["v1", "v2"]


def test_synthetic_ingest_warns_once_and_hashes_the_voxels(tmp_path, caplog):
    from volsweep.synthetic import synthetic_volume

    spec = {"shape": [31, 28, 21], "seed": 2, "noise": 0.1,
            "fibres": [{"theta": 0.4, "phi": 0.2, "radius": 0.6}]}
    entry = {"synthetic": spec, "spacing": [1.0, 1.0, 1.0]}
    out = tmp_path / "volume.zarr"
    with caplog.at_level("WARNING", logger="volsweep"):
        ingest_volume(entry, "v", out, chunks=[8, 8, 8], shards=[8, 8, 8], buffer_mb=1,
                      phase={"threshold": 0.5, "label": None, "invert": False})
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "below 1%" in warnings[0]
    expected = synthetic_volume(spec["shape"], fibres=spec["fibres"], seed=2, noise=0.1)
    arr = zarr.open_group(str(out))["0"]
    np.testing.assert_array_equal(arr[...], expected)
    assert arr.attrs["source_sha256"] == hashlib.sha256(expected.tobytes()).hexdigest()


def test_quiet_abandoned_reads_silences_only_never_awaited_coroutines():
    # A failed zarr read can leave a coroutine that is collected at exit; its warning would
    # add a line to the one-line error.  Other warnings still show.
    import gc
    import logging
    import warnings

    from volsweep.io.readers import quiet_abandoned_reads

    async def chunk_read():
        return None

    gc.collect()  # objects other tests left behind warn now, not inside the check
    level = logging.getLogger("asyncio").level
    try:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            quiet_abandoned_reads()
            pending = chunk_read()
            del pending
            gc.collect()
            warnings.warn("a different problem", RuntimeWarning)
    finally:
        logging.getLogger("asyncio").setLevel(level)
    runtime = [str(w.message) for w in seen if issubclass(w.category, RuntimeWarning)]
    assert runtime == ["a different problem"]
