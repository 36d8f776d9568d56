"""Per-voxel orientation of fibre volumes: volsweep's local-energy rule against OrientationPy.

Same generated volumes for every method (tests/fibre_volumes.py; fibres of radius R along
directions off the 12 × 12 (θ, φ) grid, Gaussian noise σ = 0.3), one run:

* ``volsweep a:auto``: the scales as the config's ``a: auto`` derives them from the
  phase's local thickness (:func:`volsweep.engine.orientation.auto_scales`):
  ``sweep(..., a=[map_a, stats_a], orientation_a=map_a, orientation_map=True)``
  (local energy, σ = a, the map of a non-periodic volume on the mean extension), the
  whole call timed (statistics at both scales and the map);
* ``volsweep map``: ``sweep(..., a=map_a, orientation_map=True)``, the same map alone
  (what OrientationPy computes), CPU and, with ``--gpu``, the GPU (CUDA-event time);
* ``volsweep sigma=f·a``: the map with other integration scales; ``volsweep best`` the
  best of the maps, as ``orientationpy best`` is OrientationPy's best;
* ``volsweep-raw``: the former rule (per-voxel maximum of the raw response) at map_a;
* ``volsweep mode-boundary``: a non-periodic volume's map on the boundary mode's
  extension (``orientation_boundary="mode"``), the former treatment of the faces;
* ``volsweep stats-scale``: the map at the statistics' scale ``stats_a`` alone (the
  scale the dominant direction wants; neighbouring and crossing fibres merge there);
* ``orientationpy``: OrientationPy's structure tensor (Gaussian gradient,
  ``computeStructureTensor(sigma)``, ``computeOrientation(mode="fibre")``) for several
  integration ``sigma``; the best is reported.  Its direction is continuous; it is scored
  as it is and snapped to the nearest grid axis.

Accuracy: fraction of all fibre voxels (edges and faces included) whose axis is within one
grid step (15°) of the truth, and the median angle.  Time: median wall seconds of
``--reps`` calls (all on the same machine, OrientationPy on all its CPU cores).  Usage::

    PYTHONPATH=workflow python benchmarks/bench_orientation.py --open --out orientation.json
    PYTHONPATH=workflow python3 benchmarks/bench_orientation.py --gpu --open --out o.json
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time

import numpy as np

HERE = os.path.dirname(__file__)
sys.path.insert(0, os.path.join(HERE, "..", "workflow"))
sys.path.insert(0, os.path.join(HERE, "..", "tests"))

from fibre_volumes import axis_angle, open_fibres, periodic_fibres  # noqa: E402
from volsweep import sweep  # noqa: E402
from volsweep.engine.orientation import auto_scales  # noqa: E402
from volsweep.engine.wavelet import axis_vector  # noqa: E402

N_GRID = 12
GRID = np.arange(N_GRID) * np.pi / N_GRID
STEP = np.pi / N_GRID
XI = [2.0, 3.0]


def volumes(args):
    """(name, volume, mask, axis, mode) of every case."""
    R, noise = args.radius, args.noise
    out = []
    for seed in (1, 7):
        v, m, u = periodic_fibres((48, 48, 48), [{"direction": (2, 3, 1), "count": 3}], radius=R,
                                  noise=noise, seed=seed)
        out.append((f"periodic 1 family seed {seed}", v, m, u, "wrap"))
    d1, d2 = (1, 1, 2), (2, -1, 1)
    v, m, u = periodic_fibres((48, 48, 48), [{"direction": d1, "count": 2}, {"direction": d2, "count": 2}],
                              radius=R, noise=noise, seed=2)
    out.append(("periodic 2 families 60deg", v, m, u, "wrap"))
    if args.open:
        v, m, u = open_fibres((64, 64, 64), [{"direction": (2, 3, 1), "count": 6}], radius=R, noise=noise, seed=3)
        out.append(("open 1 family (reflect)", v, m, u, "reflect"))
    return out


def score(u, mask, truth):
    ang = axis_angle(u[mask], truth[mask])
    return {"within_step": float(np.mean(ang <= STEP + 1e-9)), "median_deg": float(np.degrees(np.median(ang)))}


def snap(u):
    """Nearest grid axis of each vector (..., 3)."""
    g = axis_vector(*np.meshgrid(GRID, GRID, indexing="ij")).reshape(-1, 3)
    flat = u.reshape(-1, 3)
    out = np.empty_like(flat)
    for i in range(0, len(flat), 1 << 16):
        out[i:i + (1 << 16)] = g[np.argmax(np.abs(flat[i:i + (1 << 16)] @ g.T), axis=1)]
    return out.reshape(u.shape)


def timed(fn, reps, gpu=False):
    out = None
    times = []
    for _ in range(reps):
        if gpu:
            import cupy as cp

            cp.cuda.get_current_stream().synchronize()
            a, b = cp.cuda.Event(), cp.cuda.Event()
            a.record()
            out = fn()
            b.record()
            b.synchronize()
            times.append(cp.cuda.get_elapsed_time(a, b) / 1e3)
        else:
            t = time.perf_counter()
            out = fn()
            times.append(time.perf_counter() - t)
    return out, statistics.median(times)


_WARM = set()


def run_volsweep(v, mode, a, device, rule, reps, integration_scale=None, **kw):
    def fn():
        return sweep(v, GRID, GRID, XI, a=a, mode=mode, device=device, progress=False,
                     orientation_map=True, orientation_rule=rule, integration_scale=integration_scale, **kw)

    if device not in _WARM:  # warm-up once per device (compilation, FFT plans)
        fn()
        _WARM.add(device)
    ds, t = timed(fn, reps, gpu=device == "cuda")
    return axis_vector(GRID[ds["argmax_theta"].values], GRID[ds["argmax_phi"].values]), t


def scales(mask):
    """``a: auto``'s scales from the phase's local thickness (:func:`auto_scales`; the phase
    is the fibre mask)."""
    import volsweep

    lt = volsweep.local_thickness(mask, device="cpu")
    return auto_scales(volsweep.thickness_distribution(lt, bins=20))


def run_orientationpy(v, sigma, reps):
    import orientationpy

    def fn():
        g = orientationpy.computeGradient(v, mode="gaussian")
        st = orientationpy.computeStructureTensor(g, sigma=sigma)
        o = orientationpy.computeOrientation(st, mode="fibre")
        return np.moveaxis(orientationpy.anglesToVectors(o), 0, -1)  # its (z, y, x) = our array axes

    fn()
    return timed(fn, reps)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--radius", type=float, default=2.5)
    ap.add_argument("--noise", type=float, default=0.3)
    ap.add_argument("--reps", type=int, default=1)
    ap.add_argument("--gpu", action="store_true")
    ap.add_argument("--no-cpu", dest="cpu", action="store_false", help="skip the CPU sweep")
    ap.add_argument("--open", action="store_true", help="also a non-periodic volume (reflect; large halo)")
    ap.add_argument("--sigmas", type=float, nargs="+", default=[1.0, 2.0, 3.0, 4.0],
                    help="OrientationPy integration sigmas (voxels)")
    ap.add_argument("--sigma-per-a", type=float, nargs="+", default=[0.25, 0.5],
                    help="volsweep integration scales besides the default, in units of a")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    res = {"radius": args.radius, "noise": args.noise, "xi": XI, "grid": N_GRID,
           "machine": platform.processor() or platform.machine(), "cpus": os.cpu_count(), "cases": {}}
    try:
        import orientationpy

        res["orientationpy"] = orientationpy.__version__ if hasattr(orientationpy, "__version__") else "installed"
    except ImportError:
        res["orientationpy"] = None
    if args.gpu:
        import cupy as cp

        res["gpu"] = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    rows = []
    for name, v, m, u, mode in volumes(args):
        a_list, a_map = scales(m)
        a_stats = max(a_list)
        case = {"fibre_voxels": int(m.sum()), "mode": mode, "a": a_list, "orientation_a": a_map}
        devices = (["cpu"] if args.cpu else []) + (["cuda"] if args.gpu else [])
        for dev in devices:
            runs = [("local_energy", "volsweep map", a_map, None, {}),
                    ("response", "volsweep-raw", a_map, None, {})]
            runs += [("local_energy", f"volsweep sigma={f:g}a", a_map, f * a_map, {}) for f in args.sigma_per_a]
            if mode != "wrap":
                runs.append(("local_energy", "volsweep mode-boundary", a_map, None,
                             {"orientation_boundary": "mode"}))
            if mode == "wrap" or dev == "cuda":  # reflect at stats_a: hundreds of 300³ FFTs
                runs.append(("local_energy", "volsweep a:auto", a_list, None, {"orientation_a": a_map}))
                runs.append(("local_energy", "volsweep stats-scale", a_stats, None, {}))
            best = None
            for rule, label, a, sig, kw in runs:
                est, t = run_volsweep(v, mode, a, dev, rule, args.reps, sig, **kw)
                case[f"{label} {dev}"] = sc = {**score(est, m, u), "seconds": t, "a": a}
                if rule == "local_energy" and "scale" not in label and "boundary" not in label and (
                        best is None or sc["within_step"] > best["within_step"]):
                    best = sc
            case[f"volsweep best {dev}"] = best
        if res["orientationpy"]:
            best = None
            for s in args.sigmas:
                est, t = run_orientationpy(v, s, args.reps)
                sc = {**score(est, m, u), "snapped": score(snap(est), m, u), "seconds": t, "sigma": s}
                case[f"orientationpy sigma={s:g}"] = sc
                if best is None or sc["within_step"] > best[1]["within_step"]:
                    best = (s, sc)
            case["orientationpy best"] = best[1]
        res["cases"][name] = case
        for k, val in case.items():
            if isinstance(val, dict):
                a = val.get("a", "")
                a = ", ".join(f"{x:.3g}" for x in a) if isinstance(a, list) else (f"{a:.3g}" if a != "" else "")
                rows.append(f"| {name} | {k} | {a} | {val['within_step']:.3f} | {val['median_deg']:.1f} | "
                            f"{val['seconds']:.2f} |")
        print(json.dumps({name: case}), flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(res, f, indent=1)
    print(f"\nxi = {XI}, noise {args.noise}, radius {args.radius}, cpus {res['cpus']}, "
          f"gpu {res.get('gpu')}, orientationpy {res['orientationpy']}")
    print("| volume | method | a | within one step (15°) | median angle (°) | seconds |")
    print("| --- | --- | --- | --- | --- | --- |")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
