"""Snakemake without running jobs: lint, dry runs of every test config, bad configs."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[1]
SNAKEMAKE = [sys.executable, "-m", "snakemake"]
CONFIGS = sorted((REPO / "tests" / "configs").glob("*.yaml"))


def snakemake(*args, cwd=REPO):
    return subprocess.run([*SNAKEMAKE, "-s", str(REPO / "Snakefile"), *args], cwd=cwd,
                          capture_output=True, text=True, timeout=300)


def make_inputs(work: Path):
    """The data files that the test configs refer to."""
    from tests_data import blobs

    (work / "data").mkdir(exist_ok=True)
    np.save(work / "data" / "blobs.npy", blobs())


def test_lint_is_clean():
    out = snakemake("--lint")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Congratulations, your workflow is in a good condition!" in out.stdout + out.stderr


def test_demo_dry_run():
    out = snakemake("-n", "--cores", "2")
    assert out.returncode == 0, out.stderr
    # The demo fits one sweep job and one thickness job: no blocks, no chunks to merge.
    jobs = dict(re.findall(r"^(\w+)\s+(\d+)$", out.stdout, flags=re.M))
    assert jobs["sweep"] == "1" and jobs["thickness"] == "1", out.stdout
    assert not {"sweep_block", "thickness_chunk", "aggregate_sweep", "orientation_map"} & set(jobs)


def test_a_long_sweep_is_split_into_theta_blocks(tmp_path):
    """A grid whose estimate exceeds sweep.job_minutes becomes several near-equal blocks."""
    import yaml

    cfg = yaml.safe_load((REPO / "config.yaml").read_text())
    cfg["sweep"]["job_minutes"] = 0.05
    cfg["device"] = "cpu"
    (tmp_path / "long.yaml").write_text(yaml.safe_dump(cfg))
    out = snakemake("-n", "--cores", "2", "--configfile", str(tmp_path / "long.yaml"),
                    "--directory", str(tmp_path))
    assert out.returncode == 0, out.stderr
    jobs = dict(re.findall(r"^(\w+)\s+(\d+)$", out.stdout, flags=re.M))
    assert int(jobs["sweep_block"]) > 1 and jobs["aggregate_sweep"] == "1"
    assert jobs["orientation_map"] == "1" and "sweep" not in jobs


@pytest.mark.parametrize("config", CONFIGS, ids=[c.stem for c in CONFIGS])
def test_dry_run_of_every_test_config(config, tmp_path):
    make_inputs(tmp_path)
    out = snakemake("-n", "--cores", "2", "--directory", str(tmp_path), "--configfile", str(config))
    assert out.returncode == 0, out.stdout + out.stderr


def test_bad_config_stops_before_any_job(tmp_path):
    bad = tmp_path / "bad.yaml"
    shutil.copy(REPO / "tests" / "configs" / "tiny.yaml", bad)
    bad.write_text(bad.read_text().replace("xi: [0.5, 2.0]", "xi: [0.5, -2.0]"))
    make_inputs(tmp_path)
    out = snakemake("--cores", "1", "--directory", str(tmp_path), "--configfile", str(bad))
    assert out.returncode != 0
    assert "bad.yaml: sweep.xi[1] = -2.0" in out.stderr
    assert not (tmp_path / "results").exists() and not (tmp_path / "logs").exists()


def test_the_parse_imports_neither_cupy_nor_numba(tmp_path):
    """Planning jobs must stay cheap: stand-in packages record any import during a dry run."""
    import os

    marker = tmp_path / "imported"
    for name in ("cupy", "numba"):
        pkg = tmp_path / "stand_ins" / name
        pkg.mkdir(parents=True)
        (pkg / "__init__.py").write_text(
            f"open({str(marker)!r}, 'a').write({name!r} + '\\n')\nraise ImportError('stand-in')\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        filter(None, [str(tmp_path / "stand_ins"), os.environ.get("PYTHONPATH")]))}
    out = subprocess.run([*SNAKEMAKE, "-s", str(REPO / "Snakefile"), "-n", "--cores", "2",
                          "--configfile", str(REPO / "config.yaml"), "--directory", str(tmp_path)],
                         cwd=REPO, capture_output=True, text=True,
                         timeout=300, env=env)
    assert out.returncode == 0, out.stderr
    assert not marker.exists(), marker.read_text()
