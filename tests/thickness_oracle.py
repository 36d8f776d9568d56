"""Brute-force local thickness in exact integer arithmetic: the definition, ball by ball.

The spacing is read as exact decimal fractions (``Fraction(repr(s))``: 0.65 is
13/20), brought to integer weights ``w`` over a common unit ``u`` (``s_i = u*w_i``),
and every squared length is the integer ``sum((d_i*w_i)**2)``.  No pruning, no
distance transform, no float comparison:

    D2(p) = min over background b of |p - b|^2      (inf without background)
    R2(x) = max{ D2(p) : p in X, |x - p|^2 < D2(p) }   for x in X, 0 elsewhere
    LT(x) = 2 u sqrt(R2(x))
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np


def exact_lattice(spacing):
    """(weights, unit): integer weights with gcd 1 and the exact rational unit."""
    fr = [Fraction(repr(float(s))) for s in spacing]
    den = math.lcm(*(f.denominator for f in fr))
    w = [int(f * den) for f in fr]
    g = math.gcd(*w)
    w = [v // g for v in w]
    return tuple(w), Fraction(g, den)


def _norms(d, w):
    d = np.asarray(d, np.int64)
    return ((d * np.asarray(w, np.int64)) ** 2).sum(-1)


def oracle_d2_int(binary, spacing=(1, 1, 1)):
    """Exact squared distances (int64, -1 for 'no background') and the lattice."""
    binary = np.asarray(binary, bool)
    w, unit = exact_lattice(spacing)
    fg = np.argwhere(binary)
    bg = np.argwhere(~binary)
    d2 = np.zeros(binary.shape, np.int64)
    if bg.size == 0:
        d2[binary] = -1
        return d2, w, unit
    for start in range(0, len(fg), 256):
        p = fg[start:start + 256]
        d2[tuple(p.T)] = _norms(p[:, None, :] - bg[None, :, :], w).min(axis=1)
    return d2, w, unit


def oracle_r2_int(binary, spacing=(1, 1, 1)):
    """Exact R2 (int64, 0 outside the phase) on the lattice of ``exact_lattice``."""
    binary = np.asarray(binary, bool)
    d2, w, unit = oracle_d2_int(binary, spacing)
    if (d2 < 0).any():
        raise ValueError("no background: unbounded")
    fg = np.argwhere(binary)
    flat = np.zeros(len(fg), np.int64)
    for p in fg:
        r2 = d2[tuple(p)]
        inside = _norms(fg - p, w) < r2
        np.maximum(flat, np.where(inside, r2, 0), out=flat)
    out = np.zeros(binary.shape, np.int64)
    out[tuple(fg.T)] = flat
    return out, w, unit


def oracle_d2(binary, spacing=(1, 1, 1)):
    """Physical squared distances (float64; exact values at integer spacing), inf without background."""
    d2, w, unit = oracle_d2_int(binary, spacing)
    out = d2.astype(np.float64) * float(unit * unit)
    out[d2 < 0] = np.inf
    return out


def oracle_local_thickness(binary, spacing=(1, 1, 1)):
    """float32(2*sqrt(R2)) * float32(unit) (the product in float32), 0 outside the phase."""
    r2, _, unit = oracle_r2_int(binary, spacing)
    return (2.0 * np.sqrt(r2.astype(np.float64))).astype(np.float32) * np.float32(float(unit))
