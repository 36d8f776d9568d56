"""The FFT-cached (θ, φ, ξ) sweep engine.

Per job (a parameter block, optionally a spatial tile of it):

1. read the volume padded by the boundary mode to a fast FFT shape (``read_block``),
   FFT it once;
2. per unique kernel: the kernel's *sampled* spectrum is generated on the fly and
   multiplied in (no spatial kernel, no forward FFT per kernel), one inverse real
   FFT, one fused pass of float64 partial statistics over the core voxels;
3. partial statistics stay on the device until the block ends, then merge in a
   fixed order (:mod:`volsweep.stats`).

In ``wrap`` mode an axis whose length is a fast FFT size is transformed at its own
period (exact for any kernel size, no halo).  With ``wrap`` and only
``energy``/``std``/``mean`` asked for, the statistics come from the spectrum by
Parseval with no inverse FFT at all.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass

import numpy as np

from . import backend as _be
from . import wavelet as _wv
from .stats import STATS, Partial, check_stats, finalize, merge
from .tiling import MODES, fast_shape, next_fast_len, plan_tiles, read_block, tile_shape_for_budget

log = logging.getLogger("volsweep")

#: Statistics that Parseval gives from the spectrum alone.
PARSEVAL_STATS = frozenset({"energy", "std", "mean"})
#: Seconds between progress lines (and the only host syncs inside a block).
PROGRESS_EVERY_S = 5.0
#: Working bytes per voxel of the padded block (image spectrum + product spectrum
#: + FFT work area and temporaries), used to tile under ``memory_limit``.
BYTES_PER_PADDED_VOXEL = 16
#: Extra bytes per voxel for ``orientation_map`` (float32 response + int32 index).
BYTES_PER_OMAP_VOXEL = 8


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


# ----------------------------------------------------------------------------- kernels
@dataclass(frozen=True)
class KernelSet:
    """The outer product of the grid, deduplicated.

    ``rep`` holds, per unique kernel, the lowest flat (C-order) index of the
    grid with that kernel, in increasing order; ``inverse`` maps every flat index
    to its unique kernel.
    """

    u: np.ndarray  # (K, 3)
    xi: np.ndarray  # (K,)
    rep: np.ndarray  # (K,)
    inverse: np.ndarray  # (n_theta*n_phi*n_xi,)


def unique_kernels(theta, phi, xi) -> KernelSet:
    """Deduplicate (θ, φ, ξ): ψ depends on (θ, φ) only through ±u.

    Examples
    --------
    >>> ks = unique_kernels([np.pi / 2, -np.pi / 2], [0.0, 1.0], [1.0])
    >>> len(ks.rep)
    1
    """
    t, p, x = np.meshgrid(theta, phi, xi, indexing="ij")
    u = _wv.axis_vector(t.ravel(), p.ravel())
    x = x.ravel()
    key = np.round(u, 9) + 0.0
    # Canonical sign: first clearly non-zero component positive.
    first = np.argmax(np.abs(key) > 1e-9, axis=1)
    sign = np.sign(key[np.arange(len(key)), first])
    sign[sign == 0] = 1.0
    key = np.round(key * sign[:, None], 9) + 0.0
    rows = np.concatenate([key, x[:, None]], axis=1)
    _, first_idx, inverse = np.unique(rows, axis=0, return_index=True, return_inverse=True)
    order = np.argsort(first_idx)  # unique kernels sorted by their lowest flat index
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    rep = first_idx[order]
    return KernelSet(u=u[rep], xi=x[rep], rep=rep, inverse=rank[inverse.ravel()])


def kernel_params(ks: KernelSet, a: float, spacing, fft_shape, norm: float) -> np.ndarray:
    """Per-kernel spectrum constants as a table ``(K, 20)`` (layout shared with the GPU).

    Columns: dω (3), image period (3), u (3), a², c, a_eff², p_cut, scale, G (3), then the
    exact pruning constants of ``p = ωᵀMω`` (``M = a²I + c·uuᵀ``): ``p_cut·(M⁻¹)_xx``
    (no term below it in ω_x²), ``α = M_zz`` and ``1/α``.
    """
    out = np.empty((len(ks.xi), 20), dtype=np.float64)
    cache = {}
    for x in np.unique(ks.xi):  # everything but u depends on ξ only
        k = _wv.spectrum_constants(a, float(x), spacing, fft_shape, (0.0, 0.0, 0.0), norm)
        cache[x] = (*k["dw"], *k["period"], 0.0, 0.0, 0.0, k["a2"], k["c"], k["ae2"], k["pcut"],
                    k["scale"], *k["G"], 0.0, 0.0, 0.0)
    for x, row in cache.items():
        out[ks.xi == x] = row
    out[:, 6:9] = ks.u
    a2, c, pcut = out[:, 9], out[:, 10], out[:, 12]
    out[:, 17] = pcut * (1.0 - c * ks.u[:, 0] ** 2 / (a2 + c)) / a2
    out[:, 18] = a2 + c * ks.u[:, 2] ** 2
    out[:, 19] = 1.0 / out[:, 18]
    return out


# ----------------------------------------------------------------------------- geometry
@dataclass(frozen=True)
class Block:
    """One FFT block: where it starts in the volume, its FFT shape and its core."""

    start: tuple[int, int, int]
    fft_shape: tuple[int, int, int]
    core: tuple[slice, slice, slice]  # in volume coordinates
    core_offset: tuple[int, int, int]  # core's first voxel inside the block

    @property
    def core_shape(self):
        return tuple(s.stop - s.start for s in self.core)


def _is_fast(n: int) -> bool:
    return next_fast_len(n) == n


def make_blocks(shape, halo, mode, tile_shape=None, force_period=False) -> list[Block]:
    """FFT blocks covering ``shape``: one (untiled) or a tile plan with halos.

    A ``wrap`` axis covered by one tile is transformed at its own period (no halo)
    when its length is fast, when ``2·halo ≥ length`` or when ``force_period``.
    """
    tile_shape = tuple(shape) if tile_shape is None else tuple(tile_shape)
    blocks = []
    for t in plan_tiles(shape, tile_shape, 0):
        start, fshape, off = [], [], []
        for d, (sl, n, h) in enumerate(zip(t.core, shape, halo)):
            whole = sl.start == 0 and sl.stop == n
            period = mode == "wrap" and whole and (force_period or _is_fast(n) or 2 * h >= n)
            if period:
                start.append(0), fshape.append(n), off.append(0)
            else:
                start.append(sl.start - h), fshape.append(next_fast_len(sl.stop - sl.start + 2 * h))
                off.append(h)
        blocks.append(Block(tuple(start), tuple(fshape), t.core, tuple(off)))
    return blocks


def _versions(device: str) -> dict:
    import scipy

    from . import __version__

    out = {"numpy_version": np.__version__, "scipy_version": scipy.__version__,
           "volsweep_version": __version__}
    if device == "cuda":
        import cupy

        out["cupy_version"] = cupy.__version__
    try:
        import numba

        out["numba_version"] = numba.__version__
    except Exception:  # numba is optional for correctness
        pass
    return out


class _Progress:
    """Periodic 'kernels done, kernels/s, ETA' lines on the ``volsweep`` logger."""

    def __init__(self, total: int, enabled: bool, sync=None):
        self.total, self.enabled, self.sync = total, enabled, sync
        self.t0 = self.last = time.perf_counter()
        self.done = 0

    def step(self, n=1):
        self.done += n
        if not self.enabled:
            return
        now = time.perf_counter()
        if now - self.last >= PROGRESS_EVERY_S or self.done == self.total:
            if self.sync is not None:
                self.sync()  # the only sync: counts kernels the device really finished
                now = time.perf_counter()
            self.last = now
            rate = self.done / max(now - self.t0, 1e-9)
            eta = (self.total - self.done) / rate if rate > 0 else float("inf")
            log.info("sweep: %d/%d kernels, %.1f kernels/s, ETA %.0f s", self.done, self.total, rate, eta)


# ----------------------------------------------------------------------------- CPU
def _numba():
    try:
        import numba
    except Exception:  # pragma: no cover - numba is a dependency; the NumPy path is a fallback
        return None
    return numba


_CPU_KERNELS = None


def _cpu_kernels():
    """The numba kernels of :mod:`volsweep._engine_cpu` (compiled once, cached on disk); None without numba."""
    global _CPU_KERNELS
    if _CPU_KERNELS is not None:
        return _CPU_KERNELS
    if _numba() is None:
        return None
    from ._engine_cpu import CpuKernels

    _CPU_KERNELS = CpuKernels()
    return _CPU_KERNELS


def _parseval_weights(vhat, fft_shape, xp):
    """|V̂|² times the half-spectrum multiplicity over N, so Σ w·K̂² = Σ G² (float32)."""
    nz = fft_shape[2]
    w = xp.full(vhat.shape[2], 2.0, dtype=xp.float32)
    w[0] = 1.0
    if nz % 2 == 0:
        w[-1] = 1.0
    n = float(np.prod(fft_shape))
    return (vhat.real * vhat.real + vhat.imag * vhat.imag) * (w / xp.float32(n))


def _dc_spectrum(params: np.ndarray) -> np.ndarray:
    """K̂ at frequency 0 per kernel (float64, host, vectorised over kernels)."""
    out = np.zeros(len(params))
    G = params[:, 14:17].astype(int)
    gmax = G.max(axis=0)
    for ix in range(-gmax[0], gmax[0] + 1):
        for iy in range(-gmax[1], gmax[1] + 1):
            for iz in range(-gmax[2], gmax[2] + 1):
                g = np.array([ix, iy, iz])
                ok = np.all(np.abs(g) <= G, axis=1)
                w = g * params[:, 3:6]
                b = np.sum(w * w, axis=1)
                t = np.sum(w * params[:, 6:9], axis=1)
                p = params[:, 9] * b + params[:, 10] * t * t
                keep = ok & (params[:, 11] * b < params[:, 12])
                out += np.where(keep, p * np.exp(-0.5 * p), 0.0)
    return out * params[:, 13]


class _CpuEngine:
    """NumPy/scipy.fft (float32, all workers) with numba-fused spectrum and statistics."""

    name = "cpu"

    def run_block(self, volume, block: Block, mode, ks, a, spacing, parseval, omap, progress):
        import scipy.fft as sfft

        N = block.fft_shape
        data = read_block(volume, block.start, tuple(s + n for s, n in zip(block.start, N)),
                          mode, xp=np, dtype=np.float32)
        vhat = sfft.rfftn(data, workers=-1)
        del data
        K = len(ks.xi)
        cx, cy, cz = block.core_shape
        ncore = cx * cy * cz
        kern = _cpu_kernels()
        params = kernel_params(ks, a, spacing, N, 1.0)  # scipy's irfftn applies the 1/N
        prm32 = params.astype(np.float32)
        if parseval:
            pw = _parseval_weights(vhat, N, np)
            dc = _dc_spectrum(params) * float(vhat[0, 0, 0].real)
            del vhat
            sumsq = np.empty(K)
            for j in range(K):
                if kern is not None:
                    sumsq[j] = kern.parseval(pw, N[0], N[1], prm32[j])
                else:
                    s = _wv.sampled_spectrum(N, a, *_angles_of(ks.u[j]), ks.xi[j], spacing)
                    sumsq[j] = float(np.sum(pw * s * s))
                progress.step()
            nanv = np.full(K, np.nan)
            return Partial(ncore, dc, sumsq, nanv, nanv.copy()), None
        res = np.empty((K, 4))
        if omap:
            resp = np.full(block.core_shape, -np.inf, np.float32)
            arg = np.zeros(block.core_shape, np.int32)
        prod = np.empty_like(vhat)  # complex64 product, consumed in place by irfftn
        vr, pr = vhat.view(np.float32), prod.view(np.float32)
        ox, oy, oz = block.core_offset
        for j in range(K):
            if kern is not None:
                kern.mul_spectrum(vr, pr, N[0], N[1], prm32[j])
            else:
                s = _wv.sampled_spectrum(N, a, *_angles_of(ks.u[j]), ks.xi[j], spacing)
                np.multiply(vhat, s.astype(np.float32), out=prod)
            g = sfft.irfftn(prod, s=N, workers=-1, overwrite_x=True)
            if kern is not None:
                res[j] = kern.core_stats(g, ox, oy, oz, cx, cy, cz)
                if omap:
                    kern.update_omap(g, ox, oy, oz, resp, arg, j)
            else:
                core = g[ox:ox + cx, oy:oy + cy, oz:oz + cz]
                res[j] = Partial.of(core[None]).sum[0], float(np.sum(core.astype(np.float64) ** 2)), \
                    float(core.max()), float(core.min())
                if omap:
                    better = core > resp
                    resp[better] = core[better]
                    arg[better] = j
            del g
            progress.step()
        pmap = (resp, arg) if omap else None
        return Partial.from_array(ncore, res), pmap


#: Voxels per slab when unravelling the orientation map (bounds the temporaries).
UNRAVEL_SLAB = 1 << 24


def _unravel_argmax(arg, rep, grid, out):
    """Unique-kernel index per voxel → (θ, φ, ξ) indices as uint16 into the host arrays ``out``.

    Runs where ``arg`` lives (NumPy or CuPy), in x-slabs of ``UNRAVEL_SLAB`` voxels, in
    int32: a GPU map crosses to the host as three uint16 arrays (6 bytes a voxel) instead
    of int32 indices unravelled on the host.
    """
    xp = _be.get_array_module(arg)
    rep_d = xp.asarray(rep.astype(np.int32))
    n_phi_xi, n_xi = np.int32(grid[1] * grid[2]), np.int32(grid[2])
    plane = max(1, int(np.prod(arg.shape[1:])))
    step = max(1, UNRAVEL_SLAB // plane)
    for x0 in range(0, arg.shape[0], step):
        flat = rep_d[arg[x0:x0 + step]]
        it = flat // n_phi_xi
        rest = flat - it * n_phi_xi
        ip = rest // n_xi
        ix = rest - ip * n_xi
        for o, v in zip(out, (it, ip, ix)):
            o[x0:x0 + step] = _be.to_numpy(v.astype(xp.uint16))


def _angles_of(u):
    """(θ, φ) with axis_vector(θ, φ) = u (used by the NumPy fallback only)."""
    theta = -math.asin(max(-1.0, min(1.0, float(u[1]))))
    phi = math.atan2(float(u[2]), float(u[0]))
    return theta, phi


# ----------------------------------------------------------------------------- driver
def _bytes_per_voxel(orientation_map: bool) -> int:
    return BYTES_PER_PADDED_VOXEL + (BYTES_PER_OMAP_VOXEL if orientation_map else 0)


def memory_needs(shape, theta, phi, xi, *, a=1.0, spacing=(1, 1, 1),
                 truncate=_wv.DEFAULT_TRUNCATE, orientation_map=False) -> tuple[int, int]:
    """Bytes :func:`sweep` plans for the untiled volume and for its smallest (1-voxel) tile.

    The same model :func:`sweep` tiles by under ``memory_limit``.

    Examples
    --------
    >>> untiled, smallest = memory_needs((40, 30, 20), [0.0], [0.0], [1.0])
    >>> untiled > smallest
    True
    """
    halo = _wv.halo_for(a, np.atleast_1d(np.asarray(xi, dtype=np.float64)), theta, phi,
                        _wv.check_spacing(spacing), truncate)
    bpv = _bytes_per_voxel(orientation_map)
    return (math.prod(fast_shape(shape, halo)) * bpv,
            math.prod(fast_shape((1,) * len(shape), halo)) * bpv)


def sweep(volume, theta, phi, xi, *, a=1.0, spacing=(1, 1, 1), mode="reflect",
          truncate=_wv.DEFAULT_TRUNCATE, stats=STATS, device="auto", memory_limit=None,
          progress=True, orientation_map=False):
    """Statistics of the volume's responses to a (θ, φ, ξ) grid of stretched Mexican hats.

    Parameters
    ----------
    volume : (X, Y, Z) array_like or cupy.ndarray
        Real, finite voxels; axis 0 is x.  Cast to float32 for the FFTs.
    theta, phi, xi : 1D sequences
        Angles in radians and elongations (> 0); the output spans their outer product.
    a : float
        Scale (> 0), in the units of ``spacing``.
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
        Log 'kernels done, kernels/s, ETA' every few seconds on logger ``volsweep``.
    orientation_map : bool
        Also return per-voxel ``response_max`` and ``argmax_theta/phi/xi``
        (ties to the lowest flat (θ, φ, ξ) index).

    Returns
    -------
    xarray.Dataset
        Dims (theta, phi, xi): the asked statistics (float64); ``energy_weight(xi)``,
        ``wavelet_energy(xi)``; with ``orientation_map`` also dims (x, y, z).

    Examples
    --------
    >>> import numpy as np
    >>> v = np.random.default_rng(0).random((16, 15, 14))
    >>> ds = sweep(v, [0.0, 0.5], [0.0], [1.0, 2.0], a=1.5, device="cpu", progress=False)
    >>> ds["energy"].dims
    ('theta', 'phi', 'xi')
    """
    import xarray as xr

    # --- validation, before any work
    theta = _check_angles("theta", theta)
    phi = _check_angles("phi", phi)
    xi_arr = np.atleast_1d(np.asarray(xi, dtype=np.float64)) if np.asarray(xi).dtype.kind in "iuf" else None
    if xi_arr is None or xi_arr.ndim != 1 or xi_arr.size == 0:
        raise TypeError(f"xi must be a non-empty 1D sequence of numbers, got xi={xi!r}")
    if not np.all(np.isfinite(xi_arr)) or np.any(xi_arr <= 0):
        raise ValueError(f"xi must be finite and > 0, got xi={xi!r}")
    if xi_arr.size > np.iinfo(np.uint16).max:
        raise ValueError(f"xi has more than 65535 values, got len(xi)={xi_arr.size}")
    a = _check_scalar("a", a)
    truncate = _check_scalar("truncate", truncate)
    spacing = _wv.check_spacing(spacing)
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got mode={mode!r}")
    stats = check_stats(stats)
    if memory_limit is not None:
        memory_limit = _check_scalar("memory_limit", memory_limit)
    dev = _be.resolve_device(device, volume if _be.is_cupy_array(volume) else None)
    if device == "auto" and not _be.is_cupy_array(volume):
        dev = _be.resolve_device("auto")
    volume = _check_volume(volume)
    shape = tuple(int(n) for n in volume.shape)

    # --- kernels, halo, blocks
    ks = unique_kernels(theta, phi, xi_arr)
    halo = _wv.halo_for(a, xi_arr, theta, phi, spacing, truncate)
    bpv = _bytes_per_voxel(orientation_map)
    if dev == "cuda":
        from . import _engine_gpu

        engine = _engine_gpu.GpuEngine()
        if memory_limit is None:
            memory_limit = engine.default_budget()
    else:
        engine = _CpuEngine()
    tile_shape = None
    if memory_limit is not None:
        tile_shape = tile_shape_for_budget(shape, halo, bpv, memory_limit)
    untiled = tile_shape is None or tuple(tile_shape) == shape
    parseval = (mode == "wrap" and set(stats) <= PARSEVAL_STATS and untiled and not orientation_map)
    blocks = make_blocks(shape, halo, mode, None if untiled else tile_shape, force_period=parseval)

    # --- run
    prog = _Progress(len(ks.xi) * len(blocks), progress, getattr(engine, "sync", None))
    if progress:
        log.info("sweep: %d kernels (%d unique) x %d block(s) of FFT shape %s, halo %s, device %s",
                 len(ks.inverse), len(ks.xi), len(blocks), blocks[0].fft_shape, halo, dev)
    grid = (len(theta), len(phi), len(xi_arr))
    parts, resp, amap = [], None, None
    if orientation_map:
        resp = np.empty(shape, np.float32)
        amap = [np.empty(shape, np.uint16) for _ in range(3)]
    for blk in blocks:
        part, pmap = engine.run_block(volume, blk, mode, ks, a, spacing, parseval, orientation_map, prog)
        parts.append(part)
        if pmap is not None:
            resp[blk.core] = _be.to_numpy(pmap[0])
            _unravel_argmax(pmap[1], ks.rep, grid, [m[blk.core] for m in amap])
            del pmap
    total = merge(parts)
    values = finalize(total, stats)

    # --- dataset
    data_vars = {s: (("theta", "phi", "xi"), values[s][ks.inverse].reshape(grid)) for s in stats}
    data_vars["energy_weight"] = (("xi",), _wv.energy_weight(a, xi_arr))
    data_vars["wavelet_energy"] = (("xi",), _wv.wavelet_energy(a, xi_arr, spacing))
    if orientation_map:
        data_vars["response_max"] = (("x", "y", "z"), resp)
        data_vars["argmax_theta"] = (("x", "y", "z"), amap[0])
        data_vars["argmax_phi"] = (("x", "y", "z"), amap[1])
        data_vars["argmax_xi"] = (("x", "y", "z"), amap[2])
    attrs = dict(a=a, mode=mode, spacing=list(spacing), truncate=truncate,
                 device=_be.device_name(dev), halo=list(halo),
                 fft_shape=list(blocks[0].fft_shape), n_blocks=len(blocks),
                 n_kernels=int(len(ks.inverse)), n_unique_kernels=int(len(ks.xi)),
                 method="parseval" if parseval else "irfft", **_versions(dev))
    ds = xr.Dataset(data_vars, coords={"theta": theta, "phi": phi, "xi": xi_arr}, attrs=attrs)
    for s in stats:
        ds[s].attrs["long_name"] = {"energy": "sum of G^2", "std": "population std of G",
                                    "max": "max of G", "mean": "mean of G", "min": "min of G"}[s]
    return ds
