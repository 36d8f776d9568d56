"""The workflow on one GPU and on every GPU of the machine: wall time, devices, identical results.

Runs the workflow benchmark's project (``bench_workflow.py``: synthetic volumes, the sweep
grid and thickness) with ``--profile workflow/profiles/default --resources gpu=N`` for
N = 1 and N = every GPU, and records:

- the wall time of each run, and its ratio against the one-GPU run over N;
- the device each job ran on (the ``GPU: device ...`` line of its log) and whether two
  jobs overlapped on one GPU while another GPU was idle;
- each GPU's utilisation, sampled per device with ``nvidia-smi``;
- whether the NetCDF outputs are byte-identical and the Zarr arrays value-identical to
  the one-GPU run.

    python benchmarks/bench_multigpu.py --volumes 8 --shape 800 800 200 --theta 16 --phi 16 \\
        --xi 1 2 4 --a 3 --cores 32
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

sys.path.insert(0, str(Path(__file__).parent))
from bench_workflow import REPO, STAMP, GpuSampler, make_config  # noqa: E402

DEVICE_LINE = re.compile(r"GPU: device (\d+)")


def gpu_count() -> int:
    out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True)
    return sum(line.startswith("GPU ") for line in out.stdout.splitlines())


def job_devices(work: Path) -> list[dict]:
    """One entry per GPU job log: rule, device, start and stop (epoch seconds)."""
    jobs = []
    for log in sorted((work / "logs").rglob("*.log")):
        text = log.read_text(errors="replace")
        dev = DEVICE_LINE.search(text)
        stamps = [STAMP.match(line) for line in text.splitlines()]
        stamps = [time.mktime(time.strptime(m.group(1)[:19], "%Y-%m-%d %H:%M:%S")) for m in stamps if m]
        if dev and stamps:
            jobs.append({"log": str(log.relative_to(work)), "device": int(dev.group(1)),
                         "start": stamps[0], "stop": stamps[-1]})
    return jobs


def shared_while_idle(jobs, n_gpus) -> list[tuple[str, str]]:
    """Pairs of jobs that overlapped on one GPU while some GPU ran nothing."""
    pairs = []
    for i, a in enumerate(jobs):
        for b in jobs[i + 1:]:
            if a["device"] != b["device"] or a["stop"] <= b["start"] or b["stop"] <= a["start"]:
                continue
            lo, hi = max(a["start"], b["start"]), min(a["stop"], b["stop"])
            busy = {j["device"] for j in jobs if j["start"] < hi and j["stop"] > lo}
            if len(busy) < n_gpus:
                pairs.append((a["log"], b["log"]))
    return pairs


def same_outputs(a: Path, b: Path) -> dict:
    import zarr

    ncs = sorted(p.relative_to(a) for p in (a / "results").rglob("*.nc"))
    nc_same = all((a / p).read_bytes() == (b / p).read_bytes() for p in ncs)
    zarr_same = True
    for store in sorted((a / "results").rglob("*.zarr")):
        rel = store.relative_to(a)
        ga, gb = zarr.open_group(str(store)), zarr.open_group(str(b / rel))
        for name, arr in ga.arrays():
            zarr_same &= np.array_equal(arr[...], gb[name][...], equal_nan=True)
    return {"netcdf_files": len(ncs), "netcdf_byte_identical": nc_same, "zarr_value_identical": zarr_same}


def run(work: Path, config: dict, n: int, args) -> dict:
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    (work / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    cmd = [*shlex.split(args.snakemake), "-s", str(REPO / "Snakefile"), "--directory", str(work),
           "--configfile", str(work / "config.yaml"), "--profile", str(REPO / "workflow/profiles/default"),
           "--cores", str(args.cores), "--resources", f"gpu={n}", "-q"]
    with GpuSampler(period_ms=200) as sampler:
        start = time.time()
        proc = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.time() - start
    if proc.returncode != 0:
        print(proc.stderr[-3000:], file=sys.stderr)
        raise SystemExit(f"snakemake with gpu={n} failed")
    jobs = job_devices(work)
    return {"gpus": n, "wall_s": wall, "jobs": jobs, "busy": sampler.busy_per_gpu(start, start + wall),
            "shared_while_idle": shared_while_idle(jobs, n)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--volumes", type=int, default=8)
    ap.add_argument("--shape", type=int, nargs=3, default=[800, 800, 200])
    ap.add_argument("--theta", type=int, default=16)
    ap.add_argument("--phi", type=int, default=16)
    ap.add_argument("--xi", type=float, nargs="+", default=[1.0, 2.0, 4.0])
    ap.add_argument("--a", type=float, default=3.0)
    ap.add_argument("--fibres", type=int, default=100)
    ap.add_argument("--pores", type=int, default=30)
    ap.add_argument("--cores", type=int, default=32)
    ap.add_argument("--snakemake", default=f"{sys.executable} -m snakemake")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    args.device, args.report = "cuda", False
    n_all = gpu_count()
    if n_all == 0:
        raise SystemExit("no GPU: nvidia-smi lists none")
    config = make_config(args)
    root = Path(tempfile.mkdtemp(prefix="volsweep-multigpu-"))
    one = run(root / "gpu1", config, 1, args)
    runs = [one] + ([run(root / f"gpu{n_all}", config, n_all, args)] if n_all > 1 else [])
    for r in runs:
        r["target_s"] = 1.25 * one["wall_s"] / r["gpus"]
        print(f"gpu={r['gpus']}: {r['wall_s']:.1f} s (target <= {r['target_s']:.1f} s); jobs per device "
              f"{ {d: sum(j['device'] == d for j in r['jobs']) for d in range(n_all)} }; busy "
              f"{ {d: f'{b:.0%}' for d, b in r['busy'].items()} }; shared while idle: "
              f"{len(r['shared_while_idle'])}")
    if len(runs) > 1:
        same = same_outputs(root / "gpu1", root / f"gpu{n_all}")
        print(f"outputs against the one-GPU run: {same}")
        runs[-1]["same_as_one_gpu"] = same
    if args.json:
        args.json.write_text(json.dumps(runs, indent=2, default=str))
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
