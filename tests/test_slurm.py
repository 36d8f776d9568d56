"""The SLURM profile on a real single-node SLURM, started here (tests/slurm/cluster.py).

Debian's slurm-wlm and munge are installed with apt when missing; the test skips only
when that is impossible. The daemons are stopped by PID at the end of the module.
The workflow runs through ``snakemake --profile workflow/profiles/slurm`` and then
locally; the results must be equal, value for value.
"""

import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent / "slurm"))

from cluster import MIN_JOB_AGE, SlurmCluster, SlurmUnavailable, ensure_installed, sbatch_id  # noqa: E402
from profiles import (  # noqa: E402
    CPU_RULES, DEFAULT_PROFILE, GPU_RULES, SLURM_PROFILE, SPLIT_GPU_RULES, fitted_profile, load,
    write_profile)

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "tests" / "configs" / "slurm.yaml"
# squeue sees a finished job for MinJobAge seconds: poll well within that.
INIT_SECONDS = 5
assert 3 * INIT_SECONDS <= MIN_JOB_AGE


def snakemake(*args, cwd=REPO, env=None, timeout=900):
    return subprocess.run([sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"),
                           *map(str, args)], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout)


def make_inputs(work: Path):
    from tests_data import blobs

    (work / "data").mkdir(parents=True, exist_ok=True)
    np.save(work / "data" / "blobs.npy", blobs())


# ---- the profiles, statically ------------------------------------------------------------

def test_slurm_profile_requests():
    profile = load(SLURM_PROFILE)
    assert profile["executor"] == "slurm"
    assert profile["rerun-incomplete"] is True
    set_res = profile["set-resources"]
    for rule in GPU_RULES:
        res = set_res[rule]
        assert res["gpu"] == 1, rule
        assert isinstance(res["cpus_per_gpu"], int) and res["cpus_per_gpu"] >= 1, rule
        assert isinstance(res["runtime"], int) and isinstance(res.get("mem_mb", 0), int), rule
        assert res["slurm_partition"], rule
    for rule, res in set_res.items():  # CPU rules ask for no GPU
        assert rule in GPU_RULES or "gpu" not in res, rule
    assert "gpu" not in profile["default-resources"]
    # grouping is on for the thickness chunks, and the gpu limit holds per group job only
    assert "thickness_chunk=chunks" in profile["groups"]
    assert "gpu=local" in profile["set-resource-scopes"]
    text = SLURM_PROFILE.read_text()
    for knob in ("slurm_account", "slurm_partition", "slurm-status-command", "sweep_block=blocks"):
        assert knob in text, knob


def test_default_profile_limits_gpus():
    profile = load(DEFAULT_PROFILE)
    assert any(r.replace(" ", "").startswith("gpu=") for r in profile["resources"])
    assert profile["rerun-incomplete"] is True


def test_slurm_profile_dry_run(tmp_path):
    """The profile's keys are all accepted (a dry run needs no cluster)."""
    make_inputs(tmp_path)
    out = snakemake("-n", "--profile", SLURM_PROFILE.parent, "--configfile", CONFIG,
                    "--directory", tmp_path, "--slurm-no-account")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "sweep_block" in out.stdout and "thickness_chunk" in out.stdout


# ---- a real SLURM ------------------------------------------------------------------------

@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    t0 = time.monotonic()
    try:
        ensure_installed()
    except SlurmUnavailable as exc:
        pytest.skip(f"SLURM cannot be installed on this machine: {exc}")
    if os.geteuid() != 0:
        pytest.skip("SLURM is installed, but starting munged and slurmd as their users needs root")
    cluster = SlurmCluster(tmp_path_factory.mktemp("slurm"), gpus=1)
    cluster.start()  # any failure from here on fails the test, with the daemons' logs
    print(f"\nSLURM up in {time.monotonic() - t0:.1f} s: {cluster.node}")
    try:
        yield cluster
    finally:
        cluster.stop()
        for name in ("munged", "slurmctld", "slurmd"):
            assert name not in cluster.procs


def test_gpu_job_gets_its_gpu_from_slurm(slurm, tmp_path):
    """--gpus=1 is scheduled against the GRES, SLURM sets CUDA_VISIBLE_DEVICES, and
    volsweep.devices.claim_gpu leaves it as SLURM set it."""
    out_file = tmp_path / "job.out"
    script = ("import os; from volsweep.devices import claim_gpu\n"
              "before = os.environ.get('CUDA_VISIBLE_DEVICES')\n"
              "with claim_gpu('cuda') as d:\n"
              "    print('claim', before, d, os.environ.get('CUDA_VISIBLE_DEVICES'))\n")
    (tmp_path / "job.py").write_text(script)
    sub = slurm.run("sbatch", "--parsable", "-p", "gpu", "--gpus=1", "--cpus-per-gpu=1",
                    "--mem=500", "-o", str(out_file), "--wrap",
                    f"{sys.executable} {tmp_path / 'job.py'}")
    state = slurm.wait_job(sbatch_id(sub.stdout))
    text = out_file.read_text() if out_file.exists() else ""
    assert state == "COMPLETED", text + slurm.logs()
    line = next(ln for ln in text.splitlines() if ln.startswith("claim "))
    _, before, claimed, inside = line.split()
    assert before != "None" and before == claimed == inside, line


def _slurm_jobs(slurm):
    """Partition, GPUs, memory, state and comment of every job SLURM still remembers."""
    out = slurm.run("squeue", "-h", "-t", "all", "-O",
                    "JobID:12,Partition:16,tres-per-job:40,MinMemory:16,State:16,Comment:200")
    rows = []
    for line in out.stdout.splitlines():
        job_id, partition, tres, mem, state, comment = line.split(None, 5)
        rows.append({"id": job_id, "partition": partition, "tres": tres, "mem": mem,
                     "state": state, "comment": comment.strip()})
    return rows


def _zarr_arrays(path: Path) -> dict:
    """Every array of a Zarr store, an array ("") or a group (by path inside it)."""
    import zarr

    node = zarr.open(path, mode="r")
    if isinstance(node, zarr.Array):
        return {"": node}
    return {name: arr for name, arr in node.arrays()} | {
        f"{g}/{k}": v for g, sub in node.groups() for k, v in _zarr_arrays(path / g).items()}


def _rule_of(comment: str) -> str:
    """The rule of a SLURM job from its comment: ``rule_<name>_wildcards_...``, or
    ``rule_<group>_<name>`` for a group job of the profile's ``groups``."""
    for group in (g.split("=")[1] for g in load(SLURM_PROFILE).get("groups", [])):
        if comment.startswith(f"rule_{group}_"):
            comment = "rule_" + comment[len(f"rule_{group}_"):]
    names = sorted((*GPU_RULES, *CPU_RULES), key=len, reverse=True)
    return next((n for n in names if comment == f"rule_{n}" or comment.startswith(f"rule_{n}_")),
                comment)


def _compare_results(a: Path, b: Path):
    import xarray as xr

    ncs = sorted(p.relative_to(a) for p in (a / "results").rglob("*.nc"))
    assert ncs == sorted(p.relative_to(b) for p in (b / "results").rglob("*.nc"))
    assert Path("results/summary/sweep.nc") in ncs and Path("results/summary/thickness.nc") in ncs
    for rel in ncs:
        with xr.open_dataset(a / rel) as da, xr.open_dataset(b / rel) as db:
            da.load()
            db.load()
            xr.testing.assert_equal(da, db)  # values and coordinates, exactly
            assert set(da.data_vars) == set(db.data_vars) and len(da.data_vars) > 0, rel
    stores = sorted(p.relative_to(a) for p in (a / "results").rglob("*.zarr"))
    assert stores == sorted(p.relative_to(b) for p in (b / "results").rglob("*.zarr"))
    assert Path("results/blobs/thickness.zarr") in stores
    for rel in stores:
        arrays_a, arrays_b = _zarr_arrays(a / rel), _zarr_arrays(b / rel)
        assert sorted(arrays_a) == sorted(arrays_b) and arrays_a, rel
        for key, za in arrays_a.items():
            zb = arrays_b[key]
            assert za.shape == zb.shape and za.dtype == zb.dtype, (rel, key)
            np.testing.assert_array_equal(za[...], zb[...], err_msg=f"{rel}/{key}")  # NaN == NaN
    for lt in _zarr_arrays(a / "results/blobs/thickness.zarr").values():
        lt = lt[...]
        assert not np.isnan(lt).any() and (lt > 0).any()  # every chunk was written


@pytest.mark.workflow
def test_workflow_on_slurm_equals_local(slurm, tmp_path):
    node = slurm.node
    profile = load(SLURM_PROFILE)
    wants_cpus = max(r.get("cpus_per_gpu", r.get("cpus_per_task", 1))
                     for r in profile["set-resources"].values())
    wants_mem = max([r.get("mem_mb", 0) for r in profile["set-resources"].values()]
                    + [profile["default-resources"].get("mem_mb", 0)])
    if wants_cpus <= node["cpus"] and wants_mem <= node["real_memory"]:
        profile_dir = SLURM_PROFILE.parent  # the shipped profile, as it is
    else:  # a smaller machine: fit the numbers, as a site would
        profile_dir = write_profile(fitted_profile(node), tmp_path / "profile")

    on_slurm, local = tmp_path / "slurm", tmp_path / "local"
    make_inputs(on_slurm)
    make_inputs(local)
    t0 = time.monotonic()
    out = snakemake("--profile", profile_dir, "--configfile", CONFIG, "--directory", on_slurm,
                    "--slurm-status-command", "squeue",
                    "--slurm-init-seconds-before-status-checks", INIT_SECONDS,
                    "--slurm-no-account", env=slurm.env)
    t_slurm = time.monotonic() - t0
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-8000:] + slurm.logs()
    assert "submitted with SLURM jobid" in out.stderr + out.stdout

    t0 = time.monotonic()
    out = snakemake("--profile", DEFAULT_PROFILE.parent, "--cores", 2, "--configfile", CONFIG,
                    "--directory", local)
    t_local = time.monotonic() - t0
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-8000:]
    print(f"\nworkflow on SLURM {t_slurm:.0f} s, locally {t_local:.0f} s")

    # every rule ran as a SLURM job: GPU rules on the gpu partition with one GPU, CPU
    # rules with none; thickness chunks as one group job
    jobs = [j for j in _slurm_jobs(slurm) if j["comment"].startswith("rule_")]
    assert jobs and all(j["state"] == "COMPLETED" for j in jobs), jobs
    for job in jobs:
        assert job["mem"][0].isdigit() and int(job["mem"].rstrip("MGK")) > 0, job  # --mem
        if _rule_of(job["comment"]) in GPU_RULES:
            assert job["partition"] == "gpu" and job["tres"].endswith("gpu:1"), job
        else:
            assert job["partition"] == "main" and "gpu" not in job["tres"], job
    for rule in (*SPLIT_GPU_RULES, *CPU_RULES):
        assert any(_rule_of(job["comment"]) == rule for job in jobs), \
            f"no SLURM job of rule {rule}: {[j['comment'] for j in jobs]}"
    assert sum("thickness_chunk" in j["comment"] for j in jobs) == 1  # 2 chunks, 1 group job

    _compare_results(on_slurm, local)
