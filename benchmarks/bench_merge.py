"""Merging a split sweep's orientation maps: the dask graph against a serial loop over shards.

    python benchmarks/bench_merge.py --shape 256 256 128 --blocks 4 --repeat 3

Both read every block's shards once and write the merged store; the serial loop is the
plain reference (one shard region at a time, every block in order).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from volsweep.io import orientation as store
from volsweep.tiling import plan_tiles


def serial_merge(paths, out):
    groups = [store.open_group(p) for p in paths]
    ref = groups[0]["0"]
    names = ["0"] + store._arrays(groups[0])
    key = names.index(store.CRITERION)
    target = store.create(out, ref.shape, chunks=ref.chunks, shards=ref.shards,
                          spacing=tuple(ref.attrs["spacing"]), arrays=names[1:],
                          dtypes={n: groups[0][n].dtype for n in names[1:]})
    for tile in plan_tiles(ref.shape, ref.shards):
        best = None
        for g in groups:
            parts = [g[n][tile.core] for n in names]
            if best is None:
                best = parts
                continue
            better = parts[key] > best[key]
            best = [np.maximum(a, b) if i == 0 else np.where(better, a, b)
                    for i, (a, b) in enumerate(zip(parts, best))]
        for n, part in zip(names, best):
            target[n][tile.core] = part


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--shape", type=int, nargs=3, default=[256, 256, 128])
    ap.add_argument("--blocks", type=int, default=4)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    work = Path(tempfile.mkdtemp(prefix="volsweep-merge-"))
    paths = []
    for b in range(args.blocks):
        arrays = {"response_max": rng.random(args.shape, dtype=np.float32),
                  "local_energy_max": rng.random(args.shape, dtype=np.float32)}
        for n in ("argmax_theta", "argmax_phi", "argmax_xi"):
            arrays[n] = rng.integers(0, 8, args.shape).astype(np.uint16)
        paths.append(work / f"{b}.zarr")
        store.write(paths[-1], arrays, chunks=(64, 64, 64), shards=(128, 128, 128), spacing=(1, 1, 1))
    times = {"dask": [], "serial": []}
    for r in range(args.repeat):
        t = time.perf_counter()
        store.merge(paths, work / f"dask{r}.zarr")
        times["dask"].append(time.perf_counter() - t)
        t = time.perf_counter()
        serial_merge(paths, work / f"serial{r}.zarr")
        times["serial"].append(time.perf_counter() - t)
    a, b = store.open_group(work / "dask0.zarr"), store.open_group(work / "serial0.zarr")
    assert all(np.array_equal(a[n][...], b[n][...]) for n in ["0"] + store._arrays(a))
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"{args.blocks} blocks of {tuple(args.shape)}: dask {med['dask']:.2f} s, serial "
          f"{med['serial']:.2f} s (median of {args.repeat}); dask is {med['serial'] / med['dask']:.2f}x")


if __name__ == "__main__":
    main()
