"""Fan-out at scale: time ``snakemake -n`` over many 800x800x200 volumes.

The volumes are metadata only: ``format: raw`` entries with ``shape`` and ``dtype``
pointing to sparse placeholder files (the workflow reads a raw entry's shape from the
config and checks the file's size, never its bytes), so no disk space or data is needed. The grid
and the job plan are the defaults (theta 8 x phi 8 x xi 4, one sweep job and one thickness
job per volume unless the estimate or the memory budget splits them).

    python benchmarks/bench_dag.py                    # 50 volumes, 3 runs, median
    python benchmarks/bench_dag.py --volumes 10 --runs 1 --cprofile 25
    python benchmarks/bench_dag.py --profile workflow/profiles/slurm   # with its groups

Expect about 3.5 s for 50 volumes (303 jobs) on a 2-core machine.
"""

from __future__ import annotations

import argparse
import pstats
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

REPO = Path(__file__).resolve().parents[1]
SHAPE = [800, 800, 200]


def make_project(work: Path, n_volumes: int) -> Path:
    """Placeholder files and a config naming ``n_volumes`` raw volumes; the config path."""
    (work / "data").mkdir(parents=True, exist_ok=True)
    volumes = {}
    for i in range(n_volumes):
        path = work / "data" / f"vol{i:03d}.raw"
        with open(path, "wb") as fh:  # sparse: the right size, no blocks on disk
            fh.truncate(int(np.prod(SHAPE)) * np.dtype("<u2").itemsize)
        volumes[f"vol{i:03d}"] = {"path": f"data/{path.name}", "format": "raw",
                                  "shape": SHAPE, "dtype": "<u2"}
    config = work / "bench_dag.yaml"
    config.write_text(yaml.safe_dump({"volumes": volumes, "thickness": {"threshold": 0.5}},
                                     sort_keys=False))
    return config


def dry_run(work: Path, config: Path, *, profile=None, cprofile_out=None):
    cmd = [sys.executable]
    if cprofile_out:
        cmd += ["-m", "cProfile", "-o", str(cprofile_out)]
    cmd += ["-m", "snakemake", "-s", str(REPO / "Snakefile"), "-n", "--cores", "2",
            "--configfile", str(config), "--directory", str(work), "--quiet", "rules"]
    if profile:
        cmd += ["--profile", str(profile)]
        if "slurm" in str(profile):
            cmd += ["--slurm-no-account"]
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
    elapsed = time.perf_counter() - t0
    if out.returncode != 0:
        raise RuntimeError(f"snakemake -n failed:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    m = re.search(r"^total\s+(\d+)", out.stdout + out.stderr, re.M)
    return elapsed, int(m.group(1)) if m else None


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--volumes", type=int, default=50)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--profile", help="a Snakemake profile directory to add (e.g. the SLURM one)")
    ap.add_argument("--cprofile", type=int, default=0, metavar="N",
                    help="after timing, run once under cProfile and print the top N functions")
    ap.add_argument("--target", type=float, default=30.0)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench_dag_") as tmp:
        work = Path(tmp)
        config = make_project(work, args.volumes)
        times, jobs = [], None
        for i in range(args.runs):
            elapsed, jobs = dry_run(work, config, profile=args.profile)
            times.append(elapsed)
            print(f"run {i + 1}: {elapsed:.2f} s ({jobs} jobs)", flush=True)
        median = statistics.median(times)
        print(f"snakemake -n, {args.volumes} volumes of {'x'.join(map(str, SHAPE))}, "
              f"{jobs} jobs: median {median:.2f} s over {args.runs} runs "
              f"(min {min(times):.2f}, max {max(times):.2f}); target <= {args.target:.0f} s: "
              f"{'OK' if median <= args.target else 'SLOWER'}")
        if args.cprofile:
            prof = work / "dag.prof"
            dry_run(work, config, profile=args.profile, cprofile_out=prof)
            stats = pstats.Stats(str(prof))
            stats.sort_stats("cumulative").print_stats(args.cprofile)
            stats.sort_stats("tottime").print_stats(args.cprofile)
    return 0 if median <= args.target else 1


if __name__ == "__main__":
    sys.exit(main())
