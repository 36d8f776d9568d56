"""The sweep job (volsweep.steps.sweep) writes what the library's sweep computes."""

import numpy as np
import pytest
import zarr

from volsweep.config import angle_values, validate_config
from volsweep.io.datasets import open_netcdf
from volsweep.steps.ingest import ingest_volume
from volsweep.steps import sweep as sweep_step


def _job(tmp_path, device):
    spec = {"shape": [19, 14, 11], "seed": 3, "noise": 0.05,
            "fibres": [{"theta": 0.5, "phi": 0.2, "radius": 1.5, "count": 2}]}
    config = validate_config({"volumes": {"v": {"synthetic": spec, "spacing": [1.0, 1.2, 0.9]}},
                              "device": device,
                              "sweep": {"a": 1.5, "theta": {"num": 3}, "phi": {"num": 2},
                                        "xi": [2.0, 1.0], "orientation_map": True},
                              "thickness": {"enabled": False}},
                             configfile="test.yaml", check_volumes=False, estimate=False,
                             announce=False)
    volume = tmp_path / "volume.zarr"
    ingest_volume(config["volumes"]["v"], "v", volume, chunks=[8, 8, 8], shards=[8, 8, 8],
                  buffer_mb=1)
    theta, phi = angle_values(config["sweep"]["theta"]), angle_values(config["sweep"]["phi"])
    sweep_step.sweep(volume, tmp_path / "sweep.nc", theta=theta.tolist(), phi=phi.tolist(),
                     sweep=config["sweep"], device=device, provenance={"config_sha256": "x"},
                     orientation_zarr=tmp_path / "orientation.zarr")
    return config, zarr.open_group(str(volume))["0"], theta, phi


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
def test_the_job_writes_the_library_sweep(tmp_path, device):
    import volsweep

    config, vol, theta, phi = _job(tmp_path, device)
    sw = config["sweep"]
    expected = volsweep.sweep(vol[...], theta, phi, np.asarray(sw["xi"]), a=sw["a"],
                              spacing=vol.attrs["spacing"], mode=sw["mode"], device=device,
                              stats=tuple(sw["stats"]), progress=False, orientation_map=True)
    got = open_netcdf(tmp_path / "sweep.nc")
    for name in ("mean", "std", "max"):
        np.testing.assert_array_equal(got[name].values, expected[name].values, err_msg=name)
    group = zarr.open_group(str(tmp_path / "orientation.zarr"))
    np.testing.assert_array_equal(group["0"][...], expected["response_max"].values)
    for dim in ("theta", "phi", "xi"):
        np.testing.assert_array_equal(group[f"argmax_{dim}"][...], expected[f"argmax_{dim}"].values)


def test_cuda_without_a_gpu_fails_before_any_output(tmp_path):
    from volsweep.backend import cuda_available

    if cuda_available():
        pytest.skip("needs a machine without a CUDA GPU")
    with pytest.raises(RuntimeError, match="device='cuda' was requested but no CUDA GPU"):
        _job(tmp_path, "cuda")
    assert not (tmp_path / "sweep.nc").exists() and not (tmp_path / "orientation.zarr").exists()
