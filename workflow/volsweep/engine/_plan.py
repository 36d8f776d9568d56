"""The sweep plan shared by the CPU and GPU engines: kernels, kernel table, blocks, jobs.

Nothing here depends on a backend: :mod:`volsweep.engine` (the facade) builds a
:class:`Job` per call and a list of :class:`Block` s, and each engine
(:mod:`volsweep.engine._cpu`, :mod:`volsweep.engine._gpu`) runs ``run_block(volume,
block, job, progress)``.  The per-kernel spectrum constants are one float table whose
columns are named (:data:`COLUMNS`); the numba kernels index it through the module
constants below and the CUDA source through the ``#define`` s of :func:`cuda_defines`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from . import wavelet as _wv
from volsweep.tiling import fft_lengths, next_fast_len, plan_tiles

# ----------------------------------------------------------------------------- kernel table
#: Columns of the kernel table (:func:`kernel_table`), in order.
COLUMNS = (
    "dwx", "dwy", "dwz",            # ω per index step along x, y, z
    "perx", "pery", "perz",         # image period 2π/s along x, y, z
    "ux", "uy", "uz",               # wavelet axis u
    "a2", "c", "ae2", "pcut",       # a², a²(ξ²−1), (a·min(ξ, 1))², p_cut
    "scale",                        # (2π)^{3/2} a³ ξ / (sx sy sz) · norm
    "gx", "gy", "gz",               # largest image index per axis
    "xlim", "alpha", "inv_alpha",   # p_cut·(M⁻¹)_xx, M_zz, 1/M_zz  (M = a²I + c·uuᵀ)
)
NP = len(COLUMNS)
(DWX, DWY, DWZ, PERX, PERY, PERZ, UX, UY, UZ, A2, C, AE2, PCUT, SCALE, GX, GY, GZ, XLIM, ALPHA,
 INV_ALPHA) = range(NP)


def cuda_defines() -> str:
    """``#define P_<NAME> <column>`` lines for the CUDA source, and ``NP``."""
    lines = [f"#define P_{n.upper()} {i}" for i, n in enumerate(COLUMNS)]
    return "\n".join(lines + [f"#define NP {NP}"]) + "\n"


# ----------------------------------------------------------------------------- kernels
@dataclass(frozen=True)
class KernelSet:
    """The outer product of the grid (a, θ, φ, ξ), deduplicated.

    ``rep`` holds, per unique kernel, the lowest flat (C-order) index of the grid with
    that kernel, in increasing order; ``inverse`` maps every flat index to its unique
    kernel.  ψ depends on (θ, φ) only through ±u, and at ξ = 1 not at all
    (``docs/definitions.md``): every orientation of ξ = 1 is one kernel.  Without an
    ``a`` axis the flat index is the one of (θ, φ, ξ).
    """

    u: np.ndarray  # (K, 3)
    xi: np.ndarray  # (K,)
    a: np.ndarray  # (K,)
    rep: np.ndarray  # (K,)
    inverse: np.ndarray  # (n_a*n_theta*n_phi*n_xi,)

    @property
    def isotropic(self) -> np.ndarray:
        """Per unique kernel: True where ξ = 1 (no direction)."""
        return self.xi == 1.0


def unique_kernels(theta, phi, xi, a=None) -> KernelSet:
    """Deduplicate (a, θ, φ, ξ): ψ depends on (θ, φ) only through ±u, and not at all at ξ = 1.

    Examples
    --------
    >>> ks = unique_kernels([np.pi / 2, -np.pi / 2], [0.0, 1.0], [1.5])
    >>> len(ks.rep)
    1
    >>> len(unique_kernels([0.0, 0.4], [0.0, 1.0], [1.0]).rep)  # ξ = 1: one kernel
    1
    """
    a_vals = np.atleast_1d(np.asarray(1.0 if a is None else a, dtype=np.float64))
    aa, t, p, x = np.meshgrid(a_vals, np.asarray(theta, float), np.asarray(phi, float),
                              np.asarray(xi, float), indexing="ij")
    u = _wv.axis_vector(t.ravel(), p.ravel())
    x, aa = x.ravel(), aa.ravel()
    key = np.round(u, 9) + 0.0
    # Canonical sign: first clearly non-zero component positive.
    first = np.argmax(np.abs(key) > 1e-9, axis=1)
    sign = np.sign(key[np.arange(len(key)), first])
    sign[sign == 0] = 1.0
    key = np.round(key * sign[:, None], 9) + 0.0
    key[x == 1.0] = 0.0  # isotropic: the axis does not matter
    rows = np.concatenate([aa[:, None], key, x[:, None]], axis=1)
    _, first_idx, inverse = np.unique(rows, axis=0, return_index=True, return_inverse=True)
    order = np.argsort(first_idx)  # unique kernels sorted by their lowest flat index
    rank = np.empty_like(order)
    rank[order] = np.arange(len(order))
    rep = first_idx[order]
    return KernelSet(u=u[rep], xi=x[rep], a=aa[rep], rep=rep, inverse=rank[inverse.ravel()])


def kernel_table(ks: KernelSet, spacing, fft_shape, norm: float) -> np.ndarray:
    """Per-kernel spectrum constants, float64 ``(K, NP)``; columns :data:`COLUMNS`.

    ``norm`` multiplies the spectrum (the GPU folds cuFFT's unnormalised 1/N in here).
    The pruning constants are those of ``p = ωᵀMω`` (``M = a²I + c·uuᵀ``):
    ``xlim = p_cut·(M⁻¹)_xx`` (no term below it in ω_x²), ``alpha = M_zz``.

    Examples
    --------
    >>> t = kernel_table(unique_kernels([0.0], [0.0], [2.0], a=[1.5]), (1, 1, 1), (8, 8, 8), 1.0)
    >>> t.shape == (1, NP), float(t[0, A2])
    (True, 2.25)
    """
    out = np.empty((len(ks.xi), NP), dtype=np.float64)
    for a, x in {(float(a), float(x)) for a, x in zip(ks.a, ks.xi)}:  # all but u: (a, ξ) only
        k = _wv.spectrum_constants(a, x, spacing, fft_shape, (0.0, 0.0, 0.0), norm)
        sel = (ks.a == a) & (ks.xi == x)
        out[sel, DWX:DWZ + 1] = k["dw"]
        out[sel, PERX:PERZ + 1] = k["period"]
        out[sel, A2], out[sel, C], out[sel, AE2], out[sel, PCUT] = k["a2"], k["c"], k["ae2"], k["pcut"]
        out[sel, SCALE] = k["scale"]
        out[sel, GX:GZ + 1] = k["G"]
    out[:, UX:UZ + 1] = ks.u
    a2, c, pcut = out[:, A2], out[:, C], out[:, PCUT]
    out[:, XLIM] = pcut * (1.0 - c * ks.u[:, 0] ** 2 / (a2 + c)) / a2
    out[:, ALPHA] = a2 + c * ks.u[:, 2] ** 2
    out[:, INV_ALPHA] = 1.0 / out[:, ALPHA]
    return out


def parseval_weights(vhat, fft_shape, xp):
    """|V̂|² times the half-spectrum multiplicity over N, so Σ w·K̂² = Σ G² (float32)."""
    nz = fft_shape[2]
    w = xp.full(vhat.shape[2], 2.0, dtype=xp.float32)
    w[0] = 1.0
    if nz % 2 == 0:
        w[-1] = 1.0
    n = float(np.prod(fft_shape))
    return (vhat.real * vhat.real + vhat.imag * vhat.imag) * (w / xp.float32(n))


def dc_spectrum(table: np.ndarray) -> np.ndarray:
    """K̂ at frequency 0 per kernel (float64, host, vectorised over kernels)."""
    out = np.zeros(len(table))
    G = table[:, GX:GZ + 1].astype(int)
    gmax = G.max(axis=0)
    for ix in range(-gmax[0], gmax[0] + 1):
        for iy in range(-gmax[1], gmax[1] + 1):
            for iz in range(-gmax[2], gmax[2] + 1):
                g = np.array([ix, iy, iz])
                ok = np.all(np.abs(g) <= G, axis=1)
                w = g * table[:, PERX:PERZ + 1]
                b = np.sum(w * w, axis=1)
                t = np.sum(w * table[:, UX:UZ + 1], axis=1)
                p = table[:, A2] * b + table[:, C] * t * t
                keep = ok & (table[:, AE2] * b < table[:, PCUT])
                out += np.where(keep, p * np.exp(-0.5 * p), 0.0)
    return out * table[:, SCALE]


# ----------------------------------------------------------------------------- geometry
@dataclass(frozen=True)
class Block:
    """One FFT block: where it starts in the volume, its FFT shape and its core."""

    start: tuple[int, int, int]
    fft_shape: tuple[int, int, int]
    core: tuple[slice, slice, slice]  # in volume coordinates
    core_offset: tuple[int, int, int]  # core's first voxel inside the block
    #: per axis: transformed at the volume's own period (``wrap``, no halo)
    periodic: tuple[bool, bool, bool] = (False, False, False)

    @property
    def core_shape(self):
        return tuple(s.stop - s.start for s in self.core)


def _is_fast(n: int) -> bool:
    return next_fast_len(n) == n


def make_blocks(shape, halo, mode, tile_shape=None, force_period=False, *, device="cpu") -> list[Block]:
    """FFT blocks covering ``shape``: one (untiled) or a tile plan with halos.

    A ``wrap`` axis covered by one tile is transformed at its own period (no halo)
    when its length is fast, when ``2·halo ≥ length`` or when ``force_period``.  The
    other axes take ``device``'s fast FFT lengths (:func:`volsweep.tiling.fft_lengths`).
    """
    tile_shape = tuple(shape) if tile_shape is None else tuple(tile_shape)
    blocks = []
    for t in plan_tiles(shape, tile_shape, 0):
        start, need, off, per = [], [], [], []
        for sl, n, h in zip(t.core, shape, halo):
            whole = sl.start == 0 and sl.stop == n
            period = mode == "wrap" and whole and (force_period or _is_fast(n) or 2 * h >= n)
            per.append(bool(period))
            if period:
                start.append(0), need.append(n), off.append(0)
            else:
                start.append(sl.start - h), need.append(sl.stop - sl.start + 2 * h)
                off.append(h)
        fshape = fft_lengths(need, device=device, keep=[i for i, p in enumerate(per) if p])
        blocks.append(Block(tuple(start), fshape, t.core, tuple(off), tuple(per)))
    return blocks


# ----------------------------------------------------------------------------- local energy
#: Gaussian of the integration scale truncated at this many standard deviations
#: (scipy.ndimage.gaussian_filter's default ``truncate``).
INTEGRATION_TRUNCATE = 4.0


def gaussian_taps(sigma: float, spacing, truncate: float = INTEGRATION_TRUNCATE):
    """Per axis, the normalised sampled Gaussian of standard deviation ``sigma`` (physical units).

    Taps ``w(m) ∝ exp(−(m·s)²/(2σ²))`` for ``|m| ≤ ⌈truncate·σ/s⌉``, summing to 1 (float64);
    ``sigma = 0`` gives the single tap 1.

    Examples
    --------
    >>> [len(w) for w in gaussian_taps(1.0, (1.0, 0.5, 2.0))]
    [9, 17, 5]
    """
    out = []
    for s in spacing:
        if sigma <= 0:
            out.append(np.ones(1))
            continue
        r = int(math.ceil(truncate * sigma / s * (1 - 1e-12)))
        m = np.arange(-r, r + 1) * s
        w = np.exp(-0.5 * (m / sigma) ** 2)
        out.append(w / w.sum())
    return out


def taps_halo(taps) -> tuple[int, int, int]:
    """Voxels per axis the integration reaches beyond a voxel."""
    return tuple(len(w) // 2 for w in taps)


_DEVICE_TAPS: dict = {}


def _taps_on(xp, taps):
    """The float32 taps as an ``xp`` array, copied to a device once (a copy per kernel
    would wait for the device's queue to drain)."""
    key = (xp.__name__, taps.astype(np.float32).tobytes())
    if key not in _DEVICE_TAPS:
        _DEVICE_TAPS[key] = xp.asarray(taps.astype(np.float32))
    return _DEVICE_TAPS[key]


def local_energy(g, block: Block, taps, inv_energy: float, xp, ndi):
    """``Σ_m w(m)·G(x+m)²/wavelet_energy`` over the block's core, float32 (``docs/definitions.md``).

    ``g`` is the block's response (first three axes indexed like the block; a GPU buffer
    may be wider along z); ``taps`` the per-axis Gaussian (:func:`gaussian_taps`).  An axis
    at its own period wraps; on the others the core's margin of the taps' reach lies in
    the block (the facade adds it to the halo).  ``xp``/``ndi``: NumPy and scipy.ndimage
    or CuPy and cupyx.scipy.ndimage.
    """
    reach = taps_halo(taps)
    sl = []
    for d in range(3):
        o, c = block.core_offset[d], block.core_shape[d]
        sl.append(slice(0, c) if block.periodic[d] else slice(o - reach[d], o + c + reach[d]))
    r = g[tuple(sl)]
    e = r * r
    e *= xp.float32(inv_energy)
    for d in range(3):
        if len(taps[d]) == 1:
            continue
        w = _taps_on(xp, taps[d])
        periodic = block.periodic[d]
        e = ndi.correlate1d(e, w, axis=d, mode="wrap" if periodic else "constant")
        if not periodic:
            keep = [slice(None)] * 3
            keep[d] = slice(reach[d], reach[d] + block.core_shape[d])
            e = e[tuple(keep)]
    return e


# ----------------------------------------------------------------------------- job
#: Orientation rules: the local energy of the normalised responses (default), or the
#: per-voxel maximum of the raw response (biased at fibre edges; kept to compare).
ORIENTATION_RULES = ("local_energy", "response")


@dataclass
class Job:
    """What one call asks of an engine, identical for every block."""

    ks: KernelSet
    spacing: tuple[float, float, float]
    mode: str
    parseval: bool = False
    omap: str | None = None  # None or one of ORIENTATION_RULES
    taps: list = field(default_factory=list)  # per kernel: per-axis Gaussian taps
    inv_energy: np.ndarray | None = None  # per kernel: 1 / wavelet_energy(a, ξ)
    directional: np.ndarray | None = None  # per kernel: takes part in the local-energy argmax

    @property
    def n_kernels(self) -> int:
        return len(self.ks.xi)


#: Voxels per slab of :func:`unravel_argmax`, and the device bytes its slabs take (int32
#: indices and quotients, a uint16 result).
UNRAVEL_SLAB_VOXELS = 1 << 24
UNRAVEL_SLAB_BYTES = UNRAVEL_SLAB_VOXELS * (4 + 4 + 2)


def unravel_argmax(arg, rep, grid, out, slab_voxels: int = UNRAVEL_SLAB_VOXELS):
    """Unique-kernel index per voxel → one uint16 grid index per grid axis, into host arrays ``out``.

    Runs where ``arg`` lives (NumPy or CuPy), in x-slabs of ``slab_voxels`` voxels, in
    int32: a GPU map crosses to the host as uint16 arrays (2 bytes a voxel and axis).
    """
    from volsweep import backend as _be

    xp = _be.get_array_module(arg)
    rep_d = xp.asarray(rep.astype(np.int32))
    strides = [int(np.prod(grid[i + 1:])) for i in range(len(grid))]
    plane = max(1, int(np.prod(arg.shape[1:])))
    step = max(1, slab_voxels // plane)
    for x0 in range(0, arg.shape[0], step):
        rest = rep_d[arg[x0:x0 + step]]
        for o, st in zip(out, strides):
            q = rest // np.int32(st)
            rest = rest - q * np.int32(st)
            _be.copy_to_host(q.astype(xp.uint16), o[x0:x0 + step])


def map_to_host(pmap, names, core, maps, idx_maps=None, rep=None, grid=None) -> None:
    """A block's orientation map (:meth:`run_block`'s second result) into the host maps.

    ``names``: the arrays of ``pmap`` to copy into ``maps[name][core]``; with ``idx_maps``,
    also its ``arg`` unravelled (:func:`unravel_argmax`) into ``idx_maps[i][core]``.
    """
    from volsweep import backend as _be

    for name in names:
        _be.copy_to_host(pmap[name], maps[name][core])
    if idx_maps is not None:
        unravel_argmax(pmap["arg"], rep, grid, [m[core] for m in idx_maps])
