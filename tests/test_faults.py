"""Faults and reproducibility through the Snakemake CLI, on a tiny volume.

A new user's run (sweep with orientation maps, local thickness in two chunks)
is the reference.  Faults are injected by the test: ``VOLSWEEP_FAULT``, read by
``tests/faults/sitecustomize.py`` on the jobs' ``PYTHONPATH``, kills a job midway through writing, makes
one fail once, hangs one while the test kills Snakemake itself, or simulates
running out of memory in the sweep.  Every recovered run must give the same
outputs as the reference: NetCDF, ``.npz`` and JSON files byte for byte, Zarr
arrays value for value (their metadata holds the run directory).
"""

import os
import re
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import yaml
import zarr

from volsweep.io.datasets import open_netcdf
from volsweep.io.complete import IncompleteError
from volsweep.steps.thickness import aggregate_thickness

FAULTS = Path(__file__).resolve().parent / "faults"  # sitecustomize.py, test-only
FAULT_ENV = "VOLSWEEP_FAULT"

REPO = Path(__file__).resolve().parents[1]
SHAPE = (9, 7, 5)  # two thickness chunks of 8^3
TIMEOUT_S = 600
HANG_WAIT_S = 300
CONFIG = {
    "volumes": {"v": {"path": "data/v.npy", "format": "npy", "spacing": [1.0, 1.0, 2.0]}},
    "device": "cpu",
    "storage": {"chunks": [4, 4, 4], "shards": [8, 8, 8]},
    "sweep": {"theta": {"num": 2}, "phi": {"num": 1}, "xi": [1.0, 2.0], "block_size": 1,
              "orientation_map": True},
    "thickness": {"threshold": 0.5, "chunk": [8, 8, 8], "bins": 8},
    "report": {"enabled": False},
}
pytestmark = pytest.mark.workflow


def new_project(root: Path, name: str, config=None) -> Path:
    work = root / name
    (work / "data").mkdir(parents=True)
    np.save(work / "data" / "v.npy", np.random.default_rng(11).random(SHAPE).astype(np.float32))
    (work / "cfg.yaml").write_text(yaml.safe_dump(config or CONFIG, sort_keys=False))
    return work


def snakemake_cmd(work, *args):
    return [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "--directory",
            str(work), "--configfile", str(work / "cfg.yaml"), *args]


def fault_env(fault=None):
    """The environment of a run, with the test-only fault switch when ``fault`` is given."""
    env = {k: v for k, v in os.environ.items() if k != FAULT_ENV}
    if fault:
        env[FAULT_ENV] = fault
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(FAULTS), env.get("PYTHONPATH")]))
    return env


def run(work, *args, fault=None, check=True):
    env = fault_env(fault)
    out = subprocess.run(snakemake_cmd(work, *args), capture_output=True, text=True,
                         timeout=TIMEOUT_S, env=env)
    if check:
        assert out.returncode == 0, out.stderr[-5000:]
    return out


def result_files(work):
    """Files under results/, without Snakemake's own timestamps."""
    root = work / "results"
    return sorted(str(p.relative_to(root)) for p in root.rglob("*")
                  if p.is_file() and p.name != ".snakemake_timestamp")


def assert_same_results(work, ref):
    """Same files; NetCDF, npz and JSON byte-identical; Zarr arrays identical."""
    files = result_files(work)
    assert files == result_files(ref)
    for rel in files:
        if ".zarr/" not in rel:
            assert (work / "results" / rel).read_bytes() == (ref / "results" / rel).read_bytes(), rel
    for store in {rel.split(".zarr/")[0] + ".zarr" for rel in files if ".zarr/" in rel}:
        got, want = (zarr.open_group(str(w / "results" / store), mode="r") for w in (work, ref))
        for name, arr in want.arrays():
            np.testing.assert_array_equal(got[name][...], arr[...], err_msg=f"{store}/{name}")


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    return tmp_path_factory.mktemp("faults")


@pytest.fixture(scope="module")
def reference(root):
    """Two clean runs, started together: --cores 2 (the reference) and --cores 1."""
    works = [new_project(root, "cores2"), new_project(root, "cores1")]
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda wc: run(wc[0], "--cores", wc[1]), zip(works, ["2", "1"])))
    return works


def test_two_runs_and_core_counts_are_byte_identical(reference):
    cores2, cores1 = reference
    assert "results/summary/sweep.nc" not in result_files(cores2)  # paths are relative to results/
    assert {"v/sweep.nc", "v/thickness.nc", "summary/sweep.nc", "summary/thickness.nc",
            "v/thickness/chunks/0_0_0.npz", "v/thickness/chunks/1_0_0.npz"} <= set(result_files(cores2))
    assert_same_results(cores1, cores2)


def test_job_killed_midway_then_retried_once_reruns_identically(root, reference):
    work = new_project(root, "killed_job")
    out = run(work, "--cores", "1", fault="thickness_chunk:kill", check=False)
    assert out.returncode != 0
    assert "Error in rule thickness_chunk" in out.stderr
    # The killed job wrote its core into the shared store but no completion marker.
    assert not list((work / "results" / "v" / "thickness" / "chunks").glob("*.npz"))
    assert "fault: thickness_chunk killed midway" in "".join(
        p.read_text() for p in (work / "logs" / "v" / "thickness" / "chunks").glob("*.log"))
    marker = work / "failed-once"
    out = run(work, "--cores", "1", "--rerun-incomplete", fault=f"thickness_chunk:fail-once:{marker}")
    assert marker.exists() and "fault: thickness_chunk failed once (transient)" in out.stderr
    assert "Trying to restart job" in out.stderr
    assert_same_results(work, reference[0])


def test_snakemake_killed_then_unlocked_reruns_identically(root, reference):
    work = new_project(root, "killed_snakemake")
    env = fault_env("thickness_chunk:hang")
    proc = subprocess.Popen(snakemake_cmd(work, "--cores", "1"), env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    logs = work / "logs" / "v" / "thickness" / "chunks"
    deadline = time.monotonic() + HANG_WAIT_S
    try:
        while not any("hanging midway" in p.read_text() for p in logs.glob("*.log")):
            assert proc.poll() is None and time.monotonic() < deadline, "no job reached the fault"
            time.sleep(0.2)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)  # Snakemake and its job, as a lost node would
        proc.wait()
    assert run(work, "--cores", "1", check=False).returncode != 0  # locked
    run(work, "--unlock", "--cores", "1")
    run(work, "--cores", "2", "--rerun-incomplete")
    assert_same_results(work, reference[0])


def test_sweep_out_of_memory_halves_the_limit(root, reference):
    config = {**CONFIG, "thickness": {**CONFIG["thickness"], "enabled": False},
              "sweep": {**CONFIG["sweep"], "orientation_map": False}}
    work = new_project(root, "oom", config)
    # The untiled sweep of this volume plans 188,160 bytes, its 1-voxel tile 64,800:
    # out of memory above 150,000 bytes makes the first retry (at half) tile space.
    threshold = 150_000
    run(work, "--cores", "1", fault=f"sweep:oom:{threshold}")
    log = (work / "logs" / "v" / "sweep" / "0.log").read_text()
    assert "retrying with memory_limit=94080 bytes" in log
    assert int(re.search(r"x (\d+) block\(s\)", log).group(1)) > 1
    got = open_netcdf(work / "results" / "v" / "sweep.nc")
    want = open_netcdf(reference[0] / "results" / "v" / "sweep.nc")
    # Tiles change the FFT rounding only: the engine merges float64 partial statistics.
    for stat in ("energy", "std", "max", "min", "mean"):
        scale = np.abs(want["std"].values) if stat in ("mean", "max", "min") else np.abs(want[stat].values)
        np.testing.assert_array_less(np.abs(got[stat].values - want[stat].values), 1e-6 * scale + 1e-30,
                                     err_msg=stat)


def test_aggregation_names_missing_and_unwritten_chunks(root, reference, tmp_path):
    import shutil

    work = tmp_path / "copy"
    shutil.copytree(reference[0] / "results", work / "results")
    v = work / "results" / "v"
    chunks = [v / "thickness" / "chunks" / f"{i}_0_0.npz" for i in range(2)]
    kwargs = dict(rmax_json=v / "thickness" / "rmax.json", volume_zarr=v / "volume.zarr",
                  thickness_zarr=v / "thickness.zarr", out_nc=work / "out.nc", bins=8,
                  provenance={})
    aggregate_thickness(chunks, **kwargs)  # complete: merges
    chunks[1].rename(work / "aside.npz")
    with pytest.raises(IncompleteError, match=rf"1 of 2 thickness chunk\(s\) missing, rerun them: {chunks[1]}$"):
        aggregate_thickness(chunks, **kwargs)
    (work / "aside.npz").rename(chunks[1])
    # A chunk whose marker is there but whose core was never written (NaN, the fill value).
    store = zarr.open_group(str(v / "thickness.zarr"), mode="r+")["0"]
    store[8, 3, 2] = np.nan
    with pytest.raises(IncompleteError, match=r"unwritten \(NaN\) voxels in the core of .*1_0_0\.npz"):
        aggregate_thickness(chunks, **kwargs)
    shard = v / "thickness.zarr" / "0" / "c" / "1" / "0" / "0"
    shard.unlink()
    with pytest.raises(IncompleteError, match=r"1 shard\(s\) never written: c/1/0/0"):
        aggregate_thickness(chunks, **kwargs)


def test_truncated_intermediate_is_remade_and_results_stay_identical(root, reference):
    """A cut-short sweep block (a full disk, a copy killed midway) is found at the start of
    the next run and remade; the merged results come back identical."""
    import shutil

    work = root / "truncated"
    shutil.copytree(reference[0], work)
    block = work / "results" / "v" / "sweep" / "0.nc"
    data = block.read_bytes()
    block.write_bytes(data[: len(data) // 3])
    out = run(work, "--cores", "1")
    assert "results/v/sweep/0.nc is unreadable (truncated or corrupt); it will be remade" in out.stderr
    assert block.read_bytes() == data
    assert_same_results(work, reference[0])
