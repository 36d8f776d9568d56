"""The Zarr outputs are OME-NGFF 0.5 images that ome-zarr-py reads, axes in spacing units."""

import numpy as np
import pytest

from volsweep.io.store import create_store
from volsweep.io.orientation import write as write_orientation
from volsweep.steps.ingest import ingest_volume

ome_zarr = pytest.importorskip("ome_zarr")
from ome_zarr.io import parse_url  # noqa: E402
from ome_zarr.reader import Reader  # noqa: E402


def read_ome(path):
    location = parse_url(str(path))
    assert location is not None and location.version == "0.5"
    node = list(Reader(location)())[0]
    return node.metadata, np.asarray(node.data[0])


def test_volume_thickness_and_orientation_stores(tmp_path):
    vol = np.random.default_rng(2).random((9, 7, 5)).astype(np.float32)
    np.save(tmp_path / "v.npy", vol)
    entry = {"path": str(tmp_path / "v.npy"), "format": "npy", "spacing": [0.5, 0.5, 2.0],
             "unit": "micrometer"}
    ingest_volume(entry, "v", tmp_path / "volume.zarr", chunks=[4, 4, 4], shards=[8, 8, 8],
                  buffer_mb=1)
    meta, data = read_ome(tmp_path / "volume.zarr")
    np.testing.assert_array_equal(data, vol)
    assert [a["name"] for a in meta["axes"]] == ["x", "y", "z"]
    assert {a["unit"] for a in meta["axes"]} == {"micrometer"}
    assert meta["coordinateTransformations"][0] == [{"type": "scale", "scale": [0.5, 0.5, 2.0]}]

    lt = create_store(tmp_path / "thickness.zarr", vol.shape, chunks=[4, 4, 4], shards=[8, 8, 8],
                      spacing=[0.5, 0.5, 2.0], unit="micrometer")
    lt[...] = vol * 3
    meta, data = read_ome(tmp_path / "thickness.zarr")
    np.testing.assert_array_equal(data, vol * 3)

    arrays = {"response_max": vol, "argmax_theta": np.ones(vol.shape, np.uint16),
              "argmax_phi": np.zeros(vol.shape, np.uint16), "argmax_xi": np.ones(vol.shape, np.uint16)}
    write_orientation(tmp_path / "orientation.zarr", arrays, theta_offset=4, chunks=[4, 4, 4],
                      shards=[8, 8, 8], spacing=[0.5, 0.5, 2.0])
    meta, data = read_ome(tmp_path / "orientation.zarr")
    np.testing.assert_array_equal(data, vol)
    import zarr

    g = zarr.open_group(str(tmp_path / "orientation.zarr"))
    assert g["argmax_theta"].dtype == np.uint16 and int(g["argmax_theta"][0, 0, 0]) == 5
