"""A deterministic synthetic volume: straight cylindrical fibres and spherical pores.

Fibre directions use the wavelet's convention (``docs/definitions.md``),
u(θ, φ) = (cos φ cos θ, −sin θ, sin φ cos θ), so a sweep of the demo should
find them again.  Each fibre and pore is drawn only inside its bounding
window, so the cost grows with the shapes' volume, not with the volume's.
Shapes and noise are drawn on threads; the noise comes from one seeded stream
per slab of the volume, so the result depends on the seed and shape only.
"""

from __future__ import annotations

import functools
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from volsweep.backend import cpu_threads
from volsweep.engine.wavelet import axis_vector


def fibre_direction(theta: float, phi: float) -> np.ndarray:
    """Unit axis u(θ, φ) of a fibre, components first: shape ``(3, ...)``.

    The same axis as :func:`volsweep.engine.wavelet.axis_vector`, whose components are last.

    Examples
    --------
    >>> fibre_direction(0.0, 0.0)
    array([ 1., -0.,  0.])
    """
    return np.moveaxis(axis_vector(theta, phi), -1, 0)


def _window(lo, hi, spacing, n):
    """Voxel indices ``[start, stop)`` whose centres can lie in ``[lo, hi]``."""
    return max(0, int(np.floor(lo / spacing))), min(n, int(np.ceil(hi / spacing)) + 1)


def _draw_fibre(phase, spacing, c, u, radius):
    """Set the voxels whose centre is closer than ``radius`` to the line ``c + t·u``.

    Walks the axis along which u is steepest; in each of its planes the fibre's
    section lies within ``radius / |u_k|`` of the line's crossing point.
    """
    shape = phase.shape
    k = int(np.argmax(np.abs(u)))
    others = [a for a in range(3) if a != k]
    half = radius / abs(u[k])
    ik = np.arange(shape[k])
    t = (ik * spacing[k] - c[k]) / u[k]
    centre = c[None, :] + t[:, None] * u[None, :]  # crossing point in each plane
    widths = [int(np.ceil(2 * half / spacing[a])) + 2 for a in others]
    idx = [None, None, None]
    idx[k] = ik[:, None, None]
    inside = np.ones((shape[k], 1, 1), dtype=bool)
    for n, (a, w) in enumerate(zip(others, widths)):
        start = np.floor((centre[:, a] - half) / spacing[a]).astype(np.int64)
        j = start[:, None] + np.arange(w)[None, :]
        j = j[:, :, None] if n == 0 else j[:, None, :]
        inside = inside & (j >= 0) & (j < shape[a])
        idx[a] = np.clip(j, 0, shape[a] - 1)
    idx = np.broadcast_arrays(*idx)
    d = [idx[a] * spacing[a] - c[a] for a in range(3)]
    along = d[0] * u[0] + d[1] * u[1] + d[2] * u[2]
    dist2 = d[0] * d[0] + d[1] * d[1] + d[2] * d[2] - along * along
    hit = inside & (dist2 < radius ** 2)
    phase[idx[0][hit], idx[1][hit], idx[2][hit]] = True


def _draw_ball(phase, spacing, c, radius):
    box = [_window(c[a] - radius, c[a] + radius, spacing[a], phase.shape[a]) for a in range(3)]
    x, y, z = (np.arange(lo, hi, dtype=np.float64).reshape([-1 if k == a else 1 for k in range(3)])
               * spacing[a] - c[a] for a, (lo, hi) in enumerate(box))
    region = phase[tuple(slice(lo, hi) for lo, hi in box)]
    region[x ** 2 + y ** 2 + z ** 2 < radius * radius] = True  # only the ball's voxels: threads share phase


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
        Standard deviation of the additive Gaussian noise (float32 draws, one
        stream spawned from ``seed`` per slab of :data:`NOISE_SLAB_VOXELS`).
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
    spacing = np.asarray(spacing, dtype=np.float64)
    extent = np.array(shape, dtype=np.float64) * spacing
    axes = []  # (point, direction, radius) of every fibre
    for spec in fibres:
        u = fibre_direction(spec["theta"], spec["phi"])
        for _ in range(int(spec.get("count", 1))):
            axes.append((extent * (0.25 + 0.5 * rng.random(3)), u, float(spec["radius"])))
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
    phase = np.zeros(shape, dtype=bool)
    # Each shape only sets its own voxels (never reads and writes back others): drawn in any
    # order, on threads, the phase is their union.
    draws = [functools.partial(_draw_fibre, phase, spacing, c, u, r) for c, u, r in axes]
    draws += [functools.partial(_draw_ball, phase, spacing, c, r) for c, r in spheres]
    with ThreadPoolExecutor(max_workers=cpu_threads()) as pool:
        list(pool.map(lambda draw: draw(), draws))
        if noise <= 0:
            return phase.astype(np.float32)
        volume = np.empty(shape, dtype=np.float32)
        slabs = _noise_slabs(shape)
        streams = rng.spawn(len(slabs))
        list(pool.map(lambda k: _noisy(volume[slabs[k]], phase[slabs[k]], streams[k], noise),
                      range(len(slabs))))
    return volume


#: Voxels per noise slab: each slab draws from its own seeded stream, so the noise does not
#: depend on how many threads draw it.
NOISE_SLAB_VOXELS = 1 << 22


def _noise_slabs(shape) -> list:
    """Slabs along axis 0 of about :data:`NOISE_SLAB_VOXELS` voxels, fixed by the shape."""
    planes = max(1, NOISE_SLAB_VOXELS // max(1, shape[1] * shape[2]))
    return [slice(i, min(i + planes, shape[0])) for i in range(0, shape[0], planes)]


def _noisy(out, phase, stream, noise):
    """``out = noise · N(0, 1) + phase`` from ``stream``, in place."""
    stream.standard_normal(out=out, dtype=np.float32)
    out *= np.float32(noise)
    np.add(out, np.float32(1), out=out, where=phase)
