"""Every code block of the README and the tutorial works as written.

Python blocks run (in a scratch folder, one namespace per file, in order),
except those that start with ``# after the run`` (they read a finished run's results);
bash blocks are parsed by ``bash -n``; YAML config blocks load and pass the
schema and the config checks (volume files are not there, so not opened).
"""

import re
import subprocess
from pathlib import Path

import pytest
import yaml

from volsweep.config import validate_config

REPO = Path(__file__).resolve().parents[1]
DOCS = [REPO / "README.md", REPO / "docs" / "tutorial.md"]
FENCE = re.compile(r"^```(\w+)\n(.*?)^```", re.S | re.M)


def blocks(path, lang):
    return [m.group(2) for m in FENCE.finditer(path.read_text()) if m.group(1) == lang]


def test_docs_have_code_blocks():
    assert all(blocks(p, "bash") for p in DOCS)
    assert blocks(DOCS[0], "python")


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_python_blocks_run(path, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace = {}
    for i, code in enumerate(blocks(path, "python")):
        if code.startswith("# after the run"):
            compile(code, f"{path.name}[python block {i}]", "exec")
            continue
        exec(compile(code, f"{path.name}[python block {i}]", "exec"), namespace)


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_bash_blocks_parse(path):
    for code in blocks(path, "bash"):
        out = subprocess.run(["bash", "-n"], input=code, capture_output=True, text=True)
        assert out.returncode == 0, (code, out.stderr)


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_yaml_configs_validate(path):
    configs = [yaml.safe_load(code) for code in blocks(path, "yaml")]
    configs = [c for c in configs if isinstance(c, dict) and "volumes" in c]
    assert configs
    for cfg in configs:
        validate_config(cfg, f"{path.name} yaml block", check_volumes=False)
        assert cfg["thickness"]["threshold"] in ("otsu", "li", "yen") or cfg["thickness"]["label"] is not None
