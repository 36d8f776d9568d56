"""envs/volsweep.yaml stays in step with pyproject.toml's dependencies."""

import re
import tomllib

import yaml


def _split(requirement):
    name, _, bound = re.match(r"^([A-Za-z0-9_.-]+)\s*((>=)\s*([0-9][^,;\s]*))?", requirement).group(1, 2, 4)
    return name.lower().replace("_", "-"), bound


def test_conda_env_matches_pyproject():
    project = tomllib.load(open("pyproject.toml", "rb"))["project"]
    env = yaml.safe_load(open("envs/volsweep.yaml"))
    pins = dict(_split(d) for d in project["dependencies"])
    conda = dict(_split(d) for d in env["dependencies"] if isinstance(d, str))
    assert all(bound for bound in pins.values()), f"every dependency needs a lower bound: {pins}"
    python = conda.pop("python")
    assert python == project["requires-python"].removeprefix(">=")
    assert conda == pins
