"""Chunk plans: cores, halos, boundary-mode reads and fast FFT sizes.

One plan serves every blocked computation in volsweep: the sweep's spatial
tiles, the thickness chunks and the blocked FFT convolution.  A tile is a
*core* (the voxels it owns, disjoint from every other tile's) grown by a
*halo* on each side; the halo beyond the volume's edge is filled from the
boundary mode, exactly as ``scipy.ndimage`` would see it on the whole volume.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np

MODES = ("reflect", "constant", "wrap")
FFT_PRIMES = (2, 3, 5, 7)


def normalize_halo(halo, ndim: int) -> tuple[tuple[int, int], ...]:
    """Per-axis ``(before, after)`` halo from an int, a per-axis int or pairs.

    Examples
    --------
    >>> normalize_halo(2, 3)
    ((2, 2), (2, 2), (2, 2))
    >>> normalize_halo((1, (0, 3)), 2)
    ((1, 1), (0, 3))
    """
    if np.isscalar(halo):
        halo = (halo,) * ndim
    if len(halo) != ndim:
        raise ValueError(f"halo must have {ndim} entries, got halo={halo!r}")
    out = []
    for h in halo:
        pair = (h, h) if np.isscalar(h) else tuple(h)
        if len(pair) != 2 or any(int(v) != v or v < 0 for v in pair):
            raise ValueError(f"halo entries must be non-negative integers, got halo={halo!r}")
        out.append((int(pair[0]), int(pair[1])))
    return tuple(out)


def next_fast_len(n: int, primes=FFT_PRIMES) -> int:
    """Smallest integer ``>= n`` whose prime factors are all in ``primes``.

    Examples
    --------
    >>> next_fast_len(202)
    210
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got n={n}")
    best = None
    # Enumerate products of the primes up to the first power of 2 >= n.
    limit = 1 << max(0, (n - 1).bit_length())
    stack = [(1, 0)]
    while stack:
        value, start = stack.pop()
        if value >= n:
            if best is None or value < best:
                best = value
            continue
        for i in range(start, len(primes)):
            nxt = value * primes[i]
            if nxt <= limit:
                stack.append((nxt, i))
    return best


#: On a GPU an axis may grow this much past its shortest 7-smooth length for a faster FFT.
GPU_FFT_GROWTH = 1.25
#: Per voxel, what the GPU sweep spends besides the inverse FFT (the spectrum's product with
#: a kernel, picoseconds, ``benchmarks/bench_kernel_breakdown.py``): part of a shape's cost.
GPU_SPECTRUM_PS = 3.4


def _cufft_ps(shape) -> float | None:
    """Modelled picoseconds of a 3D cuFFT C2R transform of ``shape`` (None: off the tables)."""
    from volsweep import _cufft_lengths as cl

    nx, ny, nz = shape
    if nx not in cl.XY or ny not in cl.XY or nz not in cl.Z:
        return None
    return math.prod(shape) * (GPU_SPECTRUM_PS + (cl.XY[nx] + cl.XY[ny]) / 2 + cl.Z[nz] - cl.XY[640])


def fft_lengths(lengths, *, device="cpu", keep=()) -> tuple[int, ...]:
    """Fast FFT shape of at least ``lengths``; the axes in ``keep`` stay as they are.

    On the CPU every axis takes its shortest 7-smooth length.  On a GPU ("cuda"), a 3D
    shape takes, among the 7-smooth lengths up to ``GPU_FFT_GROWTH`` times those, the
    combination cuFFT transforms fastest by the measured tables of
    :mod:`volsweep._cufft_lengths` (its lengths differ by up to 2.5x in time per voxel);
    off the tables, the CPU's.  The choice is a fixed function of the lengths, so a
    rerun takes the same shape.

    Examples
    --------
    >>> fft_lengths((968, 968, 368))
    (972, 972, 375)
    >>> fft_lengths((968, 968, 368), device="cuda")
    (1000, 1000, 378)
    """
    base = tuple(n if i in keep else next_fast_len(n) for i, n in enumerate(lengths))
    if device != "cuda" or len(base) != 3 or _cufft_ps(base) is None:
        return base
    from volsweep import _cufft_lengths as cl

    options = []
    for i, (n, b) in enumerate(zip(lengths, base)):
        table = cl.Z if i == 2 else cl.XY
        options.append([b] if i in keep else [m for m in table if n <= m <= b * GPU_FFT_GROWTH])
    return min(itertools.product(*options), key=lambda s: (_cufft_ps(s), s))


def fast_shape(shape, halo=0, *, device="cpu") -> tuple[int, ...]:
    """Fast FFT shape (:func:`fft_lengths`) of at least ``shape`` grown by the halo on both sides."""
    pairs = normalize_halo(halo, len(shape))
    return fft_lengths([n + b + a for n, (b, a) in zip(shape, pairs)], device=device)


@dataclass(frozen=True)
class Tile:
    """One block of a plan.

    Attributes
    ----------
    index : tuple of int
        Position in the tile grid (C order over the grid is the plan's order).
    core : tuple of slice
        Voxels this tile owns, in volume coordinates.
    start, stop : tuple of int
        The halo-grown extent in volume coordinates; may lie outside the volume.
    core_in_block : tuple of slice
        Where the core sits in the halo-grown block.
    """

    index: tuple[int, ...]
    core: tuple[slice, ...]
    start: tuple[int, ...]
    stop: tuple[int, ...]
    core_in_block: tuple[slice, ...]

    @property
    def block_shape(self) -> tuple[int, ...]:
        return tuple(b - a for a, b in zip(self.start, self.stop))

    @property
    def core_shape(self) -> tuple[int, ...]:
        return tuple(s.stop - s.start for s in self.core)

    def clipped(self, shape) -> tuple[tuple[slice, ...], tuple[slice, ...]]:
        """The halo-grown block cut to a volume of ``shape`` (slices in volume
        coordinates), and where the core sits in that cut block.

        Examples
        --------
        >>> t = plan_tiles((10, 7), (4, 7), halo=1)[0]
        >>> t.clipped((10, 7))
        ((slice(0, 5, None), slice(0, 7, None)), (slice(0, 4, None), slice(0, 7, None)))
        """
        start = [max(0, a) for a in self.start]
        stop = [min(int(n), b) for b, n in zip(self.stop, shape)]
        block = tuple(slice(a, b) for a, b in zip(start, stop))
        core = tuple(slice(c.start - a, c.stop - a) for c, a in zip(self.core, start))
        return block, core


def plan_tiles(shape, tile_shape, halo=0) -> list[Tile]:
    """Split ``shape`` into cores of at most ``tile_shape``, each grown by ``halo``.

    The order is C order over the tile grid, so merges are deterministic.

    Examples
    --------
    >>> tiles = plan_tiles((10, 7), (4, 7), halo=1)
    >>> [t.core for t in tiles][1]
    (slice(4, 8, None), slice(0, 7, None))
    >>> tiles[1].start, tiles[1].stop
    ((3, -1), (9, 8))
    """
    return list(iter_tiles(shape, tile_shape, halo))


def iter_tiles(shape, tile_shape, halo=0):
    """The tiles of :func:`plan_tiles`, in the same order, made one at a time.

    A plan of many small tiles held as a list costs memory of its own (about
    1 kB a tile); a memory-bounded loop iterates instead.

    Examples
    --------
    >>> [t.core for t in iter_tiles((5,), (2,))]
    [(slice(0, 2, None),), (slice(2, 4, None),), (slice(4, 5, None),)]
    """
    shape = tuple(int(n) for n in shape)
    if len(tile_shape) != len(shape) or any(int(t) < 1 for t in tile_shape):
        raise ValueError(f"tile_shape must be {len(shape)} positive integers, got {tile_shape!r}")
    pairs = normalize_halo(halo, len(shape))
    counts = [math.ceil(n / int(t)) for n, t in zip(shape, tile_shape)]
    for index in itertools.product(*(range(c) for c in counts)):
        core, start, stop, inner = [], [], [], []
        for i, n, t, (hb, ha) in zip(index, shape, tile_shape, pairs):
            lo, hi = i * int(t), min(n, (i + 1) * int(t))
            core.append(slice(lo, hi))
            start.append(lo - hb)
            stop.append(hi + ha)
            inner.append(slice(hb, hb + hi - lo))
        yield Tile(tuple(index), tuple(core), tuple(start), tuple(stop), tuple(inner))


def _mode_indices(start: int, stop: int, n: int, mode: str) -> np.ndarray:
    """Source index for each position in ``[start, stop)``; -1 where ``constant`` fills."""
    idx = np.arange(start, stop)
    if mode == "wrap":
        return np.mod(idx, n)
    if mode == "reflect":  # scipy.ndimage 'reflect': d c b a | a b c d | d c b a
        period = np.mod(idx, 2 * n)
        return np.where(period < n, period, 2 * n - 1 - period)
    if mode == "constant":
        return np.where((idx >= 0) & (idx < n), idx, -1)
    raise ValueError(f"mode must be one of {MODES}, got mode={mode!r}")


def source_box(start, stop, shape, mode: str = "reflect"):
    """The bounding box (slices) of the voxels :func:`read_block` reads, or None if none.

    Examples
    --------
    >>> source_box((-2, 3), (6, 5), (4, 10), mode="reflect")
    (slice(0, 4, None), slice(3, 5, None))
    """
    inside = [ix[ix >= 0] for ix in (_mode_indices(a, b, n, mode) for a, b, n in zip(start, stop, shape))]
    if any(ix.size == 0 for ix in inside):
        return None
    return tuple(slice(int(ix.min()), int(ix.max()) + 1) for ix in inside)


def read_block(source, start, stop, mode: str = "reflect", cval: float = 0.0, *, xp=np,
               dtype=None):
    """Read ``source[start:stop]`` with out-of-volume voxels taken from ``mode``.

    ``source`` is anything sliceable with a ``shape`` (NumPy, CuPy, Zarr, h5py);
    only the bounding box of the needed voxels is read from it.  The result
    is an ``xp`` array of shape ``stop - start``.

    Examples
    --------
    >>> read_block(np.arange(4), (-2,), (6,), mode="reflect")
    array([1, 0, 0, 1, 2, 3, 3, 2])
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got mode={mode!r}")
    shape = source.shape
    per_axis = [_mode_indices(a, b, n, mode) for a, b, n in zip(start, stop, shape)]
    box = source_box(start, stop, shape, mode)
    if box is None:  # block entirely outside (constant mode)
        out_dtype = dtype or source.dtype
        return xp.full(tuple(b - a for a, b in zip(start, stop)), cval, dtype=out_dtype)
    data = xp.asarray(source[box])
    if dtype is not None:
        data = data.astype(dtype, copy=False)
    local = [np.where(ix >= 0, ix - s.start, 0) for ix, s in zip(per_axis, box)]
    trivial = all(np.array_equal(li, np.arange(data.shape[k])) for k, li in enumerate(local))
    # xp.ix_: NumPy's ix_ would try to turn CuPy index arrays into NumPy ones (a TypeError).
    block = data if trivial else data[xp.ix_(*[xp.asarray(li) for li in local])]
    if mode == "constant":
        mask = [ix < 0 for ix in per_axis]
        if any(m.any() for m in mask):
            block = block.copy() if block is data else block
            for axis, m in enumerate(mask):
                if m.any():
                    sl = [slice(None)] * block.ndim
                    sl[axis] = xp.asarray(np.nonzero(m)[0])
                    block[tuple(sl)] = cval
    return block


def tile_shape_for_budget(shape, halo, bytes_per_voxel: float, budget: float, *,
                          device="cpu") -> tuple[int, ...]:
    """Largest tile core whose fast padded block fits in ``budget`` bytes.

    Halves the longest core axis until ``prod(fast_shape(core, halo)) *
    bytes_per_voxel <= budget`` (the FFT shapes of ``device``); the whole volume is
    returned when it fits.

    Raises
    ------
    MemoryError
        When even a one-voxel core with its halo does not fit.
    """
    core = [int(n) for n in shape]
    pairs = normalize_halo(halo, len(core))

    def cost(c):
        return math.prod(fast_shape(c, pairs, device=device)) * bytes_per_voxel

    while cost(core) > budget:
        axis = int(np.argmax(core))
        if core[axis] == 1:
            raise MemoryError(
                f"memory_limit={budget:.0f} bytes cannot hold even a 1-voxel tile with halo "
                f"{pairs} ({cost(core):.0f} bytes needed)")
        core[axis] = math.ceil(core[axis] / 2)
    return tuple(core)
