"""Chunk plan: tiles cover the volume exactly once, halo reads equal np.pad, fast sizes."""

import itertools
import math

import numpy as np
import pytest

from volsweep.tiling import (fast_shape, next_fast_len, normalize_halo, plan_tiles, read_block,
                             tile_shape_for_budget)

NP_PAD_MODE = {"reflect": "symmetric", "wrap": "wrap", "constant": "constant"}


@pytest.mark.parametrize("shape,tile,halo", [
    ((10,), (3,), 0),
    ((10, 7), (4, 7), 1),
    ((9, 8, 5), (4, 3, 2), ((1, 2), 0, (3, 0))),
    ((5, 6, 7), (5, 6, 7), 2),
    ((1, 13), (1, 4), (0, (12, 0))),
])
def test_plan_tiles_cover_disjoint_and_halo(shape, tile, halo):
    tiles = plan_tiles(shape, tile, halo)
    pairs = normalize_halo(halo, len(shape))
    count = np.zeros(shape, dtype=int)
    for t in tiles:
        count[t.core] += 1
        assert all(1 <= n <= m for n, m in zip(t.core_shape, tile))
        for ax, ((hb, ha), s) in enumerate(zip(pairs, t.core)):
            assert t.start[ax] == s.start - hb and t.stop[ax] == s.stop + ha
            inner = t.core_in_block[ax]
            assert inner.start == hb and inner.stop - inner.start == s.stop - s.start
        assert t.block_shape == tuple(b - a for a, b in zip(t.start, t.stop))
    assert (count == 1).all()
    # C order over the grid
    assert [t.index for t in tiles] == sorted(t.index for t in tiles)
    grid = tuple(math.ceil(n / k) for n, k in zip(shape, tile))
    assert len(tiles) == math.prod(grid)


@pytest.mark.parametrize("shape,tile,halo", [((10, 7), (4, 7), 1),
                                             ((9, 8, 5), (4, 3, 2), ((1, 2), 0, (3, 0)))])
def test_clipped_block_is_the_grown_block_inside_the_volume(shape, tile, halo):
    # The cut block is the halo-grown block's voxels that lie in the volume, and its core
    # is the tile's core.
    volume = np.arange(math.prod(shape)).reshape(shape)
    pairs = normalize_halo(halo, len(shape))
    padded = np.pad(volume, pairs, constant_values=-1)
    for t in plan_tiles(shape, tile, halo):
        region, core = t.clipped(shape)
        grown = padded[tuple(slice(a + hb, b + hb)
                             for a, b, (hb, _) in zip(t.start, t.stop, pairs))]
        inside = [np.flatnonzero((np.arange(a, b) >= 0) & (np.arange(a, b) < n))
                  for a, b, n in zip(t.start, t.stop, shape)]
        np.testing.assert_array_equal(volume[region], grown[np.ix_(*inside)])
        np.testing.assert_array_equal(volume[region][core], volume[t.core])


def test_plan_tiles_errors():
    with pytest.raises(ValueError, match="tile_shape"):
        plan_tiles((4, 4), (0, 2))
    with pytest.raises(ValueError, match="tile_shape"):
        plan_tiles((4, 4), (2,))
    with pytest.raises(ValueError, match="halo"):
        plan_tiles((4, 4), (2, 2), halo=(1, -1))
    with pytest.raises(ValueError, match="halo"):
        normalize_halo((1, 2, 3), 2)


def _ref_block(x, start, stop, mode, cval):
    pad = [(max(0, -a), max(0, b - n)) for a, b, n in zip(start, stop, x.shape)]
    kw = {"constant_values": cval} if mode == "constant" else {}
    padded = np.pad(x, pad, mode=NP_PAD_MODE[mode], **kw)
    sl = tuple(slice(a + p[0], b + p[0]) for a, b, p in zip(start, stop, pad))
    return padded[sl]


@pytest.mark.parametrize("mode", ["reflect", "constant", "wrap"])
def test_read_block_matches_np_pad(mode):
    rng = np.random.default_rng(3)
    for shape in [(1,), (4,), (3, 5), (2, 3, 4), (1, 4, 1)]:
        x = rng.integers(0, 100, shape).astype(np.float64)
        ranges = [(-9, 2), (-3, 0), (0, 1), (0, 3), (1, 5), (-2, 12), (4, 15), (7, 9), (-11, -6)]
        for combo in itertools.islice(itertools.product(ranges, repeat=len(shape)), 200):
            start = [a for a, _ in combo]
            stop = [b for _, b in combo]
            got = read_block(x, start, stop, mode=mode, cval=-1.5)
            ref = _ref_block(x, start, stop, mode, -1.5)
            assert got.shape == ref.shape
            np.testing.assert_array_equal(got, ref, err_msg=f"{mode} {shape} {combo}")


def test_read_block_dtype_and_source_untouched():
    x = np.arange(12, dtype=np.uint8).reshape(3, 4)
    before = x.copy()
    got = read_block(x, (-1, -1), (4, 5), mode="constant", dtype=np.float32)
    assert got.dtype == np.float32
    np.testing.assert_array_equal(got, _ref_block(x.astype(np.float32), (-1, -1), (4, 5),
                                                  "constant", 0.0))
    got[...] = 99
    np.testing.assert_array_equal(x, before)
    # entirely outside, constant mode
    out = read_block(x, (5, 0), (7, 2), mode="constant", cval=3)
    assert out.shape == (2, 2) and (out == 3).all()
    with pytest.raises(ValueError, match="mode"):
        read_block(x, (0, 0), (1, 1), mode="mirror")


@pytest.mark.parametrize("n", list(range(1, 130)) + [202, 1000, 1919, 4097])
def test_next_fast_len(n):
    m = next_fast_len(n)
    assert m >= n
    r = m
    for p in (2, 3, 5, 7):
        while r % p == 0:
            r //= p
    assert r == 1
    # smallest: no 7-smooth number in [n, m)
    for k in range(n, m):
        r = k
        for p in (2, 3, 5, 7):
            while r % p == 0:
                r //= p
        assert r != 1
    with pytest.raises(ValueError):
        next_fast_len(0)


def test_next_fast_len_known():
    assert next_fast_len(202) == 210
    assert next_fast_len(1919) == 1920
    assert next_fast_len(11, primes=(2, 3, 5)) == 12
    assert fast_shape((100, 199), ((1, 0), 0)) == (105, 200)


def test_tile_shape_for_budget():
    shape, halo, bpv = (200, 120, 50), ((6, 0), 3, 0), 24
    whole = math.prod(fast_shape(shape, halo)) * bpv
    assert tile_shape_for_budget(shape, halo, bpv, whole) == shape
    for budget in (whole / 3, whole / 17, 2e5):
        core = tile_shape_for_budget(shape, halo, bpv, budget)
        assert math.prod(fast_shape(core, halo)) * bpv <= budget
        assert all(1 <= c <= n for c, n in zip(core, shape))
    with pytest.raises(MemoryError, match="memory_limit"):
        tile_shape_for_budget(shape, 40, bpv, 1000)


@pytest.mark.gpu
def test_read_block_cupy_matches_numpy():
    import cupy as cp

    rng = np.random.default_rng(4)
    x = rng.random((5, 6, 7))
    for mode in ("reflect", "constant", "wrap"):
        for start, stop in [((-3, 0, 2), (4, 9, 12)), ((1, 1, 1), (3, 3, 3)), ((6, 0, 0), (8, 2, 2))]:
            got = read_block(cp.asarray(x), start, stop, mode=mode, cval=2.0, xp=cp)
            assert isinstance(got, cp.ndarray)
            np.testing.assert_array_equal(got.get(), read_block(x, start, stop, mode=mode, cval=2.0))


@pytest.mark.parametrize("need", [(968, 968, 368), (300, 251, 97), (1201, 130, 50), (97, 1500, 1000)])
def test_gpu_fft_lengths_are_the_fastest_modelled_within_the_growth(need):
    from volsweep import _cufft_lengths as cl
    from volsweep.tiling import GPU_FFT_GROWTH, _cufft_ps, fft_lengths

    base = fft_lengths(need)
    assert base == tuple(next_fast_len(n) for n in need)
    got = fft_lengths(need, device="cuda")
    assert fft_lengths(need, device="cuda") == got  # a fixed function of the lengths
    for n, b, g in zip(need, base, got):
        assert n <= g <= b * GPU_FFT_GROWTH and next_fast_len(g) == g
    # every 7-smooth shape in the same bounds, enumerated by stepping next_fast_len
    axes = []
    for i, (n, b) in enumerate(zip(need, base)):
        table, m, out = (cl.Z if i == 2 else cl.XY), n, []
        while (m := next_fast_len(m)) <= b * GPU_FFT_GROWTH:
            if m in table:
                out.append(m)
            m += 1
        axes.append(out)
    best = min(_cufft_ps(s) for s in itertools.product(*axes))
    assert _cufft_ps(got) == best <= _cufft_ps(base)


def test_gpu_fft_lengths_keep_axes_and_leave_the_tables_to_the_cpu_rule():
    from volsweep.engine import make_blocks
    from volsweep.tiling import fft_lengths

    assert fft_lengths((968, 968, 368), device="cuda", keep=[2])[2] == 368
    assert fft_lengths((3000, 968, 368), device="cuda") == fft_lengths((3000, 968, 368))  # off the table
    assert fft_lengths((50, 40), device="cuda") == (50, 40)  # 2D: the CPU rule
    blocks = make_blocks((800, 800, 200), (84, 84, 84), "reflect", device="cuda")
    assert blocks[0].fft_shape == fft_lengths((968, 968, 368), device="cuda") != (972, 972, 375)
