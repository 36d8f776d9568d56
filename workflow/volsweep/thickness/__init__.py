"""Exact local thickness (Hildebrand & Rüegsegger) of a binary phase, and its distribution.

Definitions (docs/definitions.md, "Local thickness", normative): ``D(p)`` is the
Euclidean distance, with spacing, from voxel centre ``p`` to the nearest voxel
centre *not* in the phase ``X`` (space outside the array is not background); for
``x`` in ``X``::

    LT(x) = 2 * max{ D(p) : p in X, |x - p| < D(p) }

and 0 elsewhere.  The result is a **diameter** in physical units, float32.
PoreSpy's ``local_thickness`` returns a *radius* (and quantises it); to compare,
halve ours.

Ties.  The spacing is written ``scale * (w0, w1, w2)`` with integer weights
(``_tables.lattice``: ratios snapped to a common denominator of at most
4096, within 1e-9 relative when one exists; otherwise the nearest such spacing,
with a warning when it differs by more than float32's resolution, 2**-23), and
every squared length is the
integer ``(di*w0)**2 + (dj*w1)**2 + (dk*w2)**2``, held exactly in float64.  The
strict ``<`` is therefore decided exactly: equal lengths compare equal, at every
spacing.  The diameter is ``float32(2*sqrt(N)) * float32(scale)``, the product
rounded in float32, so ``LT(X, s*spacing) == s * LT(X, spacing)`` bit for bit
(``s * array`` in NumPy's float32 arithmetic).

Algorithm (same on CPU and GPU, bit-identical results): squared distance map on
the lattice, pruning of centres whose discrete ball lies inside a 26-neighbour's
(exact integer tests), then painting every remaining ball with the max of its
squared radius.  No quantisation of radii, no skeleton.

Chunked use (the workflow): measure ``r_max = max_inscribed_radius(...)`` over
the whole phase once, read each chunk's core grown by
``thickness_halo(r_max, spacing)`` voxels (clipped to the volume, no padding)
and call ``local_thickness_core``: its result equals
``local_thickness(whole)[core]`` exactly.  ``thickness_memory_bytes`` tells
whether a whole-volume call fits a memory budget.
"""

from __future__ import annotations

import logging
import math
import numbers
import warnings

import numpy as np

from . import _tables as tables
from ._clock import CallProgress, StageClock
from volsweep.backend import get_array_module, is_cupy_array, resolve_device, to_device, to_numpy
from volsweep.validation import check_spacing as _check_spacing

__all__ = [
    "local_thickness",
    "local_thickness_core",
    "max_inscribed_radius",
    "thickness_halo",
    "thickness_memory_bytes",
    "select_phase",
    "value_counts",
    "merge_value_counts",
    "distribution_from_counts",
    "thickness_distribution",
]

# Relative slack on r_max**2 when deciding which centres may reach a core.
_KEEP_SLACK = 1e-9


# --------------------------------------------------------------------------- validation
def _check_binary(binary, name: str = "binary"):
    if not hasattr(binary, "dtype") or not hasattr(binary, "ndim"):
        binary = np.asarray(binary)
    if binary.dtype != np.bool_:
        raise TypeError(
            f"{name} must be a boolean array (the phase), got dtype {binary.dtype}; "
            f"threshold it first, e.g. `{name} = volume > t` (or `volume == label`), or use "
            f"volsweep.thickness.select_phase(volume, threshold=t)")
    if binary.ndim != 3:
        raise ValueError(f"{name} must be a 3D array, got {binary.ndim}D with shape {binary.shape}")
    return binary


log = logging.getLogger("volsweep")
# One DEBUG line per call (_log_stages) on this logger: the kept centres and the seconds of
# each of STAGES; and for a call past progress.EVERY_S, INFO lines as its stages end and
# their parts finish (_clock.CallProgress).  The workflow's steps turn it on for their logs
# (steps.runner).
stage_log = logging.getLogger("volsweep.thickness")
STAGES = ("distance map", "pruning", "painting", "diameters")


def _lattice(spacing, shape):
    """(weights, scale) of the spacing; raises when squared lengths of this shape leave float64,
    and warns when the lattice's spacing differs from it by more than float32 resolves."""
    spacing = tuple(float(s) for s in spacing)
    weights, scale = tables.lattice(spacing)
    used = tuple(scale * w for w in weights)
    off = max(abs(u - s) / s for u, s in zip(used, spacing))
    if off > tables.LATTICE_WARN_RTOL:
        warnings.warn(
            f"spacing={spacing!r} has no integer ratios with a denominator of at most "
            f"{tables.LATTICE_MAX_DENOMINATOR}: the local thickness is exact for the nearest "
            f"such spacing, {scale!r} * {weights} = {tuple(float(f'{u:.9g}') for u in used)}, "
            f"which differs by {off:.1e} (relative), more than the float32 output resolves; "
            "give the spacing with fewer significant digits (e.g. 3) for a result exact at the "
            "spacing itself", stacklevel=3)
    bound = sum((float(n) * w) ** 2 for n, w in zip(shape, weights))
    if bound >= tables.EXACT_LIMIT:
        raise ValueError(
            f"spacing={tuple(spacing)!r} has integer ratios {weights}: squared lengths across a "
            f"{shape} array would exceed 2**53 and lose exactness; round the spacing (fewer "
            "significant digits in its ratios) or use smaller chunks")
    return weights, scale


def _backend(device: str):
    if device == "cuda":
        from . import _gpu as impl
    else:
        from . import _cpu as impl
    return impl


# --------------------------------------------------------------------------- core
def _thickness_r2(phase, weights, device, box_lo, box_hi, r2keep, clock=None, progress=None):
    """Rank map of the box and its squared lattice radii; ``phase`` is on ``device``.

    Returns ((ranks, values), r2max, kept centres); (None, r2max, kept) when a centre
    that may reach the box has r2max > r2keep.  ``clock``: a StageClock marked after the
    distance map, the pruning and the painting; ``progress``: a CallProgress told so.
    """
    impl = _backend(device)

    def mark(detail=""):
        if clock is not None:
            clock.mark()
        if progress is not None:
            progress.ended(detail)

    d2 = impl.edt_sq(phase, weights)
    mark()
    cand, extra = impl.candidates(d2, weights, box_lo, box_hi, r2keep)
    r2s = impl.centre_r2(d2, cand, extra)
    mark(f" ({int(cand.size):,} ball centres kept)")
    r2max = float(r2s.max()) if cand.size else 0.0
    if r2max > r2keep:
        return None, r2max, int(cand.size)
    r2 = impl.paint(d2, cand, weights, box_lo, box_hi, extra, r2s=r2s)
    mark()
    return r2, r2max, int(cand.size)


def _finish(r2, scale, device):
    ranks, values = r2
    return _backend(device).finish(ranks, values, scale)


def _out_of_device_memory() -> tuple:
    try:
        from cupy.cuda.memory import OutOfMemoryError
    except ImportError:
        return ()
    return (OutOfMemoryError,)


def _free_device_memory() -> None:
    try:
        import cupy
    except ImportError:
        return
    cupy.get_default_memory_pool().free_all_blocks()


def _thickness(binary, weights, scale, dev, box_lo, box_hi, r2keep):
    """``(result or None, r2max)`` on ``dev``; on the host when the device runs out of memory.

    Both devices compute the same exact integers, so the host's result is the device's.
    """
    clock = StageClock(dev) if stage_log.isEnabledFor(logging.DEBUG) else None
    what = f"local thickness of a {tuple(int(n) for n in binary.shape)} block on {dev}"
    try:
        with CallProgress(stage_log, what, STAGES) as progress:
            phase = to_device(binary, dev)
            if clock is not None:
                clock.mark()
            r2, r2max, kept = _thickness_r2(phase, weights, dev, box_lo, box_hi, r2keep, clock,
                                            progress)
            result = None if r2 is None else _finish(r2, scale, dev)
            if r2 is not None:
                progress.ended()
                if clock is not None:
                    clock.mark()
                    _log_stages(binary.shape, box_lo, box_hi, weights, dev, kept,
                                clock.seconds())
        return result, r2max
    except _out_of_device_memory() if dev == "cuda" else () as exc:
        phase = r2 = None
        _free_device_memory()
        log.warning("local thickness: out of GPU memory on %s voxels (%s); computing on the CPU",
                    binary.shape, str(exc).splitlines()[0] if str(exc) else type(exc).__name__)
        return _thickness(to_numpy(binary), weights, scale, "cpu", box_lo, box_hi, r2keep)


def _log_stages(shape, box_lo, box_hi, weights, device, kept, seconds):
    """One DEBUG line per call: the kept ball centres and each stage's seconds."""
    box = "" if tuple(box_lo) == (0, 0, 0) and tuple(box_hi) == tuple(shape) else \
        f" (core {tuple(int(v) for v in box_lo)}-{tuple(int(v) for v in box_hi)})"
    stages = ", ".join(f"{name} {s:.3g} s" for name, s in zip(STAGES, seconds))
    stage_log.debug("local thickness of a %s block%s on %s, lattice weights %s: %d ball "
                    "centres kept; %s", tuple(int(v) for v in shape), box, device,
                    tuple(int(w) for w in weights), kept, stages)


def _return_like(result, like, device):
    """Return on the input's array type (NumPy in, NumPy out; CuPy in, CuPy out)."""
    if is_cupy_array(like):
        return to_device(result, "cuda")
    return to_numpy(result)


def _squared_radius(binary, *, spacing=(1, 1, 1), device="cpu"):
    """``(N, weights, scale)``: the squared lattice radius behind every voxel's thickness
    (float64 exact integers; ``LT = 2 * scale * sqrt(N)``), for exact comparisons."""
    binary = _check_binary(binary)
    spacing = _check_spacing(spacing)
    dev = resolve_device(device, binary)
    weights, scale = _lattice(spacing, binary.shape)
    phase = to_device(binary, dev)
    (ranks, values), _, _ = _thickness_r2(phase, weights, dev, (0, 0, 0), phase.shape, math.inf)
    xp = get_array_module(values)
    lut = xp.concatenate([xp.zeros(1), values])
    return to_numpy(lut[ranks]), weights, scale


def local_thickness(binary, *, spacing=(1, 1, 1), device="auto"):
    """Exact local thickness (diameter) of a boolean 3D phase.

    Parameters
    ----------
    binary : (nx, ny, nz) bool ndarray (NumPy or CuPy)
        The phase ``X``; ``True`` inside.  Threshold or label a volume first
        (``volume > t`` or :func:`select_phase`).
    spacing : 3 positive floats
        Physical size of a voxel along each axis.  Ties ``|x - p| == D(p)`` are
        decided exactly (module docstring, "Ties"): the spacing is taken as
        ``scale * (w0, w1, w2)`` with integer weights, and squared lengths are
        compared as integers.
    device : {"auto", "cpu", "cuda"}
        ``"auto"`` follows the array (CuPy -> GPU, NumPy -> CPU).  ``"cuda"``
        with a NumPy input computes on the GPU and returns NumPy.

    Returns
    -------
    float32 array of ``binary``'s shape and array type: the diameter of the
    largest ball inside ``X`` that covers each voxel, in physical units; 0
    outside ``X``.  (PoreSpy returns a radius.)  It is
    ``float32(2*sqrt(N)) * float32(scale)`` with ``N`` the exact squared radius
    on the lattice, so ``local_thickness(X, spacing=(s, s, s)) ==
    s * local_thickness(X)`` bit for bit.

    Raises
    ------
    TypeError
        ``binary`` is not boolean.
    ValueError
        ``binary`` is not 3D, ``spacing`` is not positive, or the phase fills
        the whole array (no background: the thickness is unbounded).

    Examples
    --------
    >>> slab = np.zeros((9, 4, 4), bool); slab[2:7] = True
    >>> float(local_thickness(slab)[4, 0, 0]), float(local_thickness(slab, spacing=(0.5,) * 3)[4, 0, 0])
    (6.0, 3.0)
    """
    binary = _check_binary(binary)
    spacing = _check_spacing(spacing)
    dev = resolve_device(device, binary)
    xp = get_array_module(binary)
    n_phase = int(xp.count_nonzero(binary))  # one pass for "empty" and "full"
    if n_phase == 0:
        return xp.zeros(binary.shape, np.float32)
    if n_phase == binary.size:
        raise ValueError(
            f"binary has no background voxel (the phase fills the whole {binary.shape} array): "
            "its local thickness is unbounded")
    weights, scale = _lattice(spacing, binary.shape)
    result, _ = _thickness(binary, weights, scale, dev, (0, 0, 0), binary.shape, math.inf)
    return _return_like(result, binary, dev)


def max_inscribed_radius(binary, *, spacing=(1, 1, 1), device="auto") -> float:
    """``R_max = max D(p)`` over the phase, in physical units (0 for an empty phase).

    It is ``scale * sqrt(N_max)`` in float64 (see :func:`local_thickness`).

    Raises ValueError when the phase fills the array (no background).

    Examples
    --------
    >>> slab = np.zeros((9, 4, 4), bool); slab[2:7] = True
    >>> max_inscribed_radius(slab, spacing=(2, 2, 2))
    6.0
    """
    binary = _check_binary(binary)
    spacing = _check_spacing(spacing)
    dev = resolve_device(device, binary)
    xp = get_array_module(binary)
    if not bool(xp.any(binary)):
        return 0.0
    if bool(xp.all(binary)):
        raise ValueError(
            f"binary has no background voxel (the phase fills the whole {binary.shape} array): "
            "the inscribed radius is unbounded")
    weights, scale = _lattice(spacing, binary.shape)
    d2 = _backend(dev).edt_sq(to_device(binary, dev), weights)
    return float(scale * math.sqrt(float(d2.max())))


def thickness_halo(r_max: float, spacing=(1, 1, 1)) -> tuple[int, int, int]:
    """Halo, in voxels per axis, of a chunk that recomputes its own distance map.

    ``2 * ceil(r_max / s) + 1`` voxels along an axis of spacing ``s``
    (docs/definitions.md, "Chunks": 2⌈R_max⌉+1 after spacing).  With it,
    :func:`local_thickness_core` reproduces the whole-volume result exactly.

    Examples
    --------
    >>> thickness_halo(3.0)
    (7, 7, 7)
    >>> thickness_halo(3.0, spacing=(1, 2, 0.5))
    (7, 5, 13)
    """
    spacing = _check_spacing(spacing)
    r = float(r_max)
    if not (math.isfinite(r) and r >= 0):
        raise ValueError(f"r_max must be a finite number >= 0, got r_max={r_max!r}")
    return tuple(2 * math.ceil(r / s) + 1 for s in spacing)


def thickness_memory_bytes(shape, *, spacing=(1, 1, 1), device="cpu") -> int:
    """Upper bound of the peak memory, in bytes, of one ``local_thickness`` call.

    For a ``shape`` array (whole volume, or a chunk's block with its halo) at
    ``spacing`` on ``device`` ("cpu": host memory of the work arrays, the input and
    the result included; "cuda": device memory, the input uploaded by the call
    included).  It assumes every voxel survives pruning, so it holds for any phase;
    typical phases use 50-70% of it.  The spacing matters where its lattice weights are
    large (0.65 by 2 um voxels: weights 13 and 40): balls past the integer tables then
    need a table of disc offsets.  Compare it with a memory budget to choose between
    one whole-volume call and chunks (``local_thickness_core``).

    Examples
    --------
    >>> thickness_memory_bytes((100, 100, 100), device="cpu") > 0
    True
    >>> (thickness_memory_bytes((100, 100, 1000), spacing=(1, 1, 10))
    ...  > thickness_memory_bytes((100, 100, 1000)))
    True
    """
    n = math.prod(int(v) for v in shape)
    if n < 0 or len(tuple(shape)) != 3:
        raise ValueError(f"shape must be 3 non-negative extents, got shape={shape!r}")
    shape = tuple(int(v) for v in shape)
    weights, _ = tables.lattice(_check_spacing(spacing))  # the call itself checks exactness
    return _backend("cuda" if device == "cuda" else "cpu").memory_bytes(shape, weights)


def local_thickness_core(block, core_in_block, r_max, *, spacing=(1, 1, 1), device="auto"):
    """Local thickness of a chunk's core, identical to ``local_thickness(whole)[core]``.

    Parameters
    ----------
    block : bool 3D array
        The phase over the core grown by ``thickness_halo(r_max, spacing)``
        voxels per side, clipped to the volume (not padded: the halo may be
        thinner at the volume's faces).
    core_in_block : tuple of 3 slices
        Where the core lies in ``block`` (``tiling.Tile.core_in_block``, shifted
        by the clipping).
    r_max : float
        The global ``max_inscribed_radius`` of the whole phase.

    Notes
    -----
    Voxels near the block's cut faces get distances too large (what lies
    beyond is unknown, treated as phase).  Only centres at a distance
    ``< r_max`` from the core box can legally reach it, and for those the
    halo holds their nearest background voxel, so they are exact; all other
    centres are excluded.  A centre that may reach the core with ``D > r_max``
    proves ``r_max`` wrong and raises ValueError.  The lattice (weights, scale)
    depends on the spacing alone, so chunks and the whole volume agree bit for bit.

    Examples
    --------
    >>> slab = np.zeros((9, 4, 12), bool); slab[2:7] = True
    >>> r = max_inscribed_radius(slab)
    >>> core = local_thickness_core(slab[:, :, 2:10], (slice(None), slice(None), slice(2, 6)), r)
    >>> bool((core == local_thickness(slab)[:, :, 4:8]).all())
    True
    """
    block = _check_binary(block, "block")
    spacing = _check_spacing(spacing)
    r = float(r_max)
    if not (math.isfinite(r) and r >= 0):
        raise ValueError(f"r_max must be a finite number >= 0, got r_max={r_max!r}")
    if len(core_in_block) != 3:
        raise ValueError(f"core_in_block must be 3 slices, got core_in_block={core_in_block!r}")
    lo, hi = [], []
    for ax, (sl, n) in enumerate(zip(core_in_block, block.shape)):
        a, b, step = sl.indices(n)
        if step != 1 or b <= a:
            raise ValueError(f"core_in_block[{ax}]={sl!r} must be a non-empty unit-step slice "
                             f"within the block's extent {n}")
        lo.append(a)
        hi.append(b)
    dev = resolve_device(device, block)
    xp = get_array_module(block)
    core_shape = tuple(b - a for a, b in zip(lo, hi))
    core_view = block[tuple(slice(a, b) for a, b in zip(lo, hi))]
    if not bool(xp.any(core_view)):
        return _return_like(np.zeros(core_shape, np.float32), block, dev)
    if bool(xp.all(block)):
        raise ValueError(
            f"block has no background voxel but its core holds phase: r_max={r_max!r} is too "
            "small or the halo is missing (use thickness_halo(r_max, spacing))")
    weights, scale = _lattice(spacing, block.shape)
    r2keep = (r / scale) ** 2 * (1.0 + _KEEP_SLACK)
    result, d2max = _thickness(block, weights, scale, dev, tuple(lo), tuple(hi), r2keep)
    if result is None:
        raise ValueError(
            f"r_max={r_max!r} is smaller than an inscribed radius ({scale * math.sqrt(d2max)!r}) "
            "of a centre near this core, or the halo is too thin: pass the global "
            "max_inscribed_radius and read thickness_halo(r_max, spacing) voxels around the core")
    return _return_like(result, block, dev)


# --------------------------------------------------------------------------- phase selection
def select_phase(volume, *, threshold=None, label=None, invert=False, name="volume",
                 whole=True):
    """The boolean phase of a volume: ``volume > threshold`` or ``volume == label``.

    Exactly one of ``threshold`` and ``label`` is given; ``invert`` flips the
    phase.  Works on NumPy and CuPy arrays (the result has the input's type).
    ``whole=False`` is for a chunk of a volume, which may be all phase or all
    background: the empty/full check is skipped.

    Raises
    ------
    ValueError
        Neither or both of threshold/label given, or the phase is empty or
        fills the whole volume (the message names ``name``).
    """
    if (threshold is None) == (label is None):
        raise ValueError(f"{name}: give exactly one of threshold= or label=, got "
                         f"threshold={threshold!r}, label={label!r}")
    xp = get_array_module(volume)
    if not hasattr(volume, "dtype"):
        volume = np.asarray(volume)
    if threshold is not None:
        if not isinstance(threshold, numbers.Real) or isinstance(threshold, bool):
            raise TypeError(f"{name}: threshold must be a number, got threshold={threshold!r}")
        phase = volume > threshold
        rule = f"volume > {threshold!r}"
    else:
        if not isinstance(label, numbers.Real) or isinstance(label, bool):
            raise TypeError(f"{name}: label must be a number, got label={label!r}")
        phase = volume == label
        rule = f"volume == {label!r}"
    if invert:
        phase = ~phase
        rule = f"not ({rule})"
    if not whole:
        return phase
    n = int(xp.count_nonzero(phase))
    if n == 0:
        raise ValueError(f"{name}: the selected phase ({rule}) is empty")
    if n == phase.size:
        raise ValueError(f"{name}: the selected phase ({rule}) fills the whole volume; "
                         "local thickness needs some background")
    return phase


# --------------------------------------------------------------------------- distribution
def value_counts(thickness):
    """Sorted unique positive values (float64) of a thickness map and their counts (int64)."""
    xp = get_array_module(thickness)
    t = xp.asarray(thickness).ravel()
    t = t[t > 0]
    values, counts = xp.unique(t, return_counts=True)  # on the device for CuPy input
    return to_numpy(values).astype(np.float64), to_numpy(counts).astype(np.int64)


def merge_value_counts(pairs):
    """Merge ``(values, counts)`` pairs exactly; the result does not depend on their order."""
    pairs = list(pairs)
    if not pairs:
        return np.zeros(0, np.float64), np.zeros(0, np.int64)
    vals = np.concatenate([np.asarray(v, np.float64).ravel() for v, _ in pairs])
    cnts = np.concatenate([np.asarray(c, np.int64).ravel() for _, c in pairs])
    if vals.shape != cnts.shape:
        raise ValueError("merge_value_counts: every pair needs values and counts of one length")
    values, inverse = np.unique(vals, return_inverse=True)
    counts = np.zeros(values.shape, np.int64)
    np.add.at(counts, inverse.ravel(), cnts)
    keep = counts > 0
    return values[keep], counts[keep]


def _exact_median(values, counts) -> float:
    """Median of the multiset (numpy.median convention: mean of the two middle values)."""
    n = int(counts.sum())
    cum = np.cumsum(counts)
    lo = values[np.searchsorted(cum, (n - 1) // 2, side="right")]
    hi = values[np.searchsorted(cum, n // 2, side="right")]
    return float((lo + hi) / 2.0)


def distribution_from_counts(values, counts, n_voxels, *, bins=50, spacing=(1, 1, 1)):
    """Volume-weighted thickness distribution (xarray.Dataset) from value counts.

    Parameters
    ----------
    values, counts : the phase's thickness values (> 0) and voxel counts
        (from :func:`value_counts` / :func:`merge_value_counts`).
    n_voxels : int
        Voxels in the whole volume (for the phase's volume fraction).
    bins : int or 1D array of edges
        An int ``n`` gives ``n`` equal bins over ``[0, max]``; edges follow
        ``numpy.histogram`` (the last bin is closed).
    spacing : the voxel size (for physical volumes).

    Returns
    -------
    xarray.Dataset with, along ``bin``: ``voxel_count``, ``volume`` (physical),
    ``volume_fraction_of_phase`` (sums to 1 over in-range values) and
    ``density`` (per unit diameter); scalars ``mean`` (volume-weighted),
    ``median`` (exact, from the counts), ``max``, ``min``, ``volume_fraction``
    (phase voxels / all voxels), ``phase_voxels``, ``n_voxels``.  Thickness is
    a DIAMETER (PoreSpy reports a radius).
    """
    import xarray as xr

    spacing = _check_spacing(spacing)
    values = np.asarray(values, np.float64).ravel()
    counts = np.asarray(counts, np.int64).ravel()
    if values.shape != counts.shape:
        raise ValueError(f"values and counts differ in length: {values.size} vs {counts.size}")
    n_voxels = int(n_voxels)
    n_phase = int(counts.sum())
    if n_voxels < n_phase or n_voxels <= 0:
        raise ValueError(f"n_voxels={n_voxels} must be positive and >= the phase's {n_phase} voxels")
    vmax = float(values.max()) if values.size else 0.0
    if isinstance(bins, numbers.Integral) and not isinstance(bins, bool):
        if bins < 1:
            raise ValueError(f"bins must be >= 1, got bins={bins!r}")
        edges = np.linspace(0.0, vmax if vmax > 0 else 1.0, int(bins) + 1)
    else:
        edges = np.asarray(bins, np.float64).ravel()
        if edges.size < 2 or not np.all(np.diff(edges) > 0):
            raise ValueError(f"bins must be an int or increasing edges (>= 2), got bins={bins!r}")
    hist, _ = np.histogram(values, bins=edges, weights=counts)
    hist = np.rint(hist).astype(np.int64)
    voxel_volume = float(np.prod(spacing))
    in_range = int(hist.sum())
    frac = hist / in_range if in_range else np.zeros(hist.shape)
    widths = np.diff(edges)
    if n_phase:
        mean = float(np.dot(values, counts) / n_phase)
        median = _exact_median(values, counts)
        vmin = float(values.min())
    else:
        mean = median = vmin = float("nan")
    units = "physical units of spacing"
    ds = xr.Dataset(
        data_vars={
            "voxel_count": ("bin", hist, {"long_name": "phase voxels per thickness bin",
                                          "units": "1"}),
            "volume": ("bin", hist * voxel_volume, {"long_name": "phase volume per thickness bin",
                                                    "units": f"({units})^3"}),
            "volume_fraction_of_phase": ("bin", frac, {
                "long_name": "fraction of the phase volume per thickness bin", "units": "1"}),
            "density": ("bin", frac / widths, {
                "long_name": "volume-weighted probability density of the local thickness",
                "units": f"1/({units})"}),
            "mean": ((), mean, {"long_name": "volume-weighted mean local thickness (diameter)",
                                "units": units}),
            "median": ((), median, {"long_name": "median local thickness (diameter) over phase voxels",
                                    "units": units}),
            "max": ((), vmax if n_phase else float("nan"),
                    {"long_name": "maximum local thickness (diameter)", "units": units}),
            "min": ((), vmin, {"long_name": "minimum local thickness (diameter)", "units": units}),
            "volume_fraction": ((), n_phase / n_voxels, {
                "long_name": "volume fraction of the phase", "units": "1"}),
            "phase_voxels": ((), n_phase, {"long_name": "voxels in the phase", "units": "1"}),
            "n_voxels": ((), n_voxels, {"long_name": "voxels in the volume", "units": "1"}),
            "out_of_range_voxels": ((), n_phase - in_range, {
                "long_name": "phase voxels outside the bin edges", "units": "1"}),
        },
        coords={
            "bin": ("bin", np.arange(hist.size)),
            "diameter": ("bin", (edges[:-1] + edges[1:]) / 2,
                         {"long_name": "local thickness (diameter), bin centre", "units": units}),
            "diameter_lower": ("bin", edges[:-1], {"long_name": "bin lower edge", "units": units}),
            "diameter_upper": ("bin", edges[1:], {"long_name": "bin upper edge", "units": units}),
        },
        attrs={
            "title": "local thickness distribution",
            "quantity": "local thickness is a DIAMETER (2 x the inscribed-sphere radius), "
                        "unlike PoreSpy's local_thickness, which returns a radius",
            "definition": "LT(x) = 2 max{D(p) : |x - p| < D(p)}, exact (Hildebrand & Ruegsegger 1997)",
            "weighting": "volume-weighted: every phase voxel counts once",
            "spacing": list(spacing),
            "bins_closed": "[lo, hi) except the last, [lo, hi] (numpy.histogram)",
        },
    )
    return ds


def thickness_distribution(thickness, *, bins=50, spacing=(1, 1, 1)):
    """Volume-weighted distribution of a local-thickness map (see distribution_from_counts)."""
    values, counts = value_counts(thickness)
    return distribution_from_counts(values, counts, int(np.prod(thickness.shape)),
                                    bins=bins, spacing=spacing)
