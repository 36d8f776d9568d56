"""Orientation maps merge across parameter blocks by maximum; ties keep the lowest flat index."""

import numpy as np
import zarr

from volsweep.io.orientation import VARIABLES as ORIENTATION_VARS
from volsweep.io.orientation import write as write_orientation
from volsweep.steps.sweep import merge_orientation


def test_merge_equals_the_argmax_over_all_kernels(tmp_path):
    rng = np.random.default_rng(4)
    shape, n_theta, n_phi, n_xi = (9, 6, 5), 5, 3, 2
    # Responses on a coarse grid of values, so ties across blocks are common.
    g = rng.integers(0, 4, size=(n_theta, n_phi, n_xi) + shape).astype(np.float32)
    flat = g.reshape(-1, *shape)
    best = np.argmax(flat, axis=0)  # first maximum = lowest flat index
    it, ip, ix = np.unravel_index(best, (n_theta, n_phi, n_xi))
    blocks, paths = [(0, 2), (2, 3), (3, 5)], []
    for b, (lo, hi) in enumerate(blocks):
        part = g[lo:hi].reshape(-1, *shape)
        pb = np.argmax(part, axis=0)
        bt, bp, bx = np.unravel_index(pb, (hi - lo, n_phi, n_xi))
        arrays = {"response_max": part.max(axis=0), "argmax_theta": bt, "argmax_phi": bp,
                  "argmax_xi": bx}
        paths.append(tmp_path / f"{b}.orientation.zarr")
        write_orientation(paths[-1], arrays, theta_offset=lo, chunks=[4, 4, 4], shards=[4, 4, 4],
                          spacing=[1, 1, 1])
    out = tmp_path / "orientation.zarr"
    merge_orientation(paths, out, theta=np.arange(n_theta) * 0.5, phi=[0, 1, 2], xi=[1, 2],
                      provenance={"config_sha256": "x"})
    group = zarr.open_group(str(out))
    np.testing.assert_array_equal(group["0"][...], flat.max(axis=0))
    for name, expected in zip(ORIENTATION_VARS[1:], (it, ip, ix)):
        np.testing.assert_array_equal(group[name][...], expected, err_msg=name)
    assert group.attrs["theta"] == [0.0, 0.5, 1.0, 1.5, 2.0]


def test_writing_in_the_background_publishes_only_a_complete_store(tmp_path):
    from volsweep.io.orientation import writing

    shape = (5, 7, 3)
    rng = np.random.default_rng(2)
    first = rng.integers(0, 4, shape).astype(np.uint16)
    later = rng.integers(0, 4, shape).astype(np.uint16)
    resp = rng.random(shape, dtype=np.float32)
    out = tmp_path / "orientation.zarr"
    with writing(out, shape, theta_offset=3, chunks=(2, 4, 2), shards=(4, 4, 2),
                 spacing=(1, 2, 3), attrs={"k": 1}) as put:
        put({"argmax_theta": first})
        assert not out.exists()  # published only at the end
        put({"argmax_theta": later, "response_max": resp})  # a later put wins
    group = zarr.open_group(str(out))
    np.testing.assert_array_equal(group["argmax_theta"][...], later + 3)
    np.testing.assert_array_equal(group["0"][...], resp)
    assert group["argmax_theta"].chunks == (2, 4, 2) and group.attrs["k"] == 1

    try:  # an error while the sweep runs: the old store stays, no temporary is left
        with writing(out, shape, chunks=(2, 4, 2), shards=(4, 4, 2), spacing=(1, 1, 1)) as put:
            put({"argmax_theta": first})
            raise RuntimeError("the sweep failed")
    except RuntimeError:
        pass
    np.testing.assert_array_equal(zarr.open_group(str(out))["argmax_theta"][...], later + 3)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["orientation.zarr"]
