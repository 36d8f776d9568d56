"""Writing a sweep's orientation store: chunks of a shard against one chunk per shard.

    python benchmarks/bench_store_write.py --shape 800 800 200 --repeat 3

Writes the five per-voxel arrays of a sweep (``response_max`` and ``local_energy_max``
float32, three uint16 index arrays, as :func:`volsweep.io.orientation.write` stores them)
with each chunk shape in turn, alternating, and prints the median wall time of each and
their ratio against the first.  The maps are smooth (a fibre-like field plus noise), so
they compress about as a sweep's do.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from volsweep.io import orientation as store


def sweep_like_maps(shape, n_grid=(16, 16, 3), seed=0):
    rng = np.random.default_rng(seed)
    x, y, z = np.meshgrid(*(np.linspace(0, 6 * np.pi, n, dtype=np.float32) for n in shape),
                          indexing="ij", sparse=True)
    field = np.sin(x + 0.5 * y) * np.cos(0.7 * z) + 0.1 * rng.standard_normal(shape, dtype=np.float32)
    maps = {"response_max": field.astype(np.float32), "local_energy_max": (field ** 2).astype(np.float32)}
    for name, n in zip(("argmax_theta", "argmax_phi", "argmax_xi"), n_grid):
        maps[name] = ((field + 1.2) * n / 2.4).clip(0, n - 1).astype(np.uint16)
    return maps


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", type=int, nargs=3, default=[400, 400, 200])
    ap.add_argument("--shards", type=int, nargs=3, default=[128, 128, 128])
    ap.add_argument("--chunks", type=int, nargs=3, action="append",
                    help="chunk shapes to compare (repeatable; default: 64³, then one per shard)")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args(argv)
    chunk_shapes = [tuple(c) for c in args.chunks] if args.chunks else [(64, 64, 64), tuple(args.shards)]
    maps = sweep_like_maps(tuple(args.shape))
    times = {c: [] for c in chunk_shapes}
    root = Path(tempfile.mkdtemp(prefix="volsweep-store-"))
    try:
        for _ in range(args.repeat):
            for chunks in chunk_shapes:
                path = root / "orientation.zarr"
                shutil.rmtree(path, ignore_errors=True)
                t = time.perf_counter()
                store.write(path, maps, chunks=chunks, shards=tuple(args.shards), spacing=(1, 1, 1))
                times[chunks].append(time.perf_counter() - t)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    gb = sum(a.nbytes for a in maps.values()) / 1e9
    base = statistics.median(times[chunk_shapes[0]])
    print(f"orientation store of {tuple(args.shape)} ({gb:.2f} GB), shards {tuple(args.shards)}, "
          f"median of {args.repeat}:")
    for chunks, ts in times.items():
        med = statistics.median(ts)
        print(f"  chunks {chunks}: {med:.2f} s ({', '.join(f'{t:.2f}' for t in ts)}), "
              f"{base / med:.2f}x the first")


if __name__ == "__main__":
    main()
