"""One GPU per job (volsweep.devices), tested without a GPU: fake GPU counts, real
locks, concurrent processes."""

import json
import multiprocessing as mp
import os
import subprocess
import sys
import time

import pytest

from volsweep import devices
from volsweep.devices import acquire_device, claim_gpu, gpu_count, visible_devices


@pytest.fixture
def env(tmp_path):
    """A clean environment dict: no SLURM, no CUDA_VISIBLE_DEVICES, private lock dir."""
    return {"PATH": os.environ.get("PATH", ""), devices.ENV_LOCK_DIR: str(tmp_path / "locks")}


def test_gpu_count_from_override_and_errors(env):
    env[devices.ENV_COUNT] = "3"
    assert gpu_count(env) == 3
    assert visible_devices(env) == ["0", "1", "2"]
    env[devices.ENV_COUNT] = "two"
    with pytest.raises(ValueError, match="VOLSWEEP_GPU_COUNT = 'two'"):
        gpu_count(env)
    env[devices.ENV_COUNT] = "-1"
    with pytest.raises(ValueError, match="must be >= 0"):
        gpu_count(env)


def test_gpu_count_without_nvidia_smi_is_zero(env, tmp_path):
    env["PATH"] = str(tmp_path)  # no nvidia-smi on it
    assert gpu_count(env) == 0


def test_gpu_count_parses_nvidia_smi(env, tmp_path):
    fake = tmp_path / "bin" / "nvidia-smi"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 'GPU 0: NVIDIA H200 (UUID: GPU-a)'\n"
                    "echo 'GPU 1: NVIDIA H200 (UUID: GPU-b)'\n"
                    "echo '  MIG 1g.18gb Device 0: (UUID: MIG-c)'\n")
    fake.chmod(0o755)
    env["PATH"] = str(fake.parent)
    assert gpu_count(env) == 2


def test_user_visible_devices_are_the_pool(env):
    env[devices.ENV_COUNT] = "8"
    env["CUDA_VISIBLE_DEVICES"] = "5,2"
    assert visible_devices(env) == ["5", "2"]
    env["CUDA_VISIBLE_DEVICES"] = "3,-1,4"  # CUDA ignores everything after an invalid id
    assert visible_devices(env) == ["3"]
    env["CUDA_VISIBLE_DEVICES"] = ""
    assert visible_devices(env) == []


def test_cpu_claims_nothing(env):
    env[devices.ENV_COUNT] = "2"
    with claim_gpu("cpu", env=env) as dev:
        assert dev is None
        assert "CUDA_VISIBLE_DEVICES" not in env
    assert not os.path.exists(env[devices.ENV_LOCK_DIR])


def test_unknown_device_is_an_error(env):
    with pytest.raises(ValueError, match="device = 'gpu'"):
        with claim_gpu("gpu", env=env):
            pass


def test_no_gpu_changes_nothing(env):
    env[devices.ENV_COUNT] = "0"
    with claim_gpu("auto", env=env) as dev:
        assert dev is None
        assert "CUDA_VISIBLE_DEVICES" not in env


def test_slurm_allocation_is_left_alone(env):
    env[devices.ENV_COUNT] = "4"
    env["SLURM_JOB_ID"] = "42"
    env["CUDA_VISIBLE_DEVICES"] = "3"
    with claim_gpu("cuda", env=env) as dev:
        assert dev == "3"
        assert env["CUDA_VISIBLE_DEVICES"] == "3"
    assert env["CUDA_VISIBLE_DEVICES"] == "3"
    assert not os.path.exists(env[devices.ENV_LOCK_DIR])  # no local locks under SLURM


def test_nested_claims_in_one_process_take_distinct_devices(env):
    env[devices.ENV_COUNT] = "2"
    with claim_gpu("auto", env=env) as a:
        assert env["CUDA_VISIBLE_DEVICES"] == a
        with claim_gpu("auto", env=dict(env, CUDA_VISIBLE_DEVICES="0,1")) as b:
            assert {a, b} == {"0", "1"}
    assert "CUDA_VISIBLE_DEVICES" not in env  # restored


def test_release_on_exit_and_on_error(env):
    env[devices.ENV_COUNT] = "1"
    with claim_gpu("auto", env=env) as a:
        assert a == "0"
    with pytest.raises(RuntimeError):
        with claim_gpu("auto", env=env) as b:
            assert b == "0"  # free again
            raise RuntimeError("job failed")
    with claim_gpu("auto", env=env) as c:
        assert c == "0"  # released by the failed job


def test_all_taken_times_out(env):
    env[devices.ENV_COUNT] = "1"
    with claim_gpu("auto", env=env):
        t0 = time.monotonic()
        with pytest.raises(TimeoutError, match="all GPUs 0 stayed taken"):
            acquire_device(["0"], env[devices.ENV_LOCK_DIR], timeout=0.3, poll=0.05)
        assert time.monotonic() - t0 >= 0.3


# ---- concurrent processes ----------------------------------------------------------------

def _job(env, hold, queue):
    """One 'workflow job': claim, report what it got and when, hold the device, release."""
    os.environ.clear()
    os.environ.update(env)
    with claim_gpu("auto") as dev:
        start = time.monotonic()
        seen = os.environ.get("CUDA_VISIBLE_DEVICES")
        time.sleep(hold)
        queue.put({"pid": os.getpid(), "dev": dev, "seen": seen, "start": start,
                   "end": time.monotonic()})


def _run_jobs(env, n_jobs, hold):
    ctx = mp.get_context("spawn")  # a fresh process, as Snakemake starts each job
    queue = ctx.Queue()
    procs = [ctx.Process(target=_job, args=(env, hold, queue)) for _ in range(n_jobs)]
    for p in procs:
        p.start()
    results = [queue.get(timeout=60) for _ in procs]
    for p in procs:
        p.join(timeout=60)
        assert p.exitcode == 0
    return results


def _overlap(a, b):
    return a["start"] < b["end"] and b["start"] < a["end"]


def test_concurrent_jobs_get_distinct_devices(env):
    env[devices.ENV_COUNT] = "3"
    results = _run_jobs(env, 3, hold=1.0)
    assert sorted(r["dev"] for r in results) == ["0", "1", "2"]
    assert all(r["seen"] == r["dev"] for r in results)  # CUDA_VISIBLE_DEVICES is the claim


def test_more_jobs_than_gpus_never_share_a_device(env):
    env[devices.ENV_COUNT] = "2"
    results = _run_jobs(env, 5, hold=0.4)
    assert {r["dev"] for r in results} <= {"0", "1"}
    for i, a in enumerate(results):
        for b in results[i + 1:]:
            if a["dev"] == b["dev"]:
                assert not _overlap(a, b), (a, b)  # one job at a time per device


def test_lock_of_a_killed_job_is_released(env, tmp_path):
    """A job killed with SIGKILL cannot run its finally: the kernel drops its lock."""
    env[devices.ENV_COUNT] = "1"
    script = ("import time; from volsweep.devices import claim_gpu\n"
              "with claim_gpu('auto') as d:\n    print(d, flush=True); time.sleep(60)\n")
    child = subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE,
                             text=True)
    try:
        assert child.stdout.readline().strip() == "0"
        with pytest.raises(TimeoutError):
            acquire_device(["0"], env[devices.ENV_LOCK_DIR], timeout=0.2, poll=0.05)
    finally:
        child.kill()
        child.wait()
    dev, fd = acquire_device(["0"], env[devices.ENV_LOCK_DIR], timeout=5)
    os.close(fd)
    assert dev == "0"


def test_claim_in_a_subprocess_sets_cuda_visible_devices_before_import(env):
    """What a workflow script sees: the env var is set inside the with block only."""
    env[devices.ENV_COUNT] = "2"
    script = ("import json, os; from volsweep.devices import claim_gpu\n"
              "with claim_gpu('cuda') as d:\n"
              "    inside = os.environ.get('CUDA_VISIBLE_DEVICES')\n"
              "print(json.dumps([d, inside, os.environ.get('CUDA_VISIBLE_DEVICES')]))\n")
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == ["0", "0", None]


def test_thickness_job_resolves_auto_to_the_gpu(tmp_path, monkeypatch):
    # a job's volume starts on the host, where the library's "auto" would mean the CPU
    import numpy as np

    import volsweep.thickness as lt_mod
    from volsweep import backend
    from volsweep.io.store import create_store
    from volsweep.steps import thickness as step

    vol = np.zeros((9, 8, 7), np.float32)
    vol[2:7, 2:6, 1:6] = 1
    store = create_store(tmp_path / "v.zarr", vol.shape, chunks=(8, 8, 7), shards=(8, 8, 7),
                         attrs={"source_sha256": "0" * 64, "name": "v",
                                "phase": {"threshold": 0.5, "label": None, "invert": False}})
    store[...] = vol
    seen = []
    cpu = lt_mod.local_thickness

    def fake(binary, *, spacing, device):
        seen.append(device)
        return cpu(binary, spacing=spacing, device="cpu")

    monkeypatch.setattr(backend, "cuda_available", lambda: True)
    monkeypatch.setattr(backend, "to_device", lambda x, device: x)  # the phase stays on the host
    monkeypatch.setattr(lt_mod, "local_thickness", fake)
    monkeypatch.setattr(step, "device_label", lambda device: f"label:{device}")
    step.thickness(tmp_path / "v.zarr", tmp_path / "t.zarr", tmp_path / "t.nc",
                   thickness={"threshold": 0.5, "label": None, "invert": False, "bins": 8},
                   device="auto", provenance={}, name="v")
    assert seen == ["cuda"]
    import xarray as xr

    with xr.open_dataset(tmp_path / "t.nc") as ds:
        assert ds.attrs["device"] == "label:cuda"


def test_a_shared_job_takes_a_device_beside_a_locked_one(env, tmp_path, monkeypatch):
    from types import SimpleNamespace

    from volsweep.steps.runner import run_script

    env[devices.ENV_COUNT] = "1"
    seen = []

    def step(device):
        seen.append(os.environ.get("CUDA_VISIBLE_DEVICES"))

    with claim_gpu("auto", env=env) as held:  # a sweep holds the only GPU
        assert held == "0"
        t0 = time.monotonic()
        with claim_gpu("auto", env=env, shared=True) as dev:
            assert dev == "0" and env["CUDA_VISIBLE_DEVICES"] == "0"
        assert env["CUDA_VISIBLE_DEVICES"] == "0"  # the holder's, restored
        assert time.monotonic() - t0 < 0.3  # no wait for the lock
        # through a workflow script: a rule with gpu=0 shares, one with gpu=1 waits for a lock
        for key in (devices.ENV_COUNT, devices.ENV_LOCK_DIR):
            monkeypatch.setenv(key, env[key])
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
        job = SimpleNamespace(log=[str(tmp_path / "t.log")], rule="thickness",
                              wildcards={}, resources=SimpleNamespace(gpu=0))
        run_script(step, job, device="auto")
        assert seen == ["0"] and "shared (no lock)" in (tmp_path / "t.log").read_text()
        with pytest.raises(TimeoutError):
            acquire_device(["0"], env[devices.ENV_LOCK_DIR], timeout=0.1, poll=0.05)
