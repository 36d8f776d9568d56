"""Orientation products of a sweep: scale from thickness, fibre families, fabric tensor.

Definitions: ``docs/definitions.md``, section "Orientation".  The sweep's
``energy / wavelet_energy`` over (θ, φ) at one ξ ≠ 1 is a smooth function on the
sphere of axes (u and −u are one axis).  Its part above its minimum over the grid,
normalised to integrate to 1 over the sphere of axes (2π sr), is the *orientation
density*; fibre families are its local maxima, and the fabric tensor is its second
moment.  ξ = 1 is isotropic: its density, families and fabric are NaN.
"""

from __future__ import annotations

import math

import numpy as np

from . import wavelet as _wv

#: ``a = SCALE_PER_RADIUS · median fibre radius``.
#: Along its axis ψ integrates to a 2D Mexican hat ``(2 − ρ²/a²)·exp(−ρ²/2a²)``, whose
#: normalised response on a cylinder's axis peaks at ``a = √2·R``; but a fibre's spectrum
#: is largest at low frequencies, where tilting an elongated wavelet *raises* its response
#: (``p`` grows towards the peak of ``p·e^{−p/2}``), so the volume's energy points along
#: the fibres only when enough of their spectrum lies above the wavelet's peak,
#: ``a·|ω| > √2``.  And the local thickness of a digitised cylinder of radius R has a
#: median of 0.87–1.03 × 2R (R = 2–4).  Measured on periodic fibre volumes of radius 2–4
#: with noise σ = 0.3 (tests/test_orientation.py): with ``a = √2 × radius`` from the
#: thickness the dominant direction was 15–55° off for R ≤ 2.5 at ξ = 2; with
#: ``2.5 × radius`` the refined dominant direction was within 2.3° (half the 15° grid step
#: is 7.5°) and every fibre voxel's orientation within one grid step.
SCALE_PER_RADIUS = 2.5
#: ``a = MAP_SCALE_PER_RADIUS · median fibre radius`` for the per-voxel orientation map:
#: the transverse Mexican hat's matched scale (its response on a cylinder's axis peaks at
#: ``a = √2·R``), so that neighbouring and crossing fibres stay apart.  At the statistics'
#: scale the map merges them: measured (benchmarks/bench_orientation.py, radius 2.5, noise
#: σ = 0.3, 12 × 12 grid, σ_int = a) where two families cross at 60° ``a = 2.5·R`` put 70%
#: of the fibre voxels within one grid step, ``a = √2·R`` 93% (1.2·R 94%, 1.6·R 81%,
#: 1.8·R 69%); in a 64³ open box of six fibres 73% against 100% (mean extension).
MAP_SCALE_PER_RADIUS = math.sqrt(2.0)
#: Grid axes within this many cell widths of a peak enter its quadratic refinement.
REFINE_WIDTHS = 2.0
#: Points of the Fibonacci half-sphere that measure each grid direction's solid angle.
AREA_SAMPLES = 8192
#: Axes within this many typical cell widths (√(2π / number of axes)) are neighbours.
NEIGHBOUR_WIDTHS = 1.5
#: Votes are smoothed over the sphere with σ of this many cell widths before their maxima
#: are found: a voxel's vote lands on one of the few grid axes within a cell or so of its
#: truth, so one family's votes sit on grid axes up to ~2 cells apart.
VOTE_SMOOTHING_WIDTHS = 1.5
#: Families lighter than this fraction of the density are not reported.
MIN_FAMILY_WEIGHT = 0.05
#: Most families reported per ξ.
MAX_FAMILIES = 4


def scale_from_thickness(thickness, *, factor=SCALE_PER_RADIUS, statistic="median"):
    """The wavelet scale ``a`` for fibres of a local-thickness distribution.

    Parameters
    ----------
    thickness : xarray.Dataset
        From :func:`volsweep.thickness.distribution_from_counts` (or
        :func:`volsweep.thickness_distribution`): its ``median`` (or ``mean``) is a
        DIAMETER; the radius is half of it.
    factor : float
        ``a = factor · radius``; the default :data:`SCALE_PER_RADIUS` (2.5) is the one
        that makes the sweep's energy point along the fibres (see its derivation);
        :data:`MAP_SCALE_PER_RADIUS` (√2) suits the per-voxel map of a bounded volume.
    statistic : {'median', 'mean'}

    Returns
    -------
    float

    Examples
    --------
    >>> import xarray as xr
    >>> scale_from_thickness(xr.Dataset({"median": 4.0}))
    5.0
    """
    if statistic not in ("median", "mean"):
        raise ValueError(f"statistic must be 'median' or 'mean', got statistic={statistic!r}")
    if statistic not in thickness:
        raise KeyError(f"thickness has no '{statistic}' variable (a thickness distribution Dataset "
                       f"from volsweep.thickness.distribution_from_counts is needed)")
    diameter = float(np.asarray(thickness[statistic]))
    if not (math.isfinite(diameter) and diameter > 0):
        raise ValueError(f"thickness {statistic} must be finite and > 0 to derive a, got {diameter!r} "
                         "(is the phase empty?)")
    factor = float(factor)
    if not (math.isfinite(factor) and factor > 0):
        raise ValueError(f"factor must be finite and > 0, got factor={factor!r}")
    return factor * diameter / 2.0


def auto_scales(thickness, *, statistic="median"):
    """``(a, orientation_a)`` for :func:`volsweep.engine.sweep` from a local-thickness
    distribution (the config's ``a: auto``).

    ``a`` is the sorted scales ``[MAP_SCALE_PER_RADIUS·r, SCALE_PER_RADIUS·r]`` (r half the
    median thickness): the statistics and the dominant direction at both, the per-voxel
    map at ``orientation_a = MAP_SCALE_PER_RADIUS·r`` only.

    Examples
    --------
    >>> import xarray as xr
    >>> a, a_map = auto_scales(xr.Dataset({"median": 4.0}))
    >>> [round(v, 4) for v in a], round(a_map, 4)
    ([2.8284, 5.0], 2.8284)
    """
    a_stats = float(scale_from_thickness(thickness, statistic=statistic))
    a_map = float(scale_from_thickness(thickness, factor=MAP_SCALE_PER_RADIUS, statistic=statistic))
    return sorted({a_map, a_stats}), a_map


# ----------------------------------------------------------------------------- sphere geometry
def _fibonacci_axes(n: int) -> np.ndarray:
    """``n`` near-uniform axes on the half-sphere (deterministic)."""
    i = np.arange(n) + 0.5
    z = i / n  # cos of the polar angle, (0, 1]: one of ±u
    r = np.sqrt(1.0 - z * z)
    g = math.pi * (3.0 - math.sqrt(5.0)) * i
    return np.stack([r * np.cos(g), r * np.sin(g), z], axis=1)


class SphereGrid:
    """The distinct axes of a (θ, φ) grid, their solid angles and neighbours.

    ``index[k]`` is, for grid point k (C order over (θ, φ)), its distinct axis; ``area``
    the solid angle (sr) of each axis's cell on the half-sphere (2π in all), from the
    nearest axis of :data:`AREA_SAMPLES` Fibonacci points; ``neighbours`` the axes within
    :data:`NEIGHBOUR_WIDTHS` typical cell widths.
    """

    def __init__(self, theta, phi):
        t, p = np.meshgrid(np.asarray(theta, float), np.asarray(phi, float), indexing="ij")
        u = _wv.axis_vector(t.ravel(), p.ravel())
        key = np.round(u, 9) + 0.0
        first = np.argmax(np.abs(key) > 1e-9, axis=1)
        key *= np.sign(key[np.arange(len(key)), first])[:, None]
        _, first_idx, inv = np.unique(np.round(key, 9) + 0.0, axis=0, return_index=True, return_inverse=True)
        order = np.argsort(first_idx)
        rank = np.empty_like(order)
        rank[order] = np.arange(len(order))
        self.index = rank[inv.ravel()]
        self.rep = first_idx[order]
        self.u = u[self.rep]
        samples = _fibonacci_axes(AREA_SAMPLES)
        nearest = np.argmax(np.abs(samples @ self.u.T), axis=1)
        self.area = np.bincount(nearest, minlength=len(self.u)) * (2 * math.pi / AREA_SAMPLES)
        cos = np.clip(np.abs(self.u @ self.u.T), 0.0, 1.0)
        self.angle = np.arccos(cos)
        width = math.sqrt(2 * math.pi / len(self.u))
        self.width = width
        self.neighbours = [np.flatnonzero((row <= NEIGHBOUR_WIDTHS * width) & (np.arange(len(row)) != i))
                           for i, row in enumerate(self.angle)]

    def smooth(self, mass):
        """``mass`` spread over the sphere by a Gaussian of the axis angle, σ = VOTE_SMOOTHING_WIDTHS cells."""
        k = np.exp(-0.5 * (self.angle / (VOTE_SMOOTHING_WIDTHS * self.width)) ** 2)
        return self.area * (k @ mass) / (k @ self.area)


def _principal_axis(u, w):
    m = np.einsum("k,ki,kj->ij", w, u, u)
    vals, vecs = np.linalg.eigh(m)
    return vecs[:, -1]


def _mass(values, sphere, baseline):
    v = np.full(len(sphere.u), -np.inf)
    np.maximum.at(v, sphere.index, np.asarray(values, float).ravel())
    if baseline:  # an energy map: a density over the sphere
        f = v - v.min()
        return f, f * sphere.area
    mass = np.maximum(v, 0.0)  # votes: already a mass per grid direction
    return mass / sphere.area, mass


def families(values, sphere: SphereGrid, *, min_weight=MIN_FAMILY_WEIGHT, max_families=MAX_FAMILIES,
             baseline=True):
    """Fibre families of one (θ, φ) map of ``energy / wavelet_energy``.

    Returns (axis (n, 3), weight (n,), spread (n,) in radians), heaviest first.  The density
    ``f`` (values above their minimum) has a local maximum at an axis whose ``f`` beats every
    neighbour's (ties to the lower index); every axis climbs to one maximum by steepest
    ascent (its basin).  Weight: the basin's share of ∫f; axis: principal axis of the
    basin's points at ≥ half the peak, weighted by f·area; spread: the RMS angle of the
    basin to that axis, weighted by f·area.  ``baseline``: f = values − min (an energy
    map, a density); else the values are masses (votes) and f = values / area.
    """
    f, mass = _mass(values, sphere, baseline)
    total = mass.sum()
    if not (total > 0):
        return np.zeros((0, 3)), np.zeros(0), np.zeros(0)
    if not baseline:  # votes sit on the few grid axes nearest each voxel's truth: smooth them
        f = sphere.smooth(mass) / sphere.area
    up = np.arange(len(f))
    for i, nb in enumerate(sphere.neighbours):
        if len(nb):
            j = nb[np.argmax(f[nb])]
            if f[j] > f[i] or (f[j] == f[i] and j < i):
                up[i] = j
    top = up.copy()
    for _ in range(len(f)):
        nxt = up[top]
        if np.array_equal(nxt, top):
            break
        top = nxt
    out = []
    for m in np.flatnonzero(up == np.arange(len(f))):
        basin = top == m
        w = mass[basin].sum() / total
        if w < min_weight:
            continue
        core = basin & (f >= 0.5 * f[m])
        ax = _principal_axis(sphere.u[core], mass[core])
        ang = np.arccos(np.clip(np.abs(sphere.u[basin] @ ax), 0, 1))
        spread = math.sqrt(np.sum(mass[basin] * ang * ang) / max(mass[basin].sum(), 1e-300))
        out.append((w, ax, spread))
    out.sort(key=lambda r: -r[0])
    out = out[:max_families]
    return (np.array([r[1] for r in out]).reshape(-1, 3), np.array([r[0] for r in out]),
            np.array([r[2] for r in out]))


def fabric(values, sphere: SphereGrid, *, baseline=True):
    """Fabric tensor ``∫ f·uuᵀ dΩ / ∫ f dΩ`` of the density of one map; (tensor, eigenvalues desc,
    eigenvectors as rows, degree of anisotropy ``1 − λ_min/λ_max``)."""
    _, mass = _mass(values, sphere, baseline)
    if not (mass.sum() > 0):
        nan = np.full((3, 3), np.nan)
        return nan, np.full(3, np.nan), nan.copy(), np.nan
    t = np.einsum("k,ki,kj->ij", mass, sphere.u, sphere.u) / mass.sum()
    vals, vecs = np.linalg.eigh(t)
    vals, vecs = vals[::-1], vecs[:, ::-1].T
    vecs = vecs * np.where(vecs[np.arange(3), np.argmax(np.abs(vecs), axis=1)] < 0, -1.0, 1.0)[:, None]
    return t, vals, vecs, float(1.0 - vals[-1] / vals[0])


def angles_of_axis(u):
    """(θ, φ) with ``axis_vector(θ, φ) = ±u``, θ in [−π/2, π/2], φ in (−π, π]."""
    u = np.asarray(u, float)
    if u[0] < 0 or (u[0] == 0 and u[2] < 0):
        u = -u
    return float(-math.asin(max(-1.0, min(1.0, u[1])))), float(math.atan2(u[2], u[0]))


def density(values, sphere: SphereGrid, *, baseline=True) -> np.ndarray:
    """The orientation density (sr⁻¹) at every grid point of one map: ``f / ∫f dΩ``."""
    f, _ = _mass(values, sphere, baseline)
    total = float(np.sum(f * sphere.area))
    if not (total > 0):
        return np.full(np.shape(values), np.nan)
    return (f / total)[sphere.index].reshape(np.shape(values))


#: Voxels per slab of :func:`votes_from_map` (bounds its int and float64 temporaries).
VOTE_SLAB_VOXELS = 1 << 24


def votes_from_map(weight, indices, grid_shape) -> np.ndarray:
    """Orientation votes: Σ of ``weight`` over the voxels whose orientation is each grid point.

    ``indices``: the per-voxel grid indices, one array per grid axis in the grid's order
    (``argmax_a`` first when there is an ``a`` axis, then ``argmax_theta``, ``argmax_phi``,
    ``argmax_xi``); ``weight``: per voxel, e.g. ``local_energy_max``.  Works on a merged
    orientation map as well as on one sweep's (float64, shape ``grid_shape``).

    Examples
    --------
    >>> votes_from_map(np.array([1.0, 2.0, 3.0]), [np.array([0, 1, 1]), np.array([0, 0, 0])], (2, 1))
    array([[1.],
           [5.]])
    """
    size = int(np.prod(grid_shape))
    itype = np.int32 if size < 2**31 else np.int64
    strides = [int(np.prod(grid_shape[k + 1:])) for k in range(len(grid_shape))]
    weight = np.asarray(weight)
    out = np.zeros(size)
    plane = max(1, int(np.prod(weight.shape[1:])))
    step = max(1, VOTE_SLAB_VOXELS // plane)
    for x0 in range(0, max(1, weight.shape[0]), step):  # x-slabs, summed in order
        flat = np.zeros(weight[x0:x0 + step].shape, itype)
        for ix, st in zip(indices, strides):
            flat += np.asarray(ix[x0:x0 + step], itype) * itype(st)
        out += np.bincount(flat.ravel(), weights=np.asarray(weight[x0:x0 + step], np.float64).ravel(),
                           minlength=size)
    return out.reshape(grid_shape)


def refine_peak(values, sphere: SphereGrid, *, widths=REFINE_WIDTHS) -> np.ndarray:
    """Sub-grid axis of the largest value of one (θ, φ) map.

    Least-squares fit of ``uᵀAu`` (the quadratic forms on the sphere of axes, six
    coefficients) to the values at the grid axes within ``widths`` cell widths of the
    largest one; the refined axis is A's principal eigenvector.  Falls back to the grid
    axis where too few axes are near (fewer than seven).

    Examples
    --------
    >>> th = np.arange(12) * np.pi / 12
    >>> sphere = SphereGrid(th, th)
    >>> truth = np.array([0.5, 0.7, 0.3]) / np.linalg.norm([0.5, 0.7, 0.3])
    >>> t, p = np.meshgrid(th, th, indexing="ij")
    >>> m = (_wv.axis_vector(t, p) @ truth) ** 8
    >>> bool(np.degrees(np.arccos(abs(refine_peak(m, sphere) @ truth))) < 1.0)
    True
    """
    v = np.full(len(sphere.u), -np.inf)
    np.maximum.at(v, sphere.index, np.asarray(values, float).ravel())
    i = int(np.argmax(v))
    sel = np.flatnonzero(sphere.angle[i] <= widths * sphere.width)
    if len(sel) < 7:
        return sphere.u[i].copy()
    u, y = sphere.u[sel], v[sel]
    X = np.stack([u[:, 0] ** 2, u[:, 1] ** 2, u[:, 2] ** 2, 2 * u[:, 0] * u[:, 1], 2 * u[:, 0] * u[:, 2],
                  2 * u[:, 1] * u[:, 2]], axis=1)
    c, *_ = np.linalg.lstsq(X, y - y.mean(), rcond=None)
    A = np.array([[c[0], c[3], c[4]], [c[3], c[1], c[5]], [c[4], c[5], c[2]]])
    axis = np.linalg.eigh(A)[1][:, -1]
    return axis if abs(axis @ sphere.u[i]) > math.cos(widths * sphere.width) else sphere.u[i].copy()
