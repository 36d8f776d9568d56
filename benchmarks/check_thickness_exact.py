"""Randomised exactness check of volsweep's local thickness against the exact brute force.

Draws small odd-shaped phases (random fill, thresholded smoothed noise, solids with 1-4
isolated pore voxels; every fifth with rows of ``ROW_WINDOW`` voxels or more, which the
CPU's max painter writes through a fixed window) and spacings (isotropic or per axis, from
a list of decimal values or two-decimal draws in [0.2, 3]) until ``--seconds`` have
passed, and checks:

- ``local_thickness(X, spacing)`` equals ``tests/thickness_oracle.py`` (exact integer
  arithmetic) bit for bit;
- for isotropic spacings ``(s, s, s)``, ``local_thickness(X, spacing=(s, s, s)) ==
  float32(s) * local_thickness(X)``;
- for every fourth case, the chunked result (``local_thickness_core`` over random tiles
  with ``thickness_halo``) equals the whole-volume one.

Each mismatching phase is saved under ``--keep`` (``.npy``, with its spacing in the name).
The exit status is 1 on any mismatch.

Usage::

    python benchmarks/check_thickness_exact.py --seconds 900 --seed 101
    python benchmarks/check_thickness_exact.py --device cuda --seconds 300
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
from scipy import ndimage as ndi

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "workflow"))
sys.path.insert(0, str(ROOT / "tests"))

from thickness_oracle import oracle_local_thickness  # noqa: E402
from volsweep import thickness as T  # noqa: E402
from volsweep.backend import to_numpy  # noqa: E402
from volsweep.thickness._numba import ROW_WINDOW  # noqa: E402
from volsweep.tiling import plan_tiles  # noqa: E402

SPACINGS = [0.65, 0.3, 0.7, 1.1, 1.3, 2.0, 1.0, 0.5, 0.8, 1.7, 0.25, 3.0, 0.45, 0.13, 2.6]
SCALES = [0.3, 0.65, 0.7, 1.1, 2.5]
KINDS = ("random", "smooth", "pores")


def draw_phase(rng, kind: str, shape) -> np.ndarray:
    if kind == "random":
        return rng.random(shape) < rng.uniform(0.3, 0.9)
    if kind == "smooth":
        f = ndi.gaussian_filter(rng.standard_normal(shape), rng.uniform(1, 3.5))
        return f > np.quantile(f, rng.uniform(0.2, 0.8))
    x = np.ones(shape, bool)
    count = int(rng.integers(1, 5))
    x[tuple(rng.integers(0, n, count) for n in shape)] = False
    return x


def draw_spacing(rng) -> tuple[float, float, float]:
    r = rng.random()
    if r < 0.3:
        return (float(rng.choice(SPACINGS)),) * 3
    if r < 0.8:
        return tuple(float(rng.choice(SPACINGS)) for _ in range(3))
    return tuple(round(float(rng.uniform(0.2, 3)), 2) for _ in range(3))


def chunked(phase, tile, spacing, device):
    r_max = T.max_inscribed_radius(phase, spacing=spacing, device=device)
    halo = T.thickness_halo(r_max, spacing)
    out = np.full(phase.shape, -1.0, np.float32)
    for t in plan_tiles(phase.shape, tile, halo):
        region, core = t.clipped(phase.shape)
        out[t.core] = to_numpy(T.local_thickness_core(phase[region], core, r_max,
                                                      spacing=spacing, device=device))
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=60.0, help="how long to draw cases")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--keep", type=Path, default=Path("mismatches"),
                   help="folder for the phases that mismatch")
    p.add_argument("--out", type=Path, help="JSON summary")
    a = p.parse_args(argv)
    rng = np.random.default_rng(a.seed)

    def lt(x, sp=(1, 1, 1)):
        return to_numpy(T.local_thickness(x, spacing=sp, device=a.device))

    counts = {"cases": 0, "scale_checks": 0, "chunk_checks": 0}
    bad = []
    start = last = time.perf_counter()
    while time.perf_counter() - start < a.seconds:
        case = counts["cases"]
        shape = tuple(int(v) for v in rng.integers(3, 30 if case % 3 == 0 else 22, 3))
        if case % 5 == 4:  # rows long enough for the max painter's fixed row window
            shape = shape[:2] + (int(rng.integers(ROW_WINDOW, ROW_WINDOW + 16)),)
        kind = KINDS[int(rng.integers(0, 3))]
        phase = draw_phase(rng, kind, shape)
        if phase.all() or not phase.any():
            continue
        spacing = draw_spacing(rng)
        counts["cases"] += 1
        got = lt(phase, spacing)
        pairs = [("oracle", got, oracle_local_thickness(phase, spacing))]
        if spacing[0] == spacing[1] == spacing[2]:
            s = float(rng.choice(SCALES))
            counts["scale_checks"] += 1
            pairs.append(("scale", lt(phase, (s, s, s)), np.float32(s) * lt(phase)))
        if case % 4 == 0:
            tile = tuple(int(v) for v in rng.integers(2, 9, 3))
            counts["chunk_checks"] += 1
            pairs.append(("chunks", chunked(phase, tile, spacing, a.device), got))
        for name, mine, want in pairs:
            if np.array_equal(mine, want):
                continue
            a.keep.mkdir(parents=True, exist_ok=True)
            path = a.keep / f"{name}_{a.seed}_{case}_{'_'.join(map(str, spacing))}.npy"
            np.save(path, phase)
            bad.append({"check": name, "shape": shape, "kind": kind, "spacing": spacing,
                        "voxels": int((mine != want).sum()), "phase": str(path)})
            print(f"MISMATCH {name}: shape {shape}, {kind}, spacing {spacing}, "
                  f"{bad[-1]['voxels']} voxels; phase saved to {path}", flush=True)
        if time.perf_counter() - last > 30:
            last = time.perf_counter()
            print(f"{last - start:5.0f} s: {counts['cases']} cases, {len(bad)} mismatches",
                  flush=True)
    summary = {**counts, "mismatches": len(bad), "seed": a.seed, "device": a.device,
               "seconds": a.seconds, "failures": bad}
    print(f"{counts['cases']} cases ({counts['scale_checks']} scale-invariance and "
          f"{counts['chunk_checks']} chunked checks): {len(bad)} mismatches")
    if a.out:
        a.out.write_text(json.dumps(summary, indent=1))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
