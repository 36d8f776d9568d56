"""`pip install .` alone (no test extras) gives a working `snakemake --report`."""

import subprocess
import venv
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.workflow

CONFIG = {
    "volumes": {"tiny": {"spacing": [1.0, 1.0, 2.0], "synthetic": {
        "shape": [20, 17, 12], "seed": 3, "noise": 0.02,
        "fibres": [{"theta": 0.0, "phi": 0.0, "radius": 2.0}], "pores": [{"radius": 3.0}]}}},
    "device": "cpu",
    "storage": {"chunks": [4, 4, 4], "shards": [8, 8, 8]},
    "sweep": {"a": 1.0, "theta": {"num": 2}, "phi": {"num": 2}, "xi": [0.5, 2.0],
              "orientation_map": True},
    "thickness": {"threshold": "otsu", "bins": 8},
}


def test_report_from_a_plain_install(tmp_path):
    env_dir = tmp_path / "env"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    install = subprocess.run([str(python), "-m", "pip", "install", "-q", str(REPO)],
                             capture_output=True, text=True, timeout=1200)
    assert install.returncode == 0, install.stderr[-3000:]
    extras = subprocess.run([str(python), "-c", "import pytest"], capture_output=True)
    assert extras.returncode != 0  # really without the test extras
    work = tmp_path / "work"
    work.mkdir()
    (work / "cfg.yaml").write_text(yaml.safe_dump(CONFIG))
    cmd = [str(python), "-m", "snakemake", "-s", str(REPO / "Snakefile"), "--directory", str(work),
           "--configfile", str(work / "cfg.yaml")]
    run = subprocess.run([*cmd, "--cores", "2"], capture_output=True, text=True, timeout=1200)
    assert run.returncode == 0, run.stderr[-3000:]
    report = subprocess.run([*cmd, "--report", str(work / "report.html")], capture_output=True,
                            text=True, timeout=600)
    assert report.returncode == 0, report.stderr[-3000:]
    html = (work / "report.html").read_text(errors="replace")
    for fig in ("energy_maps", "orientation_slice", "orientation_distribution",
                "thickness_histogram", "thickness_slice"):
        assert f"{fig}.png" in html, fig
    assert "System Message" not in html and "Undefined substitution" not in html
