"""Fibre volumes with a known orientation at every fibre voxel (tests and benchmarks).

``periodic_fibres``: straight cylinders along integer lattice directions of a box, so
that each cylinder closes on itself through the periodic boundary; ``mode="wrap"`` then
sees no boundary at all, and fast FFT lengths need no halo.  ``open_fibres``: the
same cylinders in an ordinary (non-periodic) box, as PoreSpy's ``cylinders`` draws them.
Both return the volume (fibres 1, background 0, Gaussian noise), the fibre mask and the
per-voxel unit axis (NaN off the fibres; the nearest fibre's axis where fibres cross).
"""

from __future__ import annotations

import itertools

import numpy as np


def lattice_direction(d):
    """Unit vector of an integer direction ``d`` (x, y, z)."""
    d = np.asarray(d, dtype=np.float64)
    return d / np.linalg.norm(d)


def angles_of(u):
    """(θ, φ) of the wavelet convention with u(θ, φ) = ±u (``volsweep.engine.wavelet.axis_vector``)."""
    u = np.asarray(u, dtype=np.float64)
    if u[0] < 0 or (u[0] == 0 and u[2] < 0):
        u = -u
    return float(-np.arcsin(np.clip(u[1], -1, 1))), float(np.arctan2(u[2], u[0]))


def axis_angle(u, v):
    """Angle between axes (u and −u the same), radians; broadcasts over leading axes."""
    c = np.abs(np.sum(np.asarray(u) * np.asarray(v), axis=-1))
    return np.arccos(np.clip(c, 0.0, 1.0))


def _cylinders(shape, families, radius, noise, seed, periodic):
    rng = np.random.default_rng(seed)
    shape = tuple(int(n) for n in shape)
    L = np.asarray(shape, dtype=np.float64)
    grid = np.stack(np.meshgrid(*[np.arange(n, dtype=np.float64) for n in shape], indexing="ij"), -1)
    best = np.full(shape, np.inf)
    axis = np.full(shape + (3,), np.nan)
    shifts = list(itertools.product(range(-2, 3), repeat=3)) if periodic else [(0, 0, 0)]
    for fam in families:
        u = lattice_direction(fam["direction"]) if "direction" in fam else np.asarray(fam["u"], float)
        for _ in range(int(fam["count"])):
            c = L * rng.random(3)
            for k in shifts:
                r = grid - c - np.asarray(k) * L
                along = r @ u
                d2 = np.einsum("...i,...i->...", r, r) - along * along
                closer = d2 < best
                best[closer] = d2[closer]
                axis[closer] = u
    mask = best < radius * radius
    axis[~mask] = np.nan
    vol = mask.astype(np.float32)
    if noise > 0:
        vol += rng.normal(0.0, noise, size=shape).astype(np.float32)
    return vol, mask, axis


def periodic_fibres(shape, families, *, radius, noise=0.3, seed=0):
    """Periodic cylinders; ``families``: ``[{"direction": (p, q, r), "count": n}, ...]``.

    ``direction`` is an integer vector in units of the box's axes, so a box of equal
    sides (or sides in the same ratios) makes every cylinder periodic.

    Examples
    --------
    >>> v, m, u = periodic_fibres((16, 16, 16), [{"direction": (1, 0, 0), "count": 1}], radius=2, noise=0)
    >>> bool(m.any()), np.allclose(u[m], [1, 0, 0])
    (True, True)
    """
    return _cylinders(shape, families, radius, noise, seed, True)


def open_fibres(shape, families, *, radius, noise=0.3, seed=0):
    """Cylinders through random points of an ordinary box (``families`` as :func:`periodic_fibres`,
    or with ``"u"``: any unit axis)."""
    return _cylinders(shape, families, radius, noise, seed, False)
