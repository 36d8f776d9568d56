"""The stretched Mexican-hat wavelet: sampled kernel, sampled spectrum, halos.

Definitions (docs/definitions.md): for the unit axis ``u(θ, φ) = (cos φ cos θ, −sin θ,
sin φ cos θ)``, ``t = u·r``, scale ``a`` and elongation ``ξ``::

    q(r) = (|r|² − t²)/a² + t²/(aξ)²        ψ(r) = (3 − q) exp(−q/2)

With ``M = (I − uuᵀ)/a² + uuᵀ/(aξ)²`` we have ``q = rᵀMr`` and the continuous
Fourier transform (``∫ψ(r) e^{−iω·r} dr``) is

    Ψ(ω) = (2π)^{3/2} a³ ξ · p · exp(−p/2),    p = ωᵀM⁻¹ω = a²|ω|² + a²(ξ² − 1)(u·ω)².

The kernel that is convolved is ψ *sampled* at ``r = (i·sx, j·sy, k·sz)``; by
Poisson summation its DFT on an ``N``-periodic grid is the aliased sum

    K̂(k) = 1/(sx·sy·sz) · Σ_g Ψ(ω_k + 2π g / s),    ω_k = 2π k / (N s).

At ``a ≈ s`` the images ``g ≠ 0`` matter (a closed-form Ψ alone is wrong there).
Images are pruned with the bound ``p ≥ a_eff² |ω|²`` (``a_eff = a·min(ξ, 1)``):
a term whose bound is above ``p_cut`` is below ``ALIAS_TOL`` of the spectrum's
peak and is dropped.  Because the DFT above is the one of the kernel folded
onto the period, the spectrum is exact for kernels larger than the grid too.
"""

from __future__ import annotations

import math

import numpy as np

from volsweep.validation import check_positive, check_spacing  # noqa: F401 (re-exported)

#: Relative (to the spectrum's peak) size below which an aliased image is dropped.
ALIAS_TOL = 1e-8
#: Truncation of the reference kernel, in units of the Gaussian envelope (docs/definitions.md).
REFERENCE_TRUNCATE = 8.0
#: Default truncation of the engine's halo (q ≥ truncate² outside the halo box).
DEFAULT_TRUNCATE = 7.0


def _p_cut(tol: float = ALIAS_TOL) -> float:
    """Smallest p ≥ 2 with p·exp(−p/2) ≤ tol · max(p·exp(−p/2)) (= tol·2/e)."""
    target = tol * 2.0 / math.e
    lo, hi = 2.0, 2000.0
    for _ in range(200):  # bisection on the decreasing branch
        mid = 0.5 * (lo + hi)
        if mid * math.exp(-0.5 * mid) > target:
            lo = mid
        else:
            hi = mid
    return hi


P_CUT = _p_cut()


def axis_vector(theta, phi) -> np.ndarray:
    """Unit axis ``u(θ, φ)``, shape ``(..., 3)``.

    Examples
    --------
    >>> axis_vector(0.0, 0.0)
    array([ 1., -0.,  0.])
    """
    theta = np.asarray(theta, dtype=np.float64)
    phi = np.asarray(phi, dtype=np.float64)
    ct = np.cos(theta)
    return np.stack(np.broadcast_arrays(np.cos(phi) * ct, -np.sin(theta), np.sin(phi) * ct), axis=-1)


def axis_extent(a: float, xi, u) -> np.ndarray:
    """Per-axis half-width of the ellipsoid ``q = 1``: ``a·sqrt(1 + (ξ² − 1) u_d²)``.

    Outside the box ``|r_d| ≤ T · extent_d`` every point has ``q ≥ T²``
    (Cauchy–Schwarz: ``q ≥ r_d² / (M⁻¹)_dd``).
    """
    xi = np.asarray(xi, dtype=np.float64)[..., None]
    u = np.asarray(u, dtype=np.float64)
    return a * np.sqrt(1.0 + (xi * xi - 1.0) * u * u)


def halo_for(a: float, xi, theta, phi, spacing, truncate: float = DEFAULT_TRUNCATE) -> tuple[int, int, int]:
    """Halo in voxels per axis beyond which every kernel of the set has ``q ≥ truncate²``.

    The maximum over the outer product of ``theta``, ``phi`` and ``xi``.

    Examples
    --------
    >>> halo_for(1.0, [1.0], [0.0], [0.0], (1, 1, 2), truncate=7)
    (7, 7, 4)
    """
    sp = np.asarray(check_spacing(spacing))
    u = axis_vector(*np.meshgrid(np.asarray(theta, float), np.asarray(phi, float), indexing="ij"))
    u = u.reshape(-1, 1, 3)
    ext = axis_extent(a, np.asarray(xi, float).reshape(1, -1), u)  # (n_u, n_xi, 3)
    ext = ext.reshape(-1, 3).max(axis=0)
    # Small relative slack so that T·extent/s landing on an integer stays that integer.
    return tuple(int(math.ceil(truncate * e / s * (1 - 1e-12))) for e, s in zip(ext, sp))


def reference_halfwidth(a: float, xi: float, spacing) -> tuple[int, int, int]:
    """Half-width of the reference box: ``ceil(8·a·max(ξ, 1) / s)`` voxels per axis."""
    sp = check_spacing(spacing)
    r = REFERENCE_TRUNCATE * a * max(float(xi), 1.0)
    return tuple(int(math.ceil(r / s)) for s in sp)


def sample_kernel(a: float, theta: float, phi: float, xi: float, spacing=(1, 1, 1),
                  halfwidth=None, dtype=np.float64) -> np.ndarray:
    """ψ sampled on the box ``|i| ≤ halfwidth[0]`` etc., centred (shape ``2·hw + 1``).

    ``halfwidth`` defaults to the reference box (:func:`reference_halfwidth`).

    Examples
    --------
    >>> k = sample_kernel(1.0, 0.0, 0.0, 1.0, halfwidth=(2, 2, 2))
    >>> k.shape, float(k[2, 2, 2])
    ((5, 5, 5), 3.0)
    """
    sp = check_spacing(spacing)
    hw = reference_halfwidth(a, xi, sp) if halfwidth is None else tuple(int(h) for h in halfwidth)
    u = axis_vector(theta, phi)
    x, y, z = (np.arange(-h, h + 1, dtype=np.float64) * s for h, s in zip(hw, sp))
    x, y, z = x[:, None, None], y[None, :, None], z[None, None, :]
    t = u[0] * x + u[1] * y + u[2] * z
    r2 = x * x + y * y + z * z
    q = (r2 - t * t) / (a * a) + (t * t) / (a * xi) ** 2
    return ((3.0 - q) * np.exp(-0.5 * q)).astype(dtype, copy=False)


def wavelet_energy(a: float, xi, spacing=(1, 1, 1)) -> np.ndarray:
    """Σ ψ² of the sampled kernel at θ = φ = 0 (``wavelet_energy`` of docs/definitions.md), per ξ.

    Summed over the box where ``q ≤ 8²`` can hold (the rest is below 1e-25 of it).

    Examples
    --------
    >>> float(wavelet_energy(2.0, [1.0])[0]) > 0
    True
    """
    sp = check_spacing(spacing)
    out = []
    u0 = axis_vector(0.0, 0.0)
    for x in np.atleast_1d(np.asarray(xi, dtype=np.float64)):
        ext = axis_extent(a, x, u0)
        hw = tuple(int(math.ceil(REFERENCE_TRUNCATE * e / s)) for e, s in zip(ext, sp))
        k = sample_kernel(a, 0.0, 0.0, x, sp, halfwidth=hw)
        out.append(float(np.sum(k * k)))
    return np.asarray(out)


def energy_weight(a: float, xi) -> np.ndarray:
    """``1 / sqrt(ξ² + 2a²)`` (the original ``energy_const``)."""
    xi = np.asarray(xi, dtype=np.float64)
    return 1.0 / np.sqrt(xi * xi + 2.0 * a * a)


def continuous_spectrum(omega, a: float, u, xi: float) -> np.ndarray:
    """Ψ(ω) of the continuous wavelet; ``omega`` has shape ``(..., 3)`` (rad per unit length)."""
    omega = np.asarray(omega, dtype=np.float64)
    w2 = np.sum(omega * omega, axis=-1)
    t = omega @ np.asarray(u, dtype=np.float64)
    p = a * a * w2 + a * a * (xi * xi - 1.0) * t * t
    return (2 * np.pi) ** 1.5 * a ** 3 * xi * p * np.exp(-0.5 * p)


def image_counts(a: float, xi: float, spacing, p_cut: float = P_CUT) -> tuple[int, int, int]:
    """Largest |g_d| per axis whose aliased images can matter.

    Image ``g`` of axis ``d`` is at distance ≥ ``(2|g| − 1) π / s_d`` from the
    cell, so it is dropped when ``a_eff · (2|g| − 1) π / s_d ≥ sqrt(p_cut)``.
    """
    a_eff = a * min(float(xi), 1.0)
    out = []
    for s in check_spacing(spacing):
        g = 0
        while a_eff * (2 * (g + 1) - 1) * math.pi / s < math.sqrt(p_cut):
            g += 1
        out.append(g)
    return tuple(out)


def spectrum_constants(a: float, xi: float, spacing, fft_shape, u, norm: float = 1.0) -> dict:
    """Scalars that define one kernel's spectrum on a grid (shared by every backend).

    ``norm`` multiplies the spectrum (the engine folds the inverse FFT's 1/N in here).
    """
    sp = check_spacing(spacing)
    return dict(
        a2=a * a,
        c=a * a * (xi * xi - 1.0),
        ae2=(a * min(float(xi), 1.0)) ** 2,
        pcut=P_CUT,
        scale=norm * (2 * np.pi) ** 1.5 * a ** 3 * xi / (sp[0] * sp[1] * sp[2]),
        dw=tuple(2 * np.pi / (n * s) for n, s in zip(fft_shape, sp)),  # ω per index step
        period=tuple(2 * np.pi / s for s in sp),  # image offset
        G=image_counts(a, xi, sp),
        u=tuple(float(v) for v in np.asarray(u, dtype=np.float64)),
    )


def _freq_index(n: int, half: bool) -> np.ndarray:
    """Signed DFT index: 0..n/2 for the rfft axis, else wrapped to [−n/2, n/2)."""
    if half:
        return np.arange(n // 2 + 1, dtype=np.float64)
    return np.fft.fftfreq(n, d=1.0 / n)


def sampled_spectrum(fft_shape, a: float, theta: float, phi: float, xi: float,
                     spacing=(1, 1, 1), norm: float = 1.0) -> np.ndarray:
    """DFT of the sampled kernel on the ``fft_shape`` grid, rfft layout (last axis halved).

    Real (ψ is even), float64.  Equals ``np.fft.rfftn`` of the kernel folded onto
    the grid, within ``ALIAS_TOL`` of its peak.

    Examples
    --------
    >>> s = sampled_spectrum((16, 16, 16), 2.0, 0.3, 0.1, 1.5)
    >>> s.shape
    (16, 16, 9)
    """
    u = axis_vector(theta, phi)
    k = spectrum_constants(a, xi, spacing, fft_shape, u, norm)
    w0 = [(_freq_index(n, d == 2) * dw) for d, (n, dw) in enumerate(zip(fft_shape, k["dw"]))]
    out = np.zeros((len(w0[0]), len(w0[1]), len(w0[2])), dtype=np.float64)
    gx, gy, gz = k["G"]
    for ix in range(-gx, gx + 1):
        wx = (w0[0] + ix * k["period"][0])[:, None, None]
        if np.all(k["ae2"] * wx * wx >= k["pcut"]):
            continue
        for iy in range(-gy, gy + 1):
            wy = (w0[1] + iy * k["period"][1])[None, :, None]
            if np.all(k["ae2"] * wy * wy >= k["pcut"]):
                continue
            for iz in range(-gz, gz + 1):
                wz = (w0[2] + iz * k["period"][2])[None, None, :]
                w2 = wx * wx + wy * wy + wz * wz
                t = u[0] * wx + u[1] * wy + u[2] * wz
                p = k["a2"] * w2 + k["c"] * t * t
                out += np.where(k["ae2"] * w2 < k["pcut"], p * np.exp(-0.5 * p), 0.0)
    return out * k["scale"]


def angle_values(grid: dict) -> np.ndarray:
    """Angles in radians of a grid spec (``sweep.theta``, ``sweep.phi``): ``{"num": n}`` gives ``k*pi/n``; ``{"values": [...]}``.

    Examples
    --------
    >>> angle_values({"num": 4})
    array([0.        , 0.78539816, 1.57079633, 2.35619449])
    """
    if "values" in grid:
        return np.asarray(grid["values"], dtype=np.float64)
    return np.arange(grid["num"], dtype=np.float64) * (math.pi / grid["num"])
