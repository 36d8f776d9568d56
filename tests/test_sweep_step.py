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
def test_the_job_writes_the_library_sweep(tmp_path, device, caplog):
    if device == "cuda":
        pytest.importorskip("cupy")
        from volsweep.backend import cuda_available
        if not cuda_available():
            pytest.skip("no CUDA GPU")
    import volsweep

    with caplog.at_level("INFO", logger="volsweep"):
        config, vol, theta, phi = _job(tmp_path, device)
    started = [r.getMessage() for r in caplog.records if "GPU started" in r.getMessage()]
    assert len(started) == (device == "cuda")  # the warm-up ran, and did not fail
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


def test_the_warm_up_is_the_jobs_sweep_with_one_kernel():
    config = validate_config({"volumes": {"v": {"synthetic": {"shape": [9, 9, 9]}}},
                              "sweep": {"a": [1.0, 2.0], "xi": [1.0, 3.0], "orientation_map": True},
                              "thickness": {"enabled": False}},
                             configfile="test.yaml", check_volumes=False, estimate=False,
                             announce=False)
    sw = config["sweep"]
    kw = sweep_step._engine_kwargs(sw, sw["a"], None, [1.0, 1.0, 1.0], True)
    theta, phi = angle_values(sw["theta"]), angle_values(sw["phi"])
    warm_up = sweep_step._warm_up(theta, phi, sw["xi"], stats=tuple(sw["stats"]), device="cpu", **kw)
    ds = warm_up(np.zeros(sweep_step.WARM_UP_SHAPE, dtype=np.float32))
    assert ds.sizes["theta"] == ds.sizes["phi"] == ds.sizes["xi"] == 1 and ds.sizes["a"] == 2
    assert float(ds["xi"][0]) == 3.0 and "response_max" in ds  # xi = 1 has no direction


def test_a_failing_warm_up_is_left_to_the_sweep(monkeypatch, caplog):
    calls = []

    def warm_up(volume):
        calls.append(volume.shape)
        raise RuntimeError("no device")

    assert sweep_step._start_gpu("cpu", warm_up) == "cpu" and not calls  # no GPU, no warm-up
    monkeypatch.setattr(sweep_step, "uses_gpu", lambda device: True)
    with caplog.at_level("INFO", logger="volsweep"):
        assert sweep_step._start_gpu("auto", warm_up) == "cuda"  # the sweep reports a device's errors
    assert calls == [sweep_step.WARM_UP_SHAPE]
    assert "warm-up failed (RuntimeError: no device)" in caplog.text


def test_cuda_without_a_gpu_fails_before_any_output(tmp_path):
    from volsweep.backend import cuda_available

    if cuda_available():
        pytest.skip("needs a machine without a CUDA GPU")
    with pytest.raises(RuntimeError, match="device='cuda' was requested but no CUDA GPU"):
        _job(tmp_path, "cuda")
    assert not (tmp_path / "sweep.nc").exists() and not (tmp_path / "orientation.zarr").exists()
