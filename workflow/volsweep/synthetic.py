"""A deterministic synthetic volume: straight cylindrical fibres and spherical pores.

Fibre directions use the wavelet's convention, u(θ, φ) = (cos φ cos θ,
−sin θ, sin φ cos θ), so a sweep of the demo should find them again.
"""

from __future__ import annotations

import numpy as np


def fibre_direction(theta: float, phi: float) -> np.ndarray:
    """Unit axis u(θ, φ) of DESIGN.md.

    Examples
    --------
    >>> fibre_direction(0.0, 0.0)
    array([ 1., -0.,  0.])
    """
    return np.array([np.cos(phi) * np.cos(theta), -np.sin(theta), np.sin(phi) * np.cos(theta)])


def _coords(shape, spacing):
    return [np.arange(n, dtype=np.float64).reshape([-1 if k == a else 1 for k in range(3)]) * s
            for a, (n, s) in enumerate(zip(shape, spacing))]


def synthetic_volume(shape, *, fibres=(), pores=(), seed=0, noise=0.05, spacing=(1.0, 1.0, 1.0)):
    """Fibres (value 1) and pores (value 1) on a background of 0, plus Gaussian noise.

    Parameters
    ----------
    shape : tuple of 3 int
    fibres : sequence of dict
        Each ``{"theta", "phi", "radius", "count"=1}``: ``count`` parallel
        cylinders of that radius (physical units) along u(θ, φ), through
        seeded random points of the volume's central half.
    pores : sequence of dict
        Each ``{"radius", "count"=1}``: spheres placed at seeded random
        positions, inside the volume and clear of the fibres and each other.
    seed : int
    noise : float
        Standard deviation of the additive Gaussian noise.
    spacing : tuple of 3 float

    Returns
    -------
    numpy.ndarray of float32

    Examples
    --------
    >>> v = synthetic_volume((20, 16, 12), fibres=[{"theta": 0, "phi": 0, "radius": 2}], noise=0)
    >>> v.shape, v.dtype, float(v.max())
    ((20, 16, 12), dtype('float32'), 1.0)
    """
    rng = np.random.default_rng(seed)
    shape = tuple(int(n) for n in shape)
    extent = np.array(shape, dtype=np.float64) * np.asarray(spacing, dtype=np.float64)
    x, y, z = _coords(shape, spacing)
    phase = np.zeros(shape, dtype=bool)
    axes = []  # (point, direction, radius) of every fibre
    for spec in fibres:
        u = fibre_direction(spec["theta"], spec["phi"])
        for _ in range(int(spec.get("count", 1))):
            c = extent * (0.25 + 0.5 * rng.random(3))
            dx, dy, dz = x - c[0], y - c[1], z - c[2]
            along = dx * u[0] + dy * u[1] + dz * u[2]
            dist2 = dx * dx + dy * dy + dz * dz - along * along
            phase |= dist2 < spec["radius"] ** 2
            axes.append((c, u, spec["radius"]))
    spheres = []
    for spec in pores:
        r = float(spec["radius"])
        if np.any(extent < 2 * (r + 1)):
            raise ValueError(f"pores: no room for a pore of radius={r} in shape={shape}")
        for _ in range(int(spec.get("count", 1))):
            for _attempt in range(1000):
                c = r + 1 + rng.random(3) * np.maximum(extent - 2 * (r + 1), 0)
                clear_fibres = all(
                    np.linalg.norm(np.cross(c - p, u)) > r + fr + 1 for p, u, fr in axes)
                clear_pores = all(np.linalg.norm(c - q) > r + qr + 1 for q, qr in spheres)
                if clear_fibres and clear_pores:
                    break
            else:
                raise ValueError(f"pores: no room for a pore of radius={r} in shape={shape}")
            spheres.append((c, r))
            phase |= (x - c[0]) ** 2 + (y - c[1]) ** 2 + (z - c[2]) ** 2 < r * r
    volume = phase.astype(np.float32)
    if noise > 0:
        volume += rng.normal(0.0, noise, size=shape).astype(np.float32)
    return volume
