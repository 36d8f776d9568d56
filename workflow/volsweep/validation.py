"""Argument checks shared by the array cores; errors name the argument and its value."""

from __future__ import annotations

import math

import numpy as np


def check_positive(name: str, value) -> np.ndarray:
    """``value`` as a float64 array, raising a ValueError naming ``name`` unless all finite and > 0.

    Examples
    --------
    >>> check_positive("xi", [0.5, 2])
    array([0.5, 2. ])
    """
    arr = np.asarray(value, dtype=np.float64)
    if arr.size == 0 or not np.all(np.isfinite(arr)) or np.any(arr <= 0):
        raise ValueError(f"{name} must be finite and > 0, got {name}={value!r}")
    return arr


def check_spacing(spacing) -> tuple[float, float, float]:
    """Spacing as three positive floats; ValueError/TypeError naming ``spacing`` otherwise.

    Examples
    --------
    >>> check_spacing((1, 2, 0.5))
    (1.0, 2.0, 0.5)
    """
    try:
        sp = tuple(float(s) for s in spacing)
    except (TypeError, ValueError):  # not iterable, or items that are not numbers ("abc")
        raise TypeError(f"spacing must be a sequence of 3 numbers, got spacing={spacing!r}") from None
    if len(sp) != 3 or not all(math.isfinite(s) and s > 0 for s in sp):
        raise ValueError(f"spacing must be 3 finite numbers > 0, got spacing={tuple(spacing)!r}")
    return sp
