"""Phase selection from a streamed histogram: automatic thresholds and phase-fraction checks.

``thickness.threshold`` is a number, or the name of a method of
:mod:`skimage.filters` applied to the volume's histogram: ``otsu``, ``li``,
``yen``.  The histogram is streamed from the store block by block (never the
whole volume in memory): one pass for the range, one for the counts.

Examples
--------
>>> import numpy as np
>>> v = np.zeros((20, 20, 20), np.float32); v[5:15] = 1000.0
>>> 0 < resolve_threshold(v, "otsu") < 1000
True
"""

from __future__ import annotations

import logging
import math
import numbers

import numpy as np

log = logging.getLogger("volsweep")

#: Automatic threshold methods (names of :mod:`skimage.filters` functions without ``threshold_``).
METHODS = ("otsu", "li", "yen")
#: Bins of the histogram the methods see.
DEFAULT_BINS = 256
#: Bytes of voxels read at once.
BLOCK_BYTES = 64 << 20
#: A phase below this fraction or above ``HIGH`` of the volume is reported.
LOW, HIGH = 0.01, 0.95


class PhaseError(ValueError):
    """The selected phase is empty or fills the volume; the message names the volume and the rule."""


def _blocks(array, block_bytes=BLOCK_BYTES):
    from volsweep.io.store import block_shape_for_budget
    from volsweep.tiling import plan_tiles

    shape = tuple(int(n) for n in array.shape)
    align = tuple(getattr(array, "shards", None) or getattr(array, "chunks", None) or shape)
    align = tuple(int(a) for a in align) if len(align) == len(shape) else shape
    block = block_shape_for_budget(shape, align, 8, block_bytes)
    for tile in plan_tiles(shape, block):
        yield np.asarray(array[tile.core])


def value_range(array, *, block_bytes=BLOCK_BYTES) -> tuple[float, float]:
    """(min, max) of an array, read block by block.

    Examples
    --------
    >>> value_range(np.arange(24.0).reshape(2, 3, 4))
    (0.0, 23.0)
    """
    lo, hi = math.inf, -math.inf
    for b in _blocks(array, block_bytes):
        lo, hi = min(lo, float(b.min())), max(hi, float(b.max()))
    return lo, hi


def streamed_histogram(array, *, bins=DEFAULT_BINS, value_range_=None, block_bytes=BLOCK_BYTES):
    """Counts (int64) and bin centres (float64) of an array's values, read block by block.

    Examples
    --------
    >>> counts, centres = streamed_histogram(np.array([[[0.0, 1.0], [1.0, 1.0]]]), bins=2)
    >>> counts.tolist(), centres.tolist()
    ([1, 3], [0.25, 0.75])
    """
    lo, hi = value_range_ if value_range_ is not None else value_range(array, block_bytes=block_bytes)
    if hi <= lo:
        hi = lo + 1.0
    counts = np.zeros(int(bins), np.int64)
    for b in _blocks(array, block_bytes):
        counts += np.histogram(b, bins=int(bins), range=(lo, hi))[0]
    edges = np.linspace(lo, hi, int(bins) + 1)
    return counts, 0.5 * (edges[:-1] + edges[1:])


def _threshold_li(counts, centres) -> float:
    """Li's minimum cross-entropy threshold on a histogram (the iteration of skimage's ``threshold_li``)."""
    shift = centres[0]
    step = centres[1] - centres[0] if len(centres) > 1 else 1.0
    x = centres - shift + step  # strictly positive, as Li's cross entropy needs
    w = counts.astype(np.float64)
    t = float(np.sum(x * w) / np.sum(w))
    tol = 0.5 * float(x[1] - x[0]) if len(x) > 1 else 1e-9
    for _ in range(1000):
        back, fore = x <= t, x > t
        if not back.any() or not fore.any() or w[back].sum() == 0 or w[fore].sum() == 0:
            break
        mb = np.sum(x[back] * w[back]) / w[back].sum()
        mf = np.sum(x[fore] * w[fore]) / w[fore].sum()
        new = float((mf - mb) / (np.log(mf) - np.log(mb)))
        if abs(new - t) < tol:
            t = new
            break
        t = new
    return t - step + shift


def threshold_from_histogram(method: str, counts, centres) -> float:
    """The ``method`` threshold of a histogram (``otsu``, ``li``, ``yen``)."""
    from skimage import filters

    if method == "otsu":
        return float(filters.threshold_otsu(hist=(counts, centres)))
    if method == "yen":
        return float(filters.threshold_yen(hist=(counts, centres)))
    if method == "li":
        return float(_threshold_li(np.asarray(counts), np.asarray(centres, dtype=np.float64)))
    raise ValueError(f"threshold method must be one of {METHODS}, got {method!r}")


def resolve_threshold(store_or_array, threshold, *, bins=DEFAULT_BINS, name="volume") -> float:
    """A numeric threshold: ``threshold`` itself, or a method's threshold of the streamed histogram.

    Parameters
    ----------
    store_or_array : array-like
        A Zarr array, a :class:`volsweep.io.readers.Volume` or a NumPy array.
    threshold : float or {'otsu', 'li', 'yen'}
        A number is returned as a float.
    bins : int
        Histogram bins the method sees.
    name : str
        The volume, for messages.

    Raises
    ------
    PhaseError
        The volume has a single value (no threshold separates anything).

    Examples
    --------
    >>> v = np.concatenate([np.full((4, 4, 4), 100.0), np.full((4, 4, 4), 300.0)])
    >>> 100 < resolve_threshold(v, "otsu") < 300, resolve_threshold(v, 0.5)
    (True, 0.5)
    """
    if isinstance(threshold, numbers.Real) and not isinstance(threshold, bool):
        return float(threshold)
    if threshold not in METHODS:
        raise ValueError(f"{name}: threshold must be a number or one of {', '.join(METHODS)}, "
                         f"got {threshold!r}")
    lo, hi = value_range(store_or_array)
    if not hi > lo:
        raise PhaseError(f"{name}: every voxel is {lo:g}: no {threshold} threshold separates a "
                         "phase (an all-constant volume)")
    counts, centres = streamed_histogram(store_or_array, bins=bins, value_range_=(lo, hi))
    t = threshold_from_histogram(threshold, counts, centres)
    log.info("%s: %s threshold %.6g (histogram of %d bins over [%g, %g])", name, threshold, t, bins, lo, hi)
    return t


def phase_fraction(array, *, threshold=None, label=None, invert=False) -> float:
    """Fraction of voxels in the phase ``> threshold`` (or ``== label``), streamed.

    Examples
    --------
    >>> phase_fraction(np.arange(10.0).reshape(1, 2, 5), threshold=6.5)
    0.3
    """
    n = total = 0
    for b in _blocks(array):
        phase = b > threshold if threshold is not None else b == label
        n += int(np.count_nonzero(~phase if invert else phase))
        total += b.size
    return n / total


def _rule(threshold, label, invert) -> str:
    rule = f"volume > {threshold:g}" if threshold is not None else f"volume == {label!r}"
    return f"not ({rule})" if invert else rule


def phase_fraction_warning(fraction: float, name: str, *, threshold=None, label=None, invert=False,
                           low=LOW, high=HIGH) -> str | None:
    """A warning naming the volume when the phase is below ``low`` or above ``high`` of it; None else.

    Raises :class:`PhaseError` when the phase is empty or the whole volume
    (local thickness would be meaningless).  The warning is also logged.

    Examples
    --------
    >>> phase_fraction_warning(0.9999997, "sample1", threshold=0.5).split(",")[0]
    'volumes.sample1: the phase (volume > 0.5) is 99.99997% of the volume'
    """
    rule = _rule(threshold, label, invert)
    if fraction <= 0:
        raise PhaseError(f"volumes.{name}: the selected phase ({rule}) is empty; choose another "
                         "thickness.threshold (e.g. otsu) or label")
    if fraction >= 1:
        raise PhaseError(f"volumes.{name}: the selected phase ({rule}) fills the whole volume; choose "
                         "another thickness.threshold (e.g. otsu) or label")
    if low <= fraction <= high:
        return None
    msg = (f"volumes.{name}: the phase ({rule}) is {100 * fraction:.7g}% of the volume, "
           f"{'below' if fraction < low else 'above'} {100 * (low if fraction < low else high):g}%; "
           "check thickness.threshold (otsu picks one from the histogram) and thickness.invert")
    log.warning("%s", msg)
    return msg


def check_phase(array, name: str, *, threshold=None, label=None, invert=False, bins=DEFAULT_BINS) -> dict:
    """Resolve the threshold, measure the phase fraction and warn or refuse; the phase rule as a dict.

    Returns ``{"threshold": float | None, "label": ..., "invert": ..., "phase_fraction": f,
    "warning": str | None}``, all JSON-serialisable, for the thickness step to record.

    Examples
    --------
    >>> v = np.zeros((10, 10, 10)); v[:3] = 5.0
    >>> r = check_phase(v, "v", threshold="otsu")
    >>> round(r["phase_fraction"], 2), r["warning"] is None
    (0.3, True)
    """
    t = None if threshold is None else resolve_threshold(array, threshold, bins=bins, name=f"volumes.{name}")
    fraction = phase_fraction(array, threshold=t, label=label, invert=invert)
    warning = phase_fraction_warning(fraction, name, threshold=t, label=label, invert=invert)
    return {"threshold": t, "threshold_method": threshold if isinstance(threshold, str) else None,
            "label": label, "invert": bool(invert), "phase_fraction": fraction, "warning": warning}


def dtype_phase_problem(dtype, *, threshold=None, label=None, invert=False) -> str | None:
    """Why a numeric threshold or label selects nothing or everything for every volume of ``dtype``.

    Known from the dtype's range alone (before any voxel is read): e.g. a
    threshold at or above 255 on uint8 selects nothing.  None when it can select
    a proper phase.  Ingest keeps raw values, so the dtype's range is the volume's.

    Examples
    --------
    >>> dtype_phase_problem(np.uint8, threshold=300)
    'selects nothing: uint8 values are at most 255'
    >>> dtype_phase_problem(np.uint16, threshold=0.5) is None
    True
    """
    dt = np.dtype(dtype)
    if dt.kind == "b":
        lo, hi = 0, 1
    elif dt.kind in "iu":
        lo, hi = np.iinfo(dt).min, np.iinfo(dt).max
    else:
        return None
    if threshold is not None and not isinstance(threshold, str):
        if threshold >= hi:
            what = "everything" if invert else "nothing"
            return f"selects {what}: {dt} values are at most {hi}"
        if threshold < lo:
            what = "nothing" if invert else "everything"
            return f"selects {what}: {dt} values are at least {lo}"
    if label is not None and (label < lo or label > hi or (dt.kind != "f" and label != int(label))):
        return f"selects {'everything' if invert else 'nothing'}: no {dt} value equals {label!r}"
    return None
