"""Run the workflow's steps on the GPU and on the CPU, compare them, and time orientation maps.

No Snakemake here (the GPU machine lacks it): the same package functions the
rules call, in the rules' order, on the demo volume of config.yaml.

    PYTHONPATH=workflow python benchmarks/gpu_workflow_check.py --out /tmp/check [--orientation-size 800 800 200]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import yaml

from volsweep import pipeline
from volsweep.io.datasets import open_netcdf
from volsweep.io.store import open_store
from volsweep.tiling import plan_tiles


def angles(spec):
    if "values" in spec:
        return np.asarray(spec["values"], float)
    return np.arange(spec["num"]) * np.pi / spec["num"]


def run_steps(cfg, entry, work: Path, device: str) -> dict:
    """The demo workflow for one volume, step by step; returns step times in seconds."""
    st, sw, th = cfg["storage"], cfg["sweep"], cfg["thickness"]
    vol = work / "volume.zarr"
    times = {}
    t = time.perf_counter()
    pipeline.ingest_volume(entry, "demo", vol, chunks=st["chunks"], shards=st["shards"],
                           memory_budget_mb=cfg.get("memory_budget_mb", 256))
    times["ingest"] = time.perf_counter() - t
    theta, phi = angles(sw["theta"]), angles(sw["phi"])
    size = sw.get("block_size", 4)
    blocks = [np.arange(i, min(len(theta), i + size)) for i in range(0, len(theta), size)]
    ncs, ors = [], []
    t = time.perf_counter()
    for b, idx in enumerate(blocks):
        ncs.append(work / f"sweep/{b}.nc")
        ors.append(work / f"sweep/{b}.orientation.zarr")
        pipeline.sweep_block(vol, ncs[-1], theta=theta[idx], phi=phi, xi=sw["xi"], a=sw["a"],
                             mode=sw.get("mode", "reflect"), truncate=None,
                             stats=("energy", "std", "max", "mean", "min"), device=device, block=b,
                             theta_offset=int(idx[0]), orientation_zarr=ors[-1])
    times["sweep_blocks"] = time.perf_counter() - t
    pipeline.merge_orientation(ors, work / "orientation.zarr", theta=theta, phi=phi, xi=sw["xi"],
                               provenance={})
    pipeline.aggregate_sweep(ncs, vol, work / "sweep.nc", provenance={})
    t = time.perf_counter()
    phase = dict(threshold=th["threshold"], label=th.get("label"), invert=th.get("invert", False))
    pipeline.thickness_rmax(vol, work / "rmax.json", device=device, name="demo", **phase)
    pipeline.create_thickness_store(vol, work / "thickness.zarr", chunks=st["chunks"], chunk=th["chunk"])
    shape = open_store(vol).shape
    npzs = []
    for i in range(len(plan_tiles(shape, th["chunk"]))):
        npzs.append(work / f"chunks/{i}.npz")
        pipeline.thickness_chunk(vol, work / "thickness.zarr", work / "rmax.json", npzs[-1], index=i,
                                 chunk=th["chunk"], device=device, **phase)
    times["thickness"] = time.perf_counter() - t
    pipeline.aggregate_thickness(npzs, work / "rmax.json", vol, work / "thickness.nc",
                                 bins=th["bins"], provenance={})
    return times


def compare(cpu: Path, gpu: Path) -> dict:
    import zarr

    out = {}
    a, b = open_netcdf(cpu / "sweep.nc"), open_netcdf(gpu / "sweep.nc")
    scale = np.abs(a["std"].values)
    for stat in ("energy", "std", "max", "mean", "min"):
        ref = a[stat].values if stat in ("energy", "std") else scale
        out[f"sweep_{stat}_max_rel_diff"] = float(np.max(np.abs(a[stat].values - b[stat].values) / ref))
    ta = zarr.open_group(str(cpu / "thickness.zarr"))["0"][...]
    tb = zarr.open_group(str(gpu / "thickness.zarr"))["0"][...]
    out["thickness_identical"] = bool(np.array_equal(ta, tb))
    ha, hb = open_netcdf(cpu / "thickness.nc"), open_netcdf(gpu / "thickness.nc")
    out["thickness_hist_identical"] = bool(np.array_equal(ha["voxel_count"], hb["voxel_count"]))
    oa, ob = zarr.open_group(str(cpu / "orientation.zarr")), zarr.open_group(str(gpu / "orientation.zarr"))
    ra, rb = oa["0"][...], ob["0"][...]
    out["orientation_response_max_abs_diff_over_std"] = float(np.max(np.abs(ra - rb)) / ra.std())
    agree = np.mean([np.mean(oa[k][...] == ob[k][...]) for k in ("argmax_theta", "argmax_phi", "argmax_xi")])
    out["orientation_index_agreement"] = float(agree)
    return out


def identical(a: Path, b: Path) -> dict:
    """Byte equality of every NetCDF file, value equality of every Zarr array."""
    import zarr

    out = {}
    for f in sorted(a.rglob("*.nc")):
        out[str(f.relative_to(a))] = f.read_bytes() == (b / f.relative_to(a)).read_bytes()
    for name in ("volume.zarr", "thickness.zarr", "orientation.zarr"):
        ga, gb = zarr.open_group(str(a / name)), zarr.open_group(str(b / name))
        out[name] = all(np.array_equal(ga[k][...], gb[k][...], equal_nan=True) for k in ga.array_keys())
    return out


def time_orientation(shape, n_theta, n_phi, xi, reps=3) -> dict:
    """Sweep time with and without orientation maps, same block, medians of ``reps``."""
    import cupy as cp

    from volsweep.engine import sweep

    rng = np.random.default_rng(0)
    vol = cp.asarray(rng.random(shape, dtype=np.float32))
    theta = np.linspace(-1.4, 1.4, n_theta)
    phi = np.arange(n_phi) * np.pi / n_phi
    res = {}
    for flag in (False, True):
        sweep(vol, theta[:1], phi[:1], xi, device="cuda", progress=False, orientation_map=flag)
        ts = []
        for _ in range(reps):
            cp.cuda.Device().synchronize()
            t = time.perf_counter()
            sweep(vol, theta, phi, xi, device="cuda", progress=False, orientation_map=flag)
            cp.cuda.Device().synchronize()
            ts.append(time.perf_counter() - t)
        res[f"orientation_{flag}_s"] = float(np.median(ts))
    res["ratio"] = res["orientation_True_s"] / res["orientation_False_s"]
    res["kernels"] = n_theta * n_phi * len(xi)
    res["shape"] = list(shape)
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--config", default="config.yaml")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--orientation-size", type=int, nargs=3, default=None)
    ap.add_argument("--orientation-grid", type=int, nargs=2, default=(20, 20))
    ap.add_argument("--orientation-xi", type=float, nargs="+", default=[1.0, 4.0])
    ap.add_argument("--devices", nargs="+", default=["cpu", "cuda"])
    ap.add_argument("--repeat-gpu", action="store_true", help="run the GPU steps twice; compare bytes")
    args = ap.parse_args()
    cfg = yaml.safe_load(open(args.config))
    entry = dict(cfg["volumes"]["demo"])
    report = {}
    for device in args.devices:
        report[f"times_{device}"] = run_steps(cfg, entry, args.out / device, device)
    if set(args.devices) >= {"cpu", "cuda"}:
        report["compare"] = compare(args.out / "cpu", args.out / "cuda")
    if args.repeat_gpu:
        run_steps(cfg, entry, args.out / "cuda-again", "cuda")
        report["gpu_runs_identical"] = identical(args.out / "cuda", args.out / "cuda-again")
    if args.orientation_size:
        report["orientation"] = time_orientation(tuple(args.orientation_size), *args.orientation_grid,
                                                 args.orientation_xi)
    print(json.dumps(report, indent=2))
    (args.out / "report.json").write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
