"""The synthetic generator (the demo's and the benchmarks' source volumes).

    python benchmarks/bench_synthetic.py --shape 800 800 200 --fibres 100 --pores 30 --repeat 5

Times ``volsweep.synthetic_volume`` on the volume ``bench_workflow.py`` generates for the
same arguments (the median of ``--repeat`` calls after one untimed call, in this
process), and prints the threads it could use.  To compare two trees, run it with each
tree's ``workflow`` folder first on ``PYTHONPATH``, alternately.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_workflow import synthetic_spec  # noqa: E402


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", type=int, nargs=3, default=[800, 800, 200])
    ap.add_argument("--fibres", type=int, default=100)
    ap.add_argument("--pores", type=int, default=30)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args(argv)

    import volsweep

    spec = synthetic_spec(args.shape, args.seed, args.fibres, args.pores)

    def generate():
        return volsweep.synthetic_volume(spec["shape"], fibres=spec["fibres"], pores=spec["pores"],
                                         seed=spec["seed"], noise=spec["noise"])

    generate()
    times = []
    for _ in range(args.repeat):
        start = time.perf_counter()
        generate()
        times.append(time.perf_counter() - start)
    print(f"synthetic_volume {tuple(args.shape)}, {args.fibres} fibres, {args.pores} pores: "
          f"median {statistics.median(times):.3f} s of {args.repeat} "
          f"(min {min(times):.3f}, max {max(times):.3f}); {len(os.sched_getaffinity(0))} CPUs; "
          f"volsweep from {Path(volsweep.__file__).parent}")


if __name__ == "__main__":
    main()
