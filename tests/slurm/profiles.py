"""The SLURM profile, adapted to the test node: what a site does to it, done by code.

The shipped profile (workflow/profiles/slurm/profile.yaml) asks for what a GPU node
of a real cluster has (16 GB, 2 CPUs per GPU). A site edits those numbers; the test
does the same for its one small node: every ``mem_mb`` at most a quarter of the
node's memory, every ``cpus_per_gpu`` / ``cpus_per_task`` 1 (so that two jobs fit
on a two-core node at once). Nothing else changes, except what ``extra`` adds.
"""

from __future__ import annotations

from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
SLURM_PROFILE = REPO / "workflow" / "profiles" / "slurm" / "profile.yaml"
DEFAULT_PROFILE = REPO / "workflow" / "profiles" / "default" / "profile.yaml"
GPU_RULES = ("sweep", "thickness", "sweep_block", "thickness_rmax", "thickness_chunk")
#: The GPU rules of a volume split into blocks and chunks (tests/configs/slurm.yaml).
SPLIT_GPU_RULES = ("sweep_block", "thickness_rmax", "thickness_chunk")
CPU_RULES = ("ingest", "thickness_store", "aggregate_sweep", "aggregate_thickness", "summary")


def load(path=SLURM_PROFILE) -> dict:
    return yaml.safe_load(Path(path).read_text())


def _fit(resources: dict, mem_cap: int) -> dict:
    out = dict(resources)
    if isinstance(out.get("mem_mb"), int):
        out["mem_mb"] = min(out["mem_mb"], mem_cap)
    for key in ("cpus_per_gpu", "cpus_per_task"):
        if isinstance(out.get(key), int):
            out[key] = 1
    return out


def fitted_profile(node: dict, *, extra: dict | None = None, source=SLURM_PROFILE) -> dict:
    """The profile with its numbers fitted to ``node`` (``real_memory`` in MB)."""
    profile = load(source)
    mem_cap = max(256, node["real_memory"] // 4)
    profile["default-resources"] = _fit(profile.get("default-resources") or {}, mem_cap)
    profile["set-resources"] = {rule: _fit(res, mem_cap)
                                for rule, res in (profile.get("set-resources") or {}).items()}
    profile.update(extra or {})
    return profile


def write_profile(profile: dict, directory) -> Path:
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "profile.yaml").write_text(yaml.safe_dump(profile, sort_keys=False))
    return directory
