"""The FFT-cached (a, θ, φ, ξ) sweep: the facade over the CPU and GPU engines.

This module validates the inputs, builds the kernel set (:mod:`volsweep.engine._plan`), plans
the blocks, runs them on one engine (:class:`volsweep.engine._cpu.CpuEngine` or
:class:`volsweep.engine._gpu.GpuEngine`, which share one small interface) and
assembles the Dataset.  Per block, on the engine:

1. the volume, padded by the boundary mode to a fast FFT shape, is transformed once;
2. per unique kernel: the kernel's *sampled* spectrum is generated on the fly and
   multiplied in (no spatial kernel, no forward FFT per kernel), one inverse real FFT,
   one fused pass of float64 partial statistics over the core voxels, and with
   ``orientation_map`` the update of the per-voxel running maximum (kept in the
   engine's memory across all kernels of the call);
3. partial statistics stay on the device until the block ends, then merge in a fixed
   order (:mod:`volsweep.engine.stats`).

In ``wrap`` mode an axis whose length is a fast FFT size is transformed at its own
period (exact for any kernel size, no halo).  With ``wrap`` and only
``energy``/``std``/``mean`` asked for, the statistics come from the spectrum by
Parseval with no inverse FFT at all.  Definitions: ``docs/definitions.md``.
"""

from __future__ import annotations

import functools
import itertools
import logging
import math
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from volsweep import backend as _be
from volsweep.progress import progress as _progress
from . import wavelet as _wv
from ._plan import (ORIENTATION_RULES, Block, Job, KernelSet, gaussian_taps, make_blocks,  # noqa: F401
                    UNRAVEL_SLAB_BYTES, map_to_host, taps_halo, unique_kernels,
                    unravel_argmax)
from .stats import STATS, check_stats, finalize, merge
from volsweep.tiling import MODES, fast_shape, tile_shape_for_budget

log = logging.getLogger("volsweep")

#: Statistics that Parseval gives from the spectrum alone.
PARSEVAL_STATS = frozenset({"energy", "std", "mean"})
#: Seconds between progress lines (and the only host syncs inside a block).
#: Working bytes per voxel of the padded block (image spectrum + product spectrum
#: + FFT work area and temporaries), used to tile under ``memory_limit``.
BYTES_PER_PADDED_VOXEL = 16
#: Extra bytes per voxel for ``orientation_rule="response"`` (float32 maximum + int32 index).
BYTES_PER_OMAP_VOXEL = 8
#: Extra bytes per voxel for ``orientation_rule="local_energy"``: float32 response maximum,
#: float32 local-energy maximum, int32 index, and three float32 temporaries of the
#: separable Gaussian (G²/W and two passes).
BYTES_PER_LOCAL_ENERGY_VOXEL = 24
#: Default integration scale, in units of the wavelet's scale ``a``: σ = a.  Measured
#: with ``benchmarks/bench_orientation.py`` (radius 2.5, noise σ = 0.3, 12 × 12 grid, the
#: map at a: auto's √2·r): share of the fibre voxels within one grid step on two
#: placements of one family, two families crossing at 60° and a 64³ open box: σ = a 99.9%,
#: 100%, 93.5%, 100%; σ = 0.5·a 93.5%, 97.6%, 95.0%, 99.3%; σ = 0.25·a 91.3%, 86.2%,
#: 93.1%, 97.8%.
INTEGRATION_SCALE_PER_A = 1.0
#: Where the per-voxel map's responses come from outside a non-periodic volume:
#: ``'mean'`` (default), the volume's mean (``G = ψ ⊛ ((V − mean V)·1_V)``: no structure
#: is invented beyond the faces, ``docs/definitions.md``, "Orientation"), or ``'mode'``,
#: the boundary mode's extension, as the statistics (mirrored fibres corrupt the map
#: within a few voxels of the faces).  Measured on a 64³ open box of six fibres (radius
#: 2.5, noise σ = 0.3, a = √2·R, 12 × 12 grid, benchmarks/bench_orientation.py):
#: ``'mode'`` with ``reflect`` put 93.8% of the fibre voxels within one grid step (48% of
#: those on a face), ``'mean'`` 100%.
ORIENTATION_BOUNDARIES = ("mean", "mode")


# ----------------------------------------------------------------------------- inputs
def _check_angles(name, value) -> np.ndarray:
    arr = np.asarray(value)
    if arr.dtype.kind not in "iuf":
        raise TypeError(f"{name} must be a 1D sequence of real numbers, got {name}={value!r}")
    arr = np.atleast_1d(arr.astype(np.float64))
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{name} must be a non-empty 1D sequence, got {name}={value!r}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} must be finite, got {name}={value!r}")
    if arr.size > np.iinfo(np.uint16).max:
        raise ValueError(f"{name} has more than 65535 values, got len({name})={arr.size}")
    return arr


def _check_scalar(name, value) -> float:
    if isinstance(value, bool) or not np.isscalar(value) or not np.isreal(value):
        raise TypeError(f"{name} must be a real number, got {name}={value!r}")
    v = float(value)
    if not (math.isfinite(v) and v > 0):
        raise ValueError(f"{name} must be finite and > 0, got {name}={value!r}")
    return v


def _check_volume(volume):
    if not hasattr(volume, "shape") or not hasattr(volume, "dtype"):
        volume = np.asarray(volume)
    if getattr(volume, "ndim", len(volume.shape)) != 3:
        raise ValueError(f"volume must be 3D, got volume with shape={tuple(volume.shape)}")
    if min(volume.shape) < 1:
        raise ValueError(f"volume must not be empty, got volume with shape={tuple(volume.shape)}")
    if np.dtype(volume.dtype).kind not in "biuf":
        raise TypeError(f"volume must be real numeric, got volume with dtype={volume.dtype}")
    xp = _be.get_array_module(volume)
    if not _be.is_cupy_array(volume):
        volume = np.asarray(volume)
    if np.dtype(volume.dtype).kind == "f" and not bool(xp.isfinite(volume).all()):
        raise ValueError("volume must be finite, got volume with non-finite voxels (NaN or inf)")
    return volume



def _check_scales(value) -> tuple[np.ndarray, bool]:
    """``a`` as a float64 array and whether it was a sequence (which adds an ``a`` dimension)."""
    if isinstance(value, (list, tuple, np.ndarray)):
        arr = np.asarray(value)
        if arr.dtype.kind not in "iuf" or arr.ndim != 1 or arr.size == 0:
            raise TypeError(f"a must be a number > 0 or a non-empty 1D sequence of them, got a={value!r}")
        arr = arr.astype(np.float64)
        if not np.all(np.isfinite(arr)) or np.any(arr <= 0):
            raise ValueError(f"a must be finite and > 0, got a={value!r}")
        if len(np.unique(arr)) != arr.size:
            raise ValueError(f"a must not repeat a value, got a={value!r}")
        return arr, True
    return np.array([_check_scalar("a", value)]), False


def _check_xi(xi) -> np.ndarray:
    xi_arr = np.atleast_1d(np.asarray(xi, dtype=np.float64)) if np.asarray(xi).dtype.kind in "iuf" else None
    if xi_arr is None or xi_arr.ndim != 1 or xi_arr.size == 0:
        raise TypeError(f"xi must be a non-empty 1D sequence of numbers, got xi={xi!r}")
    if not np.all(np.isfinite(xi_arr)) or np.any(xi_arr <= 0):
        raise ValueError(f"xi must be finite and > 0, got xi={xi!r}")
    if xi_arr.size > np.iinfo(np.uint16).max:
        raise ValueError(f"xi has more than 65535 values, got len(xi)={xi_arr.size}")
    return xi_arr


def _integration_scales(integration_scale, a_vals) -> np.ndarray:
    """σ per scale: ``INTEGRATION_SCALE_PER_A · a`` by default, else the value given (≥ 0)."""
    if integration_scale is None:
        return INTEGRATION_SCALE_PER_A * a_vals
    if isinstance(integration_scale, bool) or not np.isscalar(integration_scale):
        raise TypeError(f"integration_scale must be a number >= 0 or None, got "
                        f"integration_scale={integration_scale!r}")
    v = float(integration_scale)
    if not (math.isfinite(v) and v >= 0):
        raise ValueError(f"integration_scale must be finite and >= 0, got integration_scale={integration_scale!r}")
    return np.full(len(a_vals), v)


def _halo(a_vals, xi, theta, phi, spacing, truncate, sigmas=None) -> tuple[int, int, int]:
    """Kernel halo (largest over the scales) plus the integration's reach."""
    halo = np.max([_wv.halo_for(float(a), xi, theta, phi, spacing, truncate) for a in a_vals], axis=0)
    if sigmas is not None:
        halo = halo + np.asarray(taps_halo(gaussian_taps(float(np.max(sigmas)), spacing)))
    return tuple(int(h) for h in halo)


def _versions(device: str) -> dict:
    """The versions that shape the numbers (:func:`volsweep.provenance.package_versions`)."""
    from volsweep.provenance import package_versions

    return package_versions()


def _bytes_per_voxel(orientation_map, orientation_rule="local_energy") -> int:
    if not orientation_map:
        return BYTES_PER_PADDED_VOXEL
    return BYTES_PER_PADDED_VOXEL + (BYTES_PER_LOCAL_ENERGY_VOXEL if orientation_rule == "local_energy"
                                     else BYTES_PER_OMAP_VOXEL)


class _Shifted:
    """The volume minus a constant, read lazily (what the map's pass reads with ``constant``
    mode: outside the volume its mean, inside ``V − mean``)."""

    def __init__(self, volume, shift: float):
        self.volume, self.shift = volume, np.float32(shift)
        self.shape = tuple(int(n) for n in volume.shape)
        self.dtype = np.dtype(np.float32)
        self.ndim = 3

    def __getitem__(self, box):
        xp = _be.get_array_module(self.volume)
        return xp.asarray(self.volume[box], dtype=xp.float32) - self.shift


def _map_halo(map_scales, xi_dir, theta, phi, spacing, truncate, sigma, tiled) -> tuple[int, int, int]:
    """Halo of the map's pass on the mean extension (zeros around ``V − mean``).

    Circular wrap-around brings data from ``≥ 2·halo − reach + 1`` voxels away when the
    block's padding is zero, so half the kernel's reach ``K`` suffices:
    ``max(reach, ⌈(K + reach)/2⌉)`` with ``reach`` the integration's; a tiled pass has
    real voxels in its halos and needs ``K + reach``.
    """
    k = np.asarray(_halo(map_scales, xi_dir, theta, phi, spacing, truncate))
    r = np.asarray(taps_halo(gaussian_taps(float(sigma), spacing)))
    h = k + r if tiled else np.maximum(r, -(-(k + r) // 2))
    return tuple(int(v) for v in h)


class _Pass:
    """One run of the engine over the volume: its kernels, halo, blocks and role.

    ``role``: ``'all'`` (statistics and, if asked, the map, one pass), ``'stats'``
    (statistics and ``response_max`` on the boundary mode), ``'map'`` (the local-energy
    map on the mean extension, its statistics discarded).
    """

    def __init__(self, role, ks, halo, bpv, mode, blocks, untiled, sub=None):
        self.role, self.ks, self.halo, self.bpv, self.mode = role, ks, halo, bpv, mode
        self.blocks, self.untiled, self.sub = blocks, untiled, sub


def _pass_bytes(ps) -> float:
    """Working bytes of a pass's largest block, as the planner counts them."""
    return max(math.prod(b.fft_shape) for b in ps.blocks) * ps.bpv


def _unravel_bytes(on_device) -> int:
    """Device bytes :func:`unravel_argmax` takes beside a map's arrays (none on the CPU)."""
    return UNRAVEL_SLAB_BYTES if any(_be.is_cupy_array(a) for a in on_device) else 0


_IMPORTS = threading.Lock()


def _import_xarray():
    """Import xarray and the modules it loads on a first Dataset (dask, ...), one thread at
    a time: two threads importing one package at once can see it half initialised."""
    with _IMPORTS:
        import xarray as xr

        xr.Dataset({"v": ("x", np.zeros(1))})


def _publish(copied, final, on_map, votes_args):
    """After the map's copies (``copied``, a future or None): ``on_map(final)``, then the
    map's votes (:func:`volsweep.engine.orientation.votes_from_map`) when asked."""
    if copied is not None:
        copied.result()
    if on_map is not None:
        on_map(final)
    if votes_args is None:
        return None
    from .orientation import votes_from_map

    return votes_from_map(*votes_args)


def _full_rep(ks_map, xi_dir, theta, phi, a_index, xi_index, grid, a_dim) -> np.ndarray:
    """Per unique kernel of the map's pass (grid (scales of the map, θ, φ, ξ ≠ 1)), its lowest
    flat index in the call's grid ([a,] θ, φ, ξ), for :func:`unravel_argmax`."""
    sub = (len(np.unique(ks_map.a)), len(theta), len(phi), len(xi_dir))
    ia, it, ip, ix = np.unravel_index(ks_map.rep, sub)
    a_full = np.array([a_index[float(v)] for v in ks_map.a])
    x_full = np.array([xi_index[float(v)] for v in np.asarray(xi_dir)[ix]])
    full = (a_full,) if a_dim else ()
    return np.ravel_multi_index(full + (it, ip, x_full), grid).astype(np.int64)


def _plan_passes(shape, theta, phi, xi_arr, a_vals, map_scales, spacing, truncate, mode, stats,
                 orientation_map, orientation_rule, sigmas, orientation_boundary, memory_limit, device):
    """The engine passes of a call (:class:`_Pass`): one, or with the local-energy map of a
    non-periodic volume on the mean extension (``orientation_boundary='mean'``), two."""
    local = bool(orientation_map) and orientation_rule == "local_energy"
    split = local and mode != "wrap" and orientation_boundary == "mean"

    def tile_for(halo, bpv):
        return None if memory_limit is None else tile_shape_for_budget(shape, halo, bpv, memory_limit,
                                                                       device=device)

    passes = []
    ks = unique_kernels(theta, phi, xi_arr, a_vals)
    if split:
        bpv = BYTES_PER_PADDED_VOXEL + BYTES_PER_OMAP_VOXEL
        halo = _halo(a_vals, xi_arr, theta, phi, spacing, truncate)
    else:
        bpv = _bytes_per_voxel(orientation_map, orientation_rule)
        halo = _halo(a_vals, xi_arr, theta, phi, spacing, truncate, sigmas if local else None)
    tile = tile_for(halo, bpv)
    untiled = tile is None or tuple(tile) == tuple(shape)
    parseval = mode == "wrap" and set(stats) <= PARSEVAL_STATS and untiled and not orientation_map
    blocks = make_blocks(shape, halo, mode, None if untiled else tile, force_period=parseval, device=device)
    passes.append(_Pass("stats" if split else "all", ks, halo, bpv, mode, blocks, untiled))
    passes[0].parseval = parseval
    if split:
        xi_dir = xi_arr[xi_arr != 1.0]
        ks_map = unique_kernels(theta, phi, xi_dir, map_scales)
        sigma = float(np.max(sigmas[np.isin(a_vals, map_scales)]))
        bpv = BYTES_PER_PADDED_VOXEL + BYTES_PER_LOCAL_ENERGY_VOXEL
        halo = _map_halo(map_scales, xi_dir, theta, phi, spacing, truncate, sigma, tiled=False)
        tile = tile_for(halo, bpv)
        untiled = tile is None or tuple(tile) == tuple(shape)
        if not untiled:
            halo = _map_halo(map_scales, xi_dir, theta, phi, spacing, truncate, sigma, tiled=True)
            tile = tile_for(halo, bpv)
        blocks = make_blocks(shape, halo, "constant", None if untiled else tile, device=device)
        p = _Pass("map", ks_map, halo, bpv, "constant", blocks, untiled, sub=xi_dir)
        p.parseval = False
        passes.append(p)
    return passes


def memory_needs(shape, theta, phi, xi, *, a=1.0, spacing=(1, 1, 1),
                 truncate=_wv.DEFAULT_TRUNCATE, orientation_map=False, integration_scale=None,
                 orientation_rule="local_energy", mode=None, orientation_a=None,
                 orientation_boundary="mean", device=None) -> tuple[int, int]:
    """Bytes :func:`sweep` plans for the untiled volume and for its smallest (1-voxel) tile.

    The same model :func:`sweep` tiles by under ``memory_limit``: the largest of its passes
    (the map's own pass on the mean extension, untiled, has a smaller halo than tiled: its
    least need is the smaller of the two).  ``mode=None``: the largest over the modes
    (``wrap``'s one pass and the two passes of ``reflect``/``constant``).  ``device``
    ("cpu" or "cuda", whose FFT shapes differ: :func:`volsweep.tiling.fft_lengths`);
    ``None``: the larger of the two.

    Examples
    --------
    >>> untiled, smallest = memory_needs((40, 30, 20), [0.0], [0.0], [1.0])
    >>> untiled > smallest
    True
    """
    if device not in (None, "cpu", "cuda"):
        raise ValueError(f"device must be 'cpu', 'cuda' or None (the larger need), got device={device!r}")
    a_vals, _ = _check_scales(a)
    xi = np.atleast_1d(np.asarray(xi, dtype=np.float64))
    sp = _wv.check_spacing(spacing)
    sig = _integration_scales(integration_scale, a_vals)
    map_scales = _map_scales(orientation_a, a_vals, a)
    passes = []
    for m, dev in itertools.product(("wrap", "reflect") if mode is None else (mode,),
                                    ("cpu", "cuda") if device is None else (device,)):
        passes += [(p, dev) for p in _plan_passes(
            tuple(int(n) for n in shape), theta, phi, xi, a_vals, map_scales, sp, truncate, m,
            ("energy",), orientation_map, orientation_rule, sig, orientation_boundary, None, dev)]
    untiled = smallest = 0
    for p, dev in passes:
        halo = p.halo
        if p.role == "map":
            full = _map_halo(map_scales, p.sub, theta, phi, sp, truncate,
                             float(np.max(sig[np.isin(a_vals, map_scales)])), tiled=True)
        else:
            full = halo
        whole = math.prod(fast_shape(shape, halo, device=dev)) * p.bpv
        untiled = max(untiled, whole)
        # the least budget this pass runs under: its 1-voxel tile, or whole when that is less
        # (the map's untiled pass has the smaller halo)
        smallest = max(smallest, min(whole, math.prod(fast_shape((1,) * len(shape), full, device=dev)) * p.bpv))
    return untiled, smallest


def _map_scales(orientation_a, a_vals, a):
    """The scales of the map (``orientation_a``, checked against ``a``), in the order of ``a``."""
    if orientation_a is None:
        return a_vals
    m = np.atleast_1d(np.asarray(orientation_a, dtype=np.float64))
    if m.ndim != 1 or m.size == 0 or not np.all(np.isin(m, a_vals)):
        raise ValueError(f"orientation_a must be some of the values of a={a!r}, got orientation_a={orientation_a!r}")
    return a_vals[np.isin(a_vals, m)]


#: Per device: seconds per unique kernel and padded voxel·log2(padded voxels) of one
#: inverse FFT with its spectrum and statistics (``irfft``, the slope over 3 sizes) and the
#: per-kernel intercept (``per_kernel``); per padded voxel of the Parseval path; per core
#: voxel and Gaussian tap of the local-energy map.  Measured with
#: ``benchmarks/bench_sweep.py --cost`` (docs/benchmarks/sweep.md): CPU on the 2-core development
#: machine (64³–128³, shared, ±50%), GPU on an NVIDIA H200 (128³–256³; its Parseval
#: times were launch-bound at these sizes and are rough; its local energy is the fused
#: passes' 3.2 ms at 800×800×200 with 75 taps, ``benchmarks/bench_local_energy.py``).
COST_CONSTANTS = {
    "cpu": {"irfft": 3.9e-10, "parseval": 3.2e-9, "local_energy": 2.0e-9, "per_kernel": 9.4e-3},
    "cuda": {"irfft": 6.3e-13, "parseval": 9.8e-12, "local_energy": 3.3e-13, "per_kernel": 9.1e-5},
}


def sweep_cost(shape, theta, phi, xi, *, a=1.0, spacing=(1, 1, 1), mode="reflect",
               truncate=_wv.DEFAULT_TRUNCATE, device="cpu", stats=STATS, orientation_map=False,
               integration_scale=None, orientation_rule="local_energy", memory_limit=None,
               orientation_a=None, orientation_boundary="mean") -> dict:
    """What :func:`sweep` will do and what it should cost, without running it.

    Returns
    -------
    dict
        ``n_kernels`` (grid points), ``n_unique_kernels`` (computed for the statistics),
        ``n_blocks``, ``fft_shapes`` (per block), ``halo``, ``method`` (``parseval`` or
        ``irfft``), ``seconds`` (estimate: per block ``unique kernels × (c·N·log2 N + c0)``
        with per-device constants :data:`COST_CONSTANTS`, plus the local-energy passes),
        ``peak_bytes`` (the :func:`memory_needs` model of the largest block) and, when the
        map has its own pass on the mean extension, ``map_n_kernels``, ``map_fft_shapes``
        and ``map_halo``.

    Examples
    --------
    >>> c = sweep_cost((64, 64, 64), np.arange(8) * np.pi / 8, np.arange(8) * np.pi / 8, [1.0, 2.0])
    >>> c["n_kernels"], c["n_unique_kernels"]
    (128, 58)
    """
    a_vals, _ = _check_scales(a)
    theta, phi = _check_angles("theta", theta), _check_angles("phi", phi)
    xi = _check_xi(xi)
    sp = _wv.check_spacing(spacing)
    stats = check_stats(stats)
    dev = "cuda" if device == "cuda" else "cpu"
    local = bool(orientation_map) and orientation_rule == "local_energy"
    sig = _integration_scales(integration_scale, a_vals)
    map_scales = _map_scales(orientation_a, a_vals, a)
    shape = tuple(int(n) for n in shape)
    passes = _plan_passes(shape, theta, phi, xi, a_vals, map_scales, sp, truncate, mode, stats,
                          orientation_map, orientation_rule, sig, orientation_boundary, memory_limit, dev)
    k = COST_CONSTANTS[dev]
    secs = 0.0
    for ps in passes:
        n_dir = int(np.sum(~ps.ks.isotropic & np.isin(ps.ks.a, map_scales)))
        for b in ps.blocks:
            n = math.prod(b.fft_shape)
            per = k["parseval"] * n if ps.parseval else k["irfft"] * n * math.log2(max(n, 2))
            secs += len(ps.ks.xi) * (per + k["per_kernel"])
            if local and ps.role != "stats":
                taps = sum(len(w) for w in gaussian_taps(float(np.max(sig)), sp))
                secs += n_dir * k["local_energy"] * math.prod(b.core_shape) * taps
    first = passes[0]
    out = {"n_kernels": int(len(first.ks.inverse)), "n_unique_kernels": int(len(first.ks.xi)),
           "n_blocks": len(first.blocks), "fft_shapes": [list(b.fft_shape) for b in first.blocks],
           "halo": list(first.halo), "method": "parseval" if first.parseval else "irfft",
           "seconds": float(secs),
           "peak_bytes": int(max(math.prod(b.fft_shape) * ps.bpv for ps in passes for b in ps.blocks)),
           "device": dev}
    if len(passes) > 1:
        mp = passes[1]
        out.update(map_n_kernels=int(len(mp.ks.xi)), map_fft_shapes=[list(b.fft_shape) for b in mp.blocks],
                   map_halo=list(mp.halo))
    return out


def _engine(dev):
    if dev == "cuda":
        from ._gpu import GpuEngine

        return GpuEngine()
    from ._cpu import CpuEngine

    return CpuEngine()


def sweep(volume, theta, phi, xi, *, a=1.0, spacing=(1, 1, 1), mode="reflect",
          truncate=_wv.DEFAULT_TRUNCATE, stats=STATS, device="auto", memory_limit=None,
          progress=True, orientation_map=False, integration_scale=None,
          orientation_rule="local_energy", orientation_a=None, orientation_boundary="mean", unit=None,
          on_map=None):
    """Statistics of the volume's responses to an (a, θ, φ, ξ) grid of stretched Mexican hats.

    Parameters
    ----------
    volume : (X, Y, Z) array_like or cupy.ndarray
        Real, finite voxels; axis 0 is x.  Cast to float32 for the FFTs.
    theta, phi, xi : 1D sequences
        Angles in radians and elongations (> 0); the output spans their outer product.
        ξ = 1 is isotropic: all its orientations are one kernel, computed once.
    a : float or 1D sequence of floats
        Scale (> 0), in the units of ``spacing``.  A sequence adds an ``a`` dimension
        (first) to the statistics and, with ``orientation_map``, a per-voxel best scale
        ``argmax_a``.  :func:`volsweep.engine.orientation.scale_from_thickness` derives it
        from a local-thickness distribution.
    spacing : 3 floats
        Physical size of a voxel along x, y, z.
    mode : {'reflect', 'constant', 'wrap'}
        Boundary: scipy.ndimage's ``reflect``, zero, or periodic.
    truncate : float
        Halo, in units of the kernel's Gaussian envelope: voxels beyond it have
        ``q ≥ truncate²``.  The default keeps every statistic within ~1e-6 of the
        8·a·max(ξ, 1) reference.
    stats : sequence of str
        Any of ``'energy', 'std', 'max', 'mean', 'min'``.
    device : {'auto', 'cpu', 'cuda'}
        Backend; ``'auto'`` follows the array, else CUDA when available.
    memory_limit : int, optional
        Bytes of working memory; below the need, space is tiled (with halos) and
        the partial statistics are merged.  Default: unlimited on the CPU, 85% of
        the free device memory on a GPU.
    progress : bool
        A progress bar on stderr when it is a terminal, else 'kernels done,
        kernels/s, ETA' every few seconds on logger ``volsweep``
        (:func:`volsweep.progress.progress`).
    orientation_map : bool
        Also return the per-voxel orientation (dims x, y, z): ``argmax_theta``,
        ``argmax_phi``, ``argmax_xi`` (and ``argmax_a``) as uint16 grid indices,
        ``response_max`` (the largest response over all kernels) and, with the
        default rule, ``local_energy_max``, the criterion the indices maximise.
    integration_scale : float, optional
        Standard deviation (units of ``spacing``) of the Gaussian over which the
        local energy is integrated (``docs/definitions.md``, "Orientation").  Default
        ``INTEGRATION_SCALE_PER_A · a`` per scale; 0 is one voxel.
    orientation_a : float or sequence of floats, optional
        The scales (values of ``a``) whose kernels take part in the local-energy map;
        default all.  The statistics still cover every scale.  The map wants the
        fibres' matched scale ``MAP_SCALE_PER_RADIUS · r`` (at larger scales neighbouring
        and crossing fibres merge), the dominant direction ``SCALE_PER_RADIUS · r``
        (:mod:`volsweep.engine.orientation`): one call with ``a=[map_a, stats_a],
        orientation_a=map_a`` gives both, as
        :func:`volsweep.engine.orientation.auto_scales` (``a: auto``) derives them.
    orientation_boundary : {'mean', 'mode'}
        Outside a non-periodic volume (``mode`` ``reflect`` or ``constant``), the
        local-energy map's responses see the volume's mean (``'mean'``, the default:
        ``G = ψ ⊛ ((V − mean V)·1_V)``, a second pass over the map's kernels) or the
        boundary mode's extension, as the statistics (``'mode'``: one pass; ``reflect``
        mirrors fibres that cross a face, and the map is wrong within a few voxels of the
        faces).  ``wrap`` has no faces: one pass.
    orientation_rule : {'local_energy', 'response'}
        ``'local_energy'``: per voxel, the ξ ≠ 1 kernel whose local energy
        ``Gσ ⊛ (G²/wavelet_energy)`` is largest.  ``'response'``: the kernel whose raw
        response G is largest at the voxel, ties to the lowest flat index (the former
        rule; unreliable at fibre edges, kept for comparison).
    unit : str, optional
        Physical unit of ``spacing`` (e.g. ``'micrometer'``): the ``units`` of ``a``,
        ``spacing`` and ``integration_scale`` in the attrs.
    on_map : callable, optional
        With ``orientation_map``, called once with a dict of the per-voxel arrays that
        are final (host NumPy, named as in the result) as soon as they are: with the
        map's own pass (``orientation_boundary='mean'``), its ``local_energy_max`` and
        ``argmax_*`` while the statistics pass still runs, so that a caller can store
        them meanwhile; else all of them at the end.  It is called from a background
        thread; the arrays must not be modified.

    Returns
    -------
    xarray.Dataset
        Dims ([a,] theta, phi, xi): the asked statistics (float64); ``energy_weight``
        and ``wavelet_energy`` over ([a,] xi); with ``orientation_map`` also dims
        (x, y, z).  Every variable has its CF ``long_name`` and ``units``.

    Examples
    --------
    >>> import numpy as np
    >>> v = np.random.default_rng(0).random((16, 15, 14))
    >>> ds = sweep(v, [0.0, 0.5], [0.0], [1.0, 2.0], a=1.5, device="cpu", progress=False)
    >>> ds["energy"].dims, ds.attrs["n_unique_kernels"]
    (('theta', 'phi', 'xi'), 3)
    """
    # --- validation, before any work
    theta = _check_angles("theta", theta)
    phi = _check_angles("phi", phi)
    xi_arr = _check_xi(xi)
    a_vals, a_dim = _check_scales(a)
    truncate = _check_scalar("truncate", truncate)
    spacing = _wv.check_spacing(spacing)
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got mode={mode!r}")
    stats = check_stats(stats)
    if memory_limit is not None:
        memory_limit = _check_scalar("memory_limit", memory_limit)
    if orientation_rule not in ORIENTATION_RULES:
        raise ValueError(f"orientation_rule must be one of {ORIENTATION_RULES}, got "
                         f"orientation_rule={orientation_rule!r}")
    if unit is not None and not isinstance(unit, str):
        raise TypeError(f"unit must be a string or None, got unit={unit!r}")
    if orientation_boundary not in ORIENTATION_BOUNDARIES:
        raise ValueError(f"orientation_boundary must be one of {ORIENTATION_BOUNDARIES}, got "
                         f"orientation_boundary={orientation_boundary!r}")
    if on_map is not None and not callable(on_map):
        raise TypeError(f"on_map must be a callable taking a dict of arrays, got on_map={on_map!r}")
    local = bool(orientation_map) and orientation_rule == "local_energy"
    sigmas = _integration_scales(integration_scale, a_vals)
    map_scales = _map_scales(orientation_a, a_vals, a)
    if local and np.all(xi_arr == 1.0):
        raise ValueError(f"orientation_map needs some xi != 1: xi = 1 is isotropic and has no "
                         f"direction, got xi={xi!r}")
    dev = _be.resolve_device(device, volume if _be.is_cupy_array(volume) else None)
    if device == "auto" and not _be.is_cupy_array(volume):
        dev = _be.resolve_device("auto")
    volume = _check_volume(volume)
    shape = tuple(int(n) for n in volume.shape)

    # --- passes: kernels, halo, blocks
    engine = _engine(dev)
    if memory_limit is None:
        memory_limit = engine.default_budget()
    passes = _plan_passes(shape, theta, phi, xi_arr, a_vals, map_scales, spacing, truncate, mode, stats,
                          orientation_map, orientation_rule, sigmas, orientation_boundary, memory_limit, dev)
    a_index = {float(v): i for i, v in enumerate(a_vals)}
    w_energy = np.stack([_wv.wavelet_energy(float(v), xi_arr, spacing) for v in a_vals])  # (n_a, n_xi)
    xi_index = {float(v): i for i, v in enumerate(xi_arr)}
    grid = ((len(a_vals),) if a_dim else ()) + (len(theta), len(phi), len(xi_arr))
    axes = (("a",) if a_dim else ()) + ("theta", "phi", "xi")
    jobs = []
    for ps in passes:
        ks = ps.ks
        omap = None
        if orientation_map:
            omap = "response" if ps.role == "stats" else orientation_rule
        job = Job(ks=ks, spacing=spacing, mode=ps.mode, parseval=ps.parseval, omap=omap)
        if omap == "local_energy":
            taps_of = {float(v): gaussian_taps(float(sg), spacing) for v, sg in zip(a_vals, sigmas)}
            job.taps = [taps_of[float(v)] for v in ks.a]
            job.inv_energy = np.array([1.0 / w_energy[a_index[float(v)], xi_index[float(x)]]
                                       for v, x in zip(ks.a, ks.xi)])
            job.directional = ~ks.isotropic & np.isin(ks.a, map_scales)
        jobs.append(job)
    ks, halo, blocks = passes[0].ks, passes[0].halo, passes[0].blocks

    # --- run
    prog = _progress(sum(len(ps.ks.xi) * len(ps.blocks) for ps in passes), "sweep", progress,
                     sync=getattr(engine, "sync", None), unit="kernels")
    if progress:
        for ps in passes:
            log.info("sweep (%s): %d kernels (%d unique) x %d block(s) of FFT shape %s, halo %s, "
                     "device %s", ps.role, len(ps.ks.inverse), len(ps.ks.xi), len(ps.blocks),
                     ps.blocks[0].fft_shape, ps.halo, dev)
    parts, maps = [], None
    if orientation_map:
        maps = {"response_max": np.empty(shape, np.float32)}
        if local:
            maps["local_energy_max"] = np.empty(shape, np.float32)
        idx_maps = [np.empty(shape, np.uint16) for _ in axes]
    shifted = None
    votes = None
    stats_bytes = max(_pass_bytes(ps) for ps in passes if ps.role != "map")
    # The map's pass first: its host work (copies, votes, the caller's on_map) runs in the
    # background while the statistics pass computes.
    with ThreadPoolExecutor(1) as background:
        background.submit(_import_xarray)  # meanwhile: used after the kernels
        for ps, job in sorted(zip(passes, jobs), key=lambda pj: pj[0].role != "map"):
            source = volume
            if ps.role == "map":  # the mean extension: zeros around V − mean(V)
                xp = _be.get_array_module(volume)
                shifted = float(xp.mean(volume, dtype=xp.float64))
                if _be.is_cupy_array(volume):  # already on the device: one float32 copy there
                    source = volume.astype(xp.float32) - xp.float32(shifted)
                else:
                    source = _Shifted(volume, shifted)
                rep = _full_rep(ps.ks, ps.sub, theta, phi, a_index, xi_index, grid, a_dim)
            else:
                rep = ps.ks.rep
            copied = None
            for blk in ps.blocks:
                part, pmap = engine.run_block(source, blk, job, prog)
                if ps.role != "map":
                    parts.append(part)
                if pmap is None:
                    continue
                names = {"stats": ["response_max"], "map": ["local_energy_max"]}.get(ps.role, list(maps))
                unravel = (idx_maps, rep, grid) if ps.role != "stats" else ()
                to_host = functools.partial(map_to_host, pmap, names, blk.core, maps, *unravel)
                on_device = list(pmap.values())
                del pmap
                held = sum(a.nbytes for a in on_device) + _unravel_bytes(on_device)
                if ps.role == "map" and blk is ps.blocks[-1] and (
                        memory_limit is None or stats_bytes + held <= memory_limit):  # kept until copied
                    copied = background.submit(_be.when_done(to_host, on_device))
                else:
                    to_host()
                del to_host, on_device
            if orientation_map and ps.role in ("map", "all"):
                final = {n: a for n, a in maps.items() if ps.role == "all" or n != "response_max"}
                final.update({f"argmax_{ax}": arr for ax, arr in zip(axes, idx_maps)})
                votes = background.submit(_publish, copied, final, on_map,
                                          (maps["local_energy_max"], idx_maps, grid) if local else None)
        prog.close()
    votes = None if votes is None else votes.result()  # its errors, and the copies'
    total = merge(parts)
    values = finalize(total, stats)

    import xarray as xr

    from .products import annotate


    # --- dataset
    dims = axes
    data_vars = {s: (dims, values[s][ks.inverse].reshape(grid)) for s in stats}
    wdims = (("a",) if a_dim else ()) + ("xi",)
    ew = np.stack([_wv.energy_weight(float(v), xi_arr) for v in a_vals])
    data_vars["energy_weight"] = (wdims, ew if a_dim else ew[0])
    data_vars["wavelet_energy"] = (wdims, w_energy if a_dim else w_energy[0])
    if orientation_map:
        for name, arr in maps.items():
            data_vars[name] = (("x", "y", "z"), arr)
        for ax, arr in zip(axes, idx_maps):
            data_vars[f"argmax_{ax}"] = (("x", "y", "z"), arr)
        if local:
            data_vars["orientation_votes"] = (dims, votes)
    coords = {"theta": theta, "phi": phi, "xi": xi_arr}
    if a_dim:
        coords["a"] = a_vals
    attrs = dict(a=list(map(float, a_vals)) if a_dim else float(a_vals[0]), mode=mode,
                 spacing=list(spacing), truncate=truncate,
                 device=_be.device_name(dev), halo=list(halo),
                 fft_shape=list(blocks[0].fft_shape), n_blocks=len(blocks),
                 n_kernels=int(len(ks.inverse)), n_unique_kernels=int(len(ks.xi)),
                 method="parseval" if passes[0].parseval else "irfft",
                 isotropic_xi="xi = 1 is isotropic: its orientations are one kernel, computed once",
                 **_versions(dev))
    if unit is not None:
        attrs["unit"] = unit
    if orientation_map:
        attrs["orientation_rule"] = orientation_rule
        if local:
            attrs["integration_scale"] = list(map(float, sigmas)) if a_dim else float(sigmas[0])
            if a_dim:
                attrs["orientation_a"] = list(map(float, map_scales))
            attrs["orientation_boundary"] = "mean" if len(passes) > 1 else "mode"
            if len(passes) > 1:
                attrs["orientation_mean"] = shifted
                attrs["orientation_halo"] = list(passes[1].halo)
                attrs["orientation_fft_shape"] = list(passes[1].blocks[0].fft_shape)
                attrs["orientation_n_blocks"] = len(passes[1].blocks)
    ds = xr.Dataset(data_vars, coords=coords, attrs=attrs)
    return annotate(ds)
