"""The workflow end to end against the library's own compute for the same volumes.

Writes a project with synthetic volumes, runs ``snakemake`` on it, and prints
the wall time of the run and of each rule (from the jobs' benchmark files and
logs) beside the time of the same library calls in one process, measured in
the same run: the synthetic generator, ``volsweep.sweep`` (with the
orientation map) and ``volsweep.local_thickness``.  With a GPU it also samples
``nvidia-smi`` and prints the GPU's busy fraction over the run and over the
sweep and thickness jobs.

    python benchmarks/bench_workflow.py --shape 96 96 96 --volumes 2 --theta 6 --phi 6 \\
        --xi 2 4 --a 2 --cores 2 --device cpu
    python benchmarks/bench_workflow.py --shape 800 800 200 --volumes 1 --theta 16 --phi 16 \\
        --xi 1 2 4 --a 3 --cores 16 --device auto --fibres 100 --pores 30

Options ``--snakemake`` (the command, default ``python -m snakemake``) and
``--keep`` (the project folder) help on machines where Snakemake is elsewhere.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import defaultdict
from datetime import datetime
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
STAMP = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) ")


def synthetic_spec(shape, seed, fibres, pores):
    n = max(1, fibres // 2)
    radius = 2.5
    return {"shape": list(shape), "seed": seed, "noise": 0.1,
            "fibres": [{"theta": 0.3, "phi": 0.4, "radius": radius, "count": n},
                       {"theta": 1.1, "phi": 2.0, "radius": radius, "count": max(0, fibres - n)}],
            "pores": [{"radius": 4.0, "count": pores}] if pores else []}


def make_config(args) -> dict:
    volumes = {f"v{i:03d}": {"spacing": [1.0, 1.0, 1.0],
                             "synthetic": synthetic_spec(args.shape, i, args.fibres, args.pores)}
               for i in range(args.volumes)}
    return {
        "volumes": volumes,
        "device": args.device,
        "storage": {k: v for k, v in (("chunks", args.chunks), ("shards", args.shards)) if v},
        "sweep": {"a": args.a, "theta": {"num": args.theta}, "phi": {"num": args.phi},
                  "xi": args.xi, "mode": "reflect", "orientation_map": True},
        "thickness": {"threshold": 0.5, "bins": 64},
        "report": {"enabled": args.report},
    }


def library_time(config, args) -> dict:
    """Seconds of the same computations as library calls in this process, per step."""
    import volsweep
    from volsweep.backend import resolve_device
    from volsweep.config import angle_values, validate_config

    cfg = validate_config(json.loads(json.dumps(config)), configfile="bench", check_volumes=False,
                          estimate=False, announce=False)
    sw = cfg["sweep"]
    theta, phi = angle_values(sw["theta"]), angle_values(sw["phi"])
    device = resolve_device(cfg["device"])
    sync = _sync(device)
    out = defaultdict(float)
    warm = volsweep.synthetic_volume((24, 20, 16), fibres=[{"theta": 0.3, "phi": 0.4, "radius": 2}])
    volsweep.sweep(warm, theta[:1], phi[:1], sw["xi"], a=sw["a"], mode=sw["mode"], device=device,
                   progress=False, orientation_map=True)  # compiled code loaded, not timed
    volsweep.local_thickness(warm > 0.5, device=device)
    for entry in cfg["volumes"].values():
        spec = entry["synthetic"]
        t = time.perf_counter()
        vol = volsweep.synthetic_volume(spec["shape"], fibres=spec["fibres"], pores=spec["pores"],
                                        seed=spec["seed"], noise=spec["noise"])
        out["generate"] += time.perf_counter() - t
        t = time.perf_counter()
        volsweep.sweep(vol, theta, phi, sw["xi"], a=sw["a"], mode=sw["mode"], device=device,
                       progress=False, orientation_map=True)
        sync()
        out["sweep"] += time.perf_counter() - t
        t = time.perf_counter()
        lt = volsweep.local_thickness(vol > cfg["thickness"]["threshold"], device=device)
        sync()
        volsweep.thickness_distribution(lt, bins=cfg["thickness"]["bins"])
        out["thickness"] += time.perf_counter() - t
    out["total"] = sum(out.values())
    return dict(out)


def _sync(device):
    if device != "cuda":
        return lambda: None
    import cupy

    return cupy.cuda.Device().synchronize


class GpuSampler:
    """``nvidia-smi`` utilisation samples (time, GPU index, percent) of every GPU, in a thread."""

    def __init__(self, period_ms=100):
        self.samples, self.period_ms, self.proc = [], period_ms, None

    def __enter__(self):
        if shutil.which("nvidia-smi") is None:
            return self
        self.proc = subprocess.Popen(
            ["nvidia-smi", "--query-gpu=index,utilization.gpu", "--format=csv,noheader,nounits",
             "--loop-ms", str(self.period_ms)], stdout=subprocess.PIPE, text=True)
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()
        return self

    def _read(self):
        for line in self.proc.stdout:
            try:
                index, util = (float(v) for v in line.split(","))
            except ValueError:
                continue
            self.samples.append((time.time(), int(index), util))

    def __exit__(self, *exc):
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait()

    def busy_per_gpu(self, start=None, stop=None) -> dict:
        """GPU index -> mean utilisation (0-1) of its samples inside [start, stop]."""
        per = {}
        for t, i, u in self.samples:
            if (start is None or t >= start) and (stop is None or t <= stop):
                per.setdefault(i, []).append(u)
        return {i: statistics.fmean(v) / 100 for i, v in sorted(per.items())}

    def busy(self, start=None, stop=None):
        """Mean utilisation (0-1) over every GPU inside [start, stop]; None without samples."""
        per = self.busy_per_gpu(start, stop)
        return statistics.fmean(per.values()) if per else None

    def busy_during(self, spans):
        """Mean utilisation (0-1) of the samples inside any of ``spans`` (time-weighted over
        the spans: samples are periodic); None without samples."""
        got = [u for t, _, u in self.samples if any(a <= t <= b for a, b in spans)]
        return statistics.fmean(got) / 100 if got else None


def job_intervals(work: Path) -> dict:
    """rule -> list of (start, stop) epoch seconds, from the first and last stamped lines of each log."""
    out = defaultdict(list)
    for log in sorted((work / "logs").rglob("*.log")):
        stamps = [STAMP.match(line) for line in log.read_text(errors="replace").splitlines()]
        stamps = [datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp() for m in stamps if m]
        text = log.read_text(errors="replace")
        rule = re.search(r"rule (\w+), wildcards", text)
        if stamps and rule:
            out[rule.group(1)].append((stamps[0], stamps[-1]))
    return out


def rule_seconds(work: Path) -> dict:
    """rule -> (jobs, summed wall seconds) from the benchmark files and, else, the log stamps."""
    out = {}
    for rule, spans in job_intervals(work).items():
        out[rule] = (len(spans), sum(b - a for a, b in spans))
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", type=int, nargs=3, default=[96, 96, 96])
    ap.add_argument("--volumes", type=int, default=2)
    ap.add_argument("--theta", type=int, default=6)
    ap.add_argument("--phi", type=int, default=6)
    ap.add_argument("--xi", type=float, nargs="+", default=[2.0, 4.0])
    ap.add_argument("--a", type=float, default=2.0)
    ap.add_argument("--fibres", type=int, default=8)
    ap.add_argument("--pores", type=int, default=4)
    ap.add_argument("--device", default="cpu", choices=["auto", "cpu", "cuda"])
    ap.add_argument("--chunks", type=int, nargs=3, help="storage.chunks (default: the config's)")
    ap.add_argument("--shards", type=int, nargs=3, help="storage.shards (default: the config's)")
    ap.add_argument("--cores", type=int, default=2)
    ap.add_argument("--gpus", type=int, default=1, help="--resources gpu=N")
    ap.add_argument("--report", action="store_true", help="make the figures too")
    ap.add_argument("--no-library", action="store_true", help="skip the library baseline")
    ap.add_argument("--snakemake", default=f"{sys.executable} -m snakemake")
    ap.add_argument("--keep", type=Path, help="project folder (default: a temporary one)")
    ap.add_argument("--json", type=Path, help="write the figures here")
    args = ap.parse_args(argv)

    work = args.keep or Path(tempfile.mkdtemp(prefix="volsweep-bench-"))
    shutil.rmtree(work / "results", ignore_errors=True)
    shutil.rmtree(work / "logs", ignore_errors=True)
    work.mkdir(parents=True, exist_ok=True)
    config = make_config(args)
    (work / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
    cmd = [*shlex.split(args.snakemake), "-s", str(REPO / "Snakefile"), "--directory", str(work),
           "--configfile", str(work / "config.yaml"), "--cores", str(args.cores),
           "--resources", f"gpu={args.gpus}", "-q"]
    with GpuSampler() as gpu:
        start = time.time()
        proc = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.time() - start
    if proc.returncode != 0:
        print(proc.stdout[-3000:], proc.stderr[-3000:], file=sys.stderr)
        raise SystemExit(f"snakemake failed with exit code {proc.returncode}")
    lib = {} if args.no_library else library_time(config, args)
    per_rule = rule_seconds(work)
    spans = job_intervals(work)
    compute = [s for r in ("sweep", "sweep_block", "thickness", "thickness_chunk") for s in spans.get(r, [])]
    result = {"config": {k: v for k, v in vars(args).items() if k not in ("keep", "json")},
              "workflow_wall_s": wall, "library_s": lib, "rules": per_rule,
              "gpu_busy_run": gpu.busy(start, start + wall),
              "gpu_busy_compute": gpu.busy_during(compute) if compute else None}
    print(f"workflow: {wall:.1f} s wall for {args.volumes} volume(s) of {tuple(args.shape)} "
          f"(snakemake --cores {args.cores}, device {args.device})")
    for rule, (n, secs) in sorted(per_rule.items(), key=lambda kv: -kv[1][1]):
        print(f"  {rule:<20} {n:4d} job(s) {secs:8.2f} s")
    jobs = sorted((a, b, rule) for rule, sp in spans.items() for a, b in sp)
    if len(jobs) <= 24:  # when each job's first and last log line fell in the run
        print("  timeline (s from the start): " + ", ".join(
            f"{rule} {a - start:.1f}-{b - start:.1f}" for a, b, rule in jobs))
    if lib:
        print("library, one process: " + ", ".join(f"{k} {v:.2f} s" for k, v in lib.items()))
        print(f"workflow / library = {wall / lib['total']:.2f}; "
              f"workflow - 2 x library = {wall - 2 * lib['total']:.1f} s")
    if result["gpu_busy_run"] is not None:
        print(f"GPU busy: {result['gpu_busy_run']:.0%} of the run, "
              f"{result['gpu_busy_compute']:.0%} of the time in sweep and thickness jobs")
    if args.volumes > 1:
        print(f"per volume: {wall / args.volumes:.2f} s")
    if args.json:
        args.json.write_text(json.dumps(result, indent=2, default=str))
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)
    return result


if __name__ == "__main__":
    main()
