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
