"""Brute-force local thickness: the definition, painted ball by ball (test oracle).

Squared distances use the canonical float64 expression
``((di*sx)**2 + (dj*sy)**2) + (dk*sz)**2`` (exact integers at integer spacing),
with no pruning, no distance transform and no shortcut:

    D2(p) = min over background b of |p - b|^2      (inf without background)
    LT(x) = 2 sqrt(max{ D2(p) : p in X, |x - p|^2 < D2(p) })   for x in X
"""

from __future__ import annotations

import numpy as np


def canonical(d, spacing):
    """Canonical squared length of integer offsets ``d`` (..., 3)."""
    d = np.asarray(d, np.float64)
    x = d[..., 0] * float(spacing[0])
    y = d[..., 1] * float(spacing[1])
    z = d[..., 2] * float(spacing[2])
    return (x * x + y * y) + z * z


def oracle_d2(binary, spacing=(1, 1, 1)):
    binary = np.asarray(binary, bool)
    fg = np.argwhere(binary)
    bg = np.argwhere(~binary)
    d2 = np.zeros(binary.shape, np.float64)
    if bg.size == 0:
        d2[binary] = np.inf
        return d2
    for start in range(0, len(fg), 512):
        p = fg[start:start + 512]
        n = canonical(p[:, None, :] - bg[None, :, :], spacing).min(axis=1)
        d2[tuple(p.T)] = n
    return d2


def oracle_r2(binary, spacing=(1, 1, 1)):
    """max{D2(p) : |x - p|^2 < D2(p)} for every x (0 outside the phase)."""
    binary = np.asarray(binary, bool)
    d2 = oracle_d2(binary, spacing)
    fg = np.argwhere(binary)
    out = np.zeros(binary.shape, np.float64)
    flat = out[tuple(fg.T)]
    for p in fg:
        r2 = d2[tuple(p)]
        inside = canonical(fg - p, spacing) < r2
        flat[inside] = np.maximum(flat[inside], r2)
    out[tuple(fg.T)] = flat
    return out


def oracle_local_thickness(binary, spacing=(1, 1, 1)):
    r2 = oracle_r2(binary, spacing)
    return np.where(r2 > 0, 2.0 * np.sqrt(r2), 0.0).astype(np.float32)
