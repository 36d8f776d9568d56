"""Local thickness of two releases, whole calls alternating: the speed-up of one over the other.

Each release runs in its own process (its package from ``git archive``, or the working
tree), so that both load their own kernels; the controller hands both the same phase and
asks for one call at a time, base and head in turn, so that a drift of the machine's
speed reaches both. Before timing, both outputs are compared (SHA-256 of the result):
a release that changes the result is reported, not timed.

Cases (``--cases``): those of ``bench_thickness.py`` at ``--size`` (drawn with ``--seed``)
and, with ``--porespy-cases``, PoreSpy's 250^3 blobs (porosity/blobiness; without PoreSpy,
the same recipe from ``bench_thickness.blobs``). ``--base`` (and ``--head``) may also name
a release's ``workflow`` folder, for a machine without the repository's history.

Usage::

    python benchmarks/bench_thickness_releases.py --base v0.4.0 --cases blobs pores \\
        --porespy-cases 0.6/2 --repeat 7

prints, per case, the median seconds of each release, the ratio of the medians and the
median of the alternated pairs' ratios (> 1: head is faster).
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_thickness import CASES, _porosity_blobiness, blobs  # noqa: E402

# The worker times its own calls (CUDA events or the host clock, as bench_thickness's
# time_once): importing bench_thickness there would put the working tree's package first.
WORKER = r"""
import hashlib, sys, time
sys.path.insert(0, sys.argv[1])
import numpy as np
from volsweep import thickness as T
cuda = sys.argv[2] == "cuda"
if cuda:
    import cupy as cp
x = None
for line in sys.stdin:
    cmd, _, arg = line.strip().partition(" ")
    if cmd == "load":
        x = np.load(arg)
        x = cp.asarray(x) if cuda else x
        print("ok", flush=True)
    elif cmd == "digest":
        y = T.local_thickness(x)
        y = cp.asnumpy(y) if cuda else y
        print(hashlib.sha256(np.ascontiguousarray(y).tobytes()).hexdigest(), flush=True)
    elif cmd == "run":
        if cuda:
            start, stop = cp.cuda.Event(), cp.cuda.Event()
            start.record()
            T.local_thickness(x)
            stop.record()
            stop.synchronize()
            print(cp.cuda.get_elapsed_time(start, stop) / 1e3, flush=True)
        else:
            t = time.perf_counter()
            T.local_thickness(x)
            print(time.perf_counter() - t, flush=True)
"""


class Release:
    """A worker process running one release's ``local_thickness`` on request."""

    def __init__(self, workflow: Path, device: str):
        self.workflow = workflow
        self.proc = subprocess.Popen([sys.executable, "-c", WORKER, str(workflow), device],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def ask(self, line: str) -> str:
        try:
            self.proc.stdin.write(line + "\n")
            self.proc.stdin.flush()
            reply = self.proc.stdout.readline()
        except BrokenPipeError:
            reply = ""
        if not reply:
            raise SystemExit(f"the worker of {self.workflow} stopped on {line!r} (its error "
                             f"is above)")
        return reply.strip()

    def close(self):
        try:
            self.proc.stdin.close()
        except BrokenPipeError:  # the worker already stopped
            pass
        self.proc.wait()


def release_tree(rev: str, into: Path) -> Path:
    """The ``workflow`` folder of git revision ``rev``, extracted under ``into``; ``rev``
    may also name a release's ``workflow`` folder itself (holding ``volsweep``)."""
    if (Path(rev) / "volsweep").is_dir():
        return Path(rev).resolve()
    try:
        blob = subprocess.run(["git", "-C", str(ROOT), "archive", rev, "workflow"],
                              check=True, capture_output=True).stdout
    except subprocess.CalledProcessError as err:
        raise SystemExit(f"git archive {rev!r} failed: {err.stderr.decode().strip()}") from None
    with tarfile.open(fileobj=io.BytesIO(blob)) as tar:
        try:
            tar.extractall(into, filter="data")
        except TypeError:  # Python < 3.11.4: no extraction filters (git's own archive)
            tar.extractall(into)
    return into / "workflow"


def phases(a):
    """(name, phase) of every case asked for."""
    for name in a.cases:
        yield f"{name} {a.size}^3 seed {a.seed}", CASES[name](a.size, seed=a.seed)
    for porosity, blobiness in a.porespy_cases:
        try:
            import porespy as ps
        except ImportError:  # the same recipe, from bench_thickness
            yield (f"blobs 250^3 {porosity:g}/{blobiness:g} seed {a.seed} (PoreSpy's recipe)",
                   blobs((250,) * 3, porosity, blobiness, seed=a.seed))
            continue
        im = ps.generators.blobs((250,) * 3, porosity=porosity, blobiness=blobiness,
                                 seed=a.seed)
        yield f"PoreSpy blobs 250^3 {porosity:g}/{blobiness:g} seed {a.seed}", im


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base", required=True,
                   help="git revision of the baseline release, or its workflow folder")
    p.add_argument("--head", default=None,
                   help="git revision to compare (default: the working tree)")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--cases", nargs="*", default=list(CASES), choices=list(CASES))
    p.add_argument("--size", type=int, default=128)
    p.add_argument("--porespy-cases", type=_porosity_blobiness, nargs="*", default=[])
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path)
    a = p.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        base = release_tree(a.base, tmp / "base")
        head = release_tree(a.head, tmp / "head") if a.head else ROOT / "workflow"
        pair = {}
        try:
            pair["base"] = Release(base, a.device)
            pair["head"] = Release(head, a.device)
            for name, phase in phases(a):
                path = tmp / "phase.npy"
                np.save(path, phase)
                for r in pair.values():
                    r.ask(f"load {path}")
                digests = {k: r.ask("digest") for k, r in pair.items()}  # the untimed call
                if digests["base"] != digests["head"]:
                    print(f"{name}: the outputs differ; not timed", flush=True)
                    rows.append({"case": name, "equal": False})
                    continue
                times = {"base": [], "head": []}
                for _ in range(a.repeat):
                    for k, r in pair.items():
                        times[k].append(float(r.ask("run")))
                med = {k: statistics.median(v) for k, v in times.items()}
                pairs = statistics.median(b / h for b, h in zip(times["base"], times["head"]))
                rows.append({"case": name, "equal": True, "base_s": times["base"],
                             "head_s": times["head"], "ratio": med["base"] / med["head"],
                             "ratio_of_pairs": pairs})
                print(f"{name}: base {med['base'] * 1e3:.1f} ms, head {med['head'] * 1e3:.1f} ms"
                      f" -> {med['base'] / med['head']:.3f}x (median of the alternated pairs' "
                      f"ratios {pairs:.3f}x), outputs equal", flush=True)
        finally:
            for r in pair.values():
                r.close()
    if a.out:
        a.out.write_text(json.dumps({"args": {k: str(v) for k, v in vars(a).items()},
                                     "cases": rows}, indent=1))


if __name__ == "__main__":
    main()
