"""Reference for the sweep: float64 convolution with the sampled reference kernel.

The kernel is ψ sampled on the reference box of docs/definitions.md (half-width ``ceil(8·a·max(ξ, 1)/s)``
voxels per axis).  The boundary mode is an extension of the volume with a period
``P`` per axis — ``n`` for ``wrap``, ``2n`` for ``reflect`` (scipy.ndimage's
``d c b a | a b c d | d c b a`` repeats every ``2n``), and for ``constant`` the
volume zero-padded to ``P ≥ n + 2·h`` (with the kernel clipped to ``|m| ≤ n − 1``,
the only offsets that reach a voxel of the volume).  The convolution of that
periodic signal with the kernel is a circular convolution with the kernel *folded*
modulo ``P``, which is exact for kernels larger than the volume; it is evaluated
in float64 by FFT (rounding ~1e-15).  ``tests/test_sweep.py`` checks it against
``scipy.ndimage.convolve`` where a direct convolution is affordable.
"""

from __future__ import annotations

import numpy as np

from volsweep.engine.wavelet import reference_halfwidth, sample_kernel


def fold_kernel(kernel, period):
    """Fold a centred kernel (odd sizes) onto a grid of ``period``, offset 0 at index 0."""
    out = np.zeros(period)
    idx = [np.mod(np.arange(-(k // 2), k // 2 + 1), p) for k, p in zip(kernel.shape, period)]
    np.add.at(out, np.ix_(*idx), kernel)
    return out


def extend(volume, mode, halfwidth):
    """One period of the mode's extension (and its period)."""
    v = np.asarray(volume, dtype=np.float64)
    if mode == "wrap":
        return v
    if mode == "reflect":
        for ax in range(3):
            v = np.concatenate([v, np.flip(v, axis=ax)], axis=ax)
        return v
    if mode == "constant":
        pad = [(0, int(h)) for h in 2 * np.asarray(halfwidth)]
        return np.pad(v, pad)
    raise ValueError(f"mode={mode!r}")


def response(volume, a, theta, phi, xi, spacing=(1, 1, 1), mode="reflect", halfwidth=None):
    """G = V ⊛ ψ on the volume's voxels (float64), ψ on the reference box by default."""
    n = np.asarray(volume).shape
    hw = reference_halfwidth(a, xi, spacing) if halfwidth is None else tuple(halfwidth)
    if mode == "constant":  # offsets beyond n-1 never reach a voxel
        hw = tuple(min(h, m - 1) for h, m in zip(hw, n))
    kernel = sample_kernel(a, theta, phi, xi, spacing, halfwidth=hw)
    ext = extend(volume, mode, hw)
    kf = fold_kernel(kernel, ext.shape)
    g = np.fft.irfftn(np.fft.rfftn(ext) * np.fft.rfftn(kf), s=ext.shape, axes=(0, 1, 2))
    return g[: n[0], : n[1], : n[2]]


def stats_of(g) -> dict:
    g = np.asarray(g, dtype=np.float64)
    return {"energy": float(np.sum(g * g)), "std": float(g.std()), "max": float(g.max()),
            "mean": float(g.mean()), "min": float(g.min())}


def sweep_stats(volume, theta, phi, xi, a=1.0, spacing=(1, 1, 1), mode="reflect"):
    """Reference statistics over the (θ, φ, ξ) outer product: dict of (nθ, nφ, nξ) arrays."""
    out = {k: np.empty((len(theta), len(phi), len(xi))) for k in ("energy", "std", "max", "mean", "min")}
    for i, t in enumerate(theta):
        for j, p in enumerate(phi):
            for k, x in enumerate(xi):
                for name, val in stats_of(response(volume, a, t, p, x, spacing, mode)).items():
                    out[name][i, j, k] = val
    return out
