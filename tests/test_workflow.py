"""The workflow end to end on tests/configs/tiny.yaml: outputs checked against oracles."""

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import zarr

from sweep_oracle import sweep_stats
from tests_data import blobs
from thickness_oracle import oracle_local_thickness
from volsweep.config import angle_values
from volsweep.io.datasets import open_netcdf
from volsweep.synthetic import synthetic_volume

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "tests" / "configs" / "tiny.yaml"
pytestmark = pytest.mark.workflow


def run_snakemake(work, *args):
    cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "--directory",
           str(work), "--configfile", str(CONFIG), *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    work = tmp_path_factory.mktemp("tiny")
    (work / "data").mkdir()
    np.save(work / "data" / "blobs.npy", blobs())
    out = run_snakemake(work, "--cores", "2")
    assert out.returncode == 0, out.stderr[-5000:]
    return work


def expected_volumes():
    import yaml

    cfg = yaml.safe_load(CONFIG.read_text())
    syn = cfg["volumes"]["tiny"]["synthetic"]
    tiny = synthetic_volume(syn["shape"], fibres=syn["fibres"], pores=syn["pores"], seed=syn["seed"],
                            noise=syn["noise"], spacing=cfg["volumes"]["tiny"]["spacing"])
    return cfg, {"tiny": tiny, "blobs": blobs()}


def test_volumes_are_ingested_exactly(tiny):
    cfg, volumes = expected_volumes()
    for name, vol in volumes.items():
        store = zarr.open_group(str(tiny / "results" / name / "volume.zarr"))["0"]
        np.testing.assert_array_equal(store[...], vol)
        assert store.attrs["spacing"] == cfg["volumes"][name]["spacing"]


def test_sweep_matches_the_direct_convolution(tiny):
    cfg, volumes = expected_volumes()
    sw = cfg["sweep"]
    theta, phi = angle_values(sw["theta"]), angle_values(sw["phi"])
    for name, vol in volumes.items():
        ds = open_netcdf(tiny / "results" / name / "sweep.nc")
        np.testing.assert_allclose(ds["theta"].values, theta)
        ref = sweep_stats(vol, theta, phi, sw["xi"], a=sw["a"], spacing=cfg["volumes"][name]["spacing"],
                          mode=sw["mode"])
        scale = ref["std"]
        np.testing.assert_allclose(ds["energy"].values, ref["energy"], rtol=1e-4)
        np.testing.assert_allclose(ds["std"].values, ref["std"], rtol=1e-4)
        for stat in ("mean", "max", "min"):
            assert np.all(np.abs(ds[stat].values - ref[stat]) <= 1e-4 * scale), (name, stat)
        assert ds.attrs["config_sha256"] and ds.attrs["source_sha256"]
        assert ds["theta"].attrs["units"] == "radian"


def test_thickness_matches_the_brute_force_oracle(tiny):
    cfg, volumes = expected_volumes()
    for name, vol in volumes.items():
        spacing = cfg["volumes"][name]["spacing"]
        ref = oracle_local_thickness(vol > cfg["thickness"]["threshold"], spacing)
        got = zarr.open_group(str(tiny / "results" / name / "thickness.zarr"))["0"][...]
        np.testing.assert_array_equal(got, ref.astype(np.float32))
        ds = open_netcdf(tiny / "results" / name / "thickness.nc")
        phase = ref[ref > 0]
        edges = np.append(ds["diameter_lower"].values, ds["diameter_upper"].values[-1])
        np.testing.assert_array_equal(ds["voxel_count"].values, np.histogram(phase, edges)[0])
        np.testing.assert_allclose(float(ds["mean"]), phase.astype(np.float32).astype(np.float64).mean(), rtol=1e-12)
        assert float(ds["max"]) == pytest.approx(float(phase.max()), rel=1e-6)
        assert float(ds["volume_fraction"]) == pytest.approx(phase.size / vol.size)
        assert ds.attrs["device"].startswith("cpu") and len(ds.attrs["config_sha256"]) == 64


def test_summaries_stack_the_volumes(tiny):
    for kind, var in (("sweep", "energy"), ("thickness", "voxel_count")):
        summary = open_netcdf(tiny / "results" / "summary" / f"{kind}.nc")
        assert summary["volume"].values.tolist() == ["tiny", "blobs"]
        for name in ("tiny", "blobs"):
            per = open_netcdf(tiny / "results" / name / f"{kind}.nc")
            np.testing.assert_array_equal(summary[var].sel(volume=name).values, per[var].values)


def test_orientation_map_matches_the_oracle_and_the_library(tiny):
    """The split grid's merged map: the response maximum against the direct convolution,
    the indices against one library call over the whole grid (no near-ties)."""
    from sweep_oracle import response
    from volsweep import sweep

    cfg, volumes = expected_volumes()
    sw = cfg["sweep"]
    theta, phi = angle_values(sw["theta"]), angle_values(sw["phi"])
    for name, vol in volumes.items():
        spacing = cfg["volumes"][name]["spacing"]
        g = np.stack([response(vol, sw["a"], t, p, x, spacing, sw["mode"])
                      for t in theta for p in phi for x in sw["xi"]])
        group = zarr.open_group(str(tiny / "results" / name / "orientation.zarr"))
        np.testing.assert_allclose(group["0"][...], g.max(axis=0), rtol=0, atol=1e-4 * g.std())
        whole = sweep(vol, theta, phi, sw["xi"], a=sw["a"], spacing=spacing, mode=sw["mode"],
                      device="cpu", progress=False, orientation_map=True)
        key = "local_energy_max" if "local_energy_max" in whole else "response_max"
        crit = whole[key].values
        for var in [v for v in whole.data_vars if v.startswith("argmax_")]:
            np.testing.assert_array_equal(group[var][...], whole[var].values, err_msg=var)
        np.testing.assert_allclose(group[key][...] if key != "response_max" else group["0"][...],
                                   crit, rtol=1e-5, atol=1e-6 * np.abs(crit).max())
        assert not (tiny / "results" / name / "sweep" / "0.orientation.zarr").exists()  # temp()


def test_report_has_every_figure(tiny):
    out = run_snakemake(tiny, "--report", str(tiny / "report.html"))
    assert out.returncode == 0, out.stderr[-3000:]
    html = (tiny / "report.html").read_text(errors="replace")
    for name in ("tiny", "blobs"):
        for fig in ("energy_maps", "orientation_slice", "thickness_histogram", "thickness_slice"):
            assert (tiny / "results" / name / "plots" / f"{fig}.png").stat().st_size > 1000
            assert f"{fig}.png" in html, fig


def test_rerun_rewrites_identical_bytes(tiny):
    files = [tiny / "results" / n / f for n in ("tiny", "blobs") for f in ("sweep.nc", "thickness.nc")]
    files += [tiny / "results" / "summary" / f for f in ("sweep.nc", "thickness.nc")]
    before = {f: f.read_bytes() for f in files}
    out = run_snakemake(tiny, "--cores", "2", "--forcerun", "aggregate_sweep", "aggregate_thickness")
    assert out.returncode == 0, out.stderr[-3000:]
    for f in files:
        assert f.read_bytes() == before[f], f


def test_rerun_has_nothing_to_do(tiny):
    out = run_snakemake(tiny, "-n", "--cores", "1")
    assert out.returncode == 0
    assert "Nothing to be done" in out.stdout + out.stderr
