"""volsweep.fftconvolve: equal to scipy.signal.fftconvolve, within a memory budget."""

import tracemalloc

import numpy as np
import pytest
import scipy.signal

from volsweep import fftconvolve
from volsweep.fftconv import MemoryLimitError, estimate_peak_bytes

MiB = 2**20


def _rand(rng, shape, is_complex, dtype=np.float64):
    x = rng.standard_normal(shape).astype(dtype)
    if is_complex:
        x = x + 1j * rng.standard_normal(shape).astype(dtype)
    return x


def _rel(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return float(np.linalg.norm((a - b).ravel()) / np.linalg.norm(b.ravel()))


def _peak(fn, *args, **kw):
    """tracemalloc peak of new allocations made by fn (inputs already exist)."""
    tracemalloc.start()
    try:
        out = fn(*args, **kw)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return out, peak


def _shapes(rng, nd, mode, variant):
    s1 = tuple(int(v) for v in rng.choice([3, 5, 7, 9, 11], nd))
    s2 = tuple(int(v) for v in rng.choice([1, 3, 5, 7], nd))
    if mode == "valid":
        if variant == 0:
            s2 = tuple(min(a, b) for a, b in zip(s1, s2))
        else:  # in2 the larger: scipy swaps
            s1, s2 = tuple(min(a, b) for a, b in zip(s1, s2)), s1
    elif variant == 1:
        s1, s2 = s2, s1
    return s1, s2


@pytest.fixture
def no_slack(monkeypatch):
    """Drop the cost model's fixed slack, so that tiny inputs can be forced into blocks."""
    import volsweep.fftconv as mod

    monkeypatch.setattr(mod, "_SLACK_BYTES", 0)
    monkeypatch.setattr(mod, "_SLACK_WHOLE", 0)


@pytest.mark.parametrize("nd", [1, 2, 3])
@pytest.mark.parametrize("mode", ["full", "same", "valid"])
@pytest.mark.parametrize("c1,c2", [(False, False), (False, True), (True, False), (True, True)])
def test_matches_scipy_whole_and_blocked(nd, mode, c1, c2, no_slack):
    rng = np.random.default_rng([nd, len(mode), c1, c2])
    for variant in (0, 1):
        s1, s2 = _shapes(rng, nd, mode, variant)
        a, b = _rand(rng, s1, c1), _rand(rng, s2, c2)
        ref = scipy.signal.fftconvolve(a, b, mode)
        out = fftconvolve(a, b, mode)
        assert out.shape == ref.shape and out.dtype == ref.dtype
        np.testing.assert_allclose(out, ref, rtol=1e-10, atol=1e-12 * np.abs(ref).max())
        # a memory_limit under the one-shot cost forces overlap-save blocks
        _, whole = estimate_peak_bytes(a, b, mode)
        for limit in (whole - 1, whole // 2):
            try:
                path, planned = estimate_peak_bytes(a, b, mode, memory_limit=limit)
            except MemoryLimitError:
                continue
            assert path == "blocked" and planned <= limit
            blocked = fftconvolve(a, b, mode, memory_limit=limit)
            assert blocked.shape == ref.shape and blocked.dtype == ref.dtype
            np.testing.assert_allclose(blocked, ref, rtol=1e-10, atol=1e-12 * np.abs(ref).max())


@pytest.mark.parametrize("mode", ["full", "same", "valid"])
def test_blocked_many_tiles_3d(mode):
    rng = np.random.default_rng(7)
    a, b = _rand(rng, (40, 33, 27), False), _rand(rng, (7, 5, 4), False)
    ref = scipy.signal.fftconvolve(a, b, mode)
    out_bytes = ref.nbytes
    for limit in (out_bytes + 150_000, out_bytes + 300_000):
        path, planned = estimate_peak_bytes(a, b, mode, memory_limit=limit)
        assert path == "blocked" and planned <= limit
        out, peak = _peak(fftconvolve, a, b, mode, memory_limit=limit)
        assert peak <= limit
        np.testing.assert_allclose(out, ref, rtol=1e-10, atol=1e-12 * np.abs(ref).max())


# ----------------------------------------------------------------------- the Raspberry Pi case


@pytest.fixture(scope="module")
def pi_case():
    rng = np.random.default_rng(2024)
    image = rng.integers(0, 256, (640, 480), dtype=np.uint8)
    y, x = np.mgrid[-640:640, -480:480].astype(np.float64)
    gabor = np.exp(-(x**2 + y**2) / (2 * 150.0**2)) * np.exp(1j * (0.07 * x + 0.03 * y))
    ref = scipy.signal.fftconvolve(gabor, image, mode="valid")
    assert ref.shape == (641, 481)
    return gabor, image, ref


def test_pi_case_complex128_peak_under_64mib(pi_case):
    gabor, image, ref = pi_case
    for a, b in ((gabor, image), (image, gabor)):  # valid: either order, scipy swaps
        out, peak = _peak(fftconvolve, a, b, "valid")
        assert out.dtype == np.complex128 and out.shape == ref.shape
        assert peak < 64 * MiB, f"peak {peak / MiB:.1f} MiB"
        assert _rel(out, ref) < 1e-6


def test_pi_case_complex64(pi_case):
    gabor, image, ref = pi_case
    out, peak = _peak(fftconvolve, gabor, image, "valid", dtype=np.complex64)
    assert out.dtype == np.complex64
    assert peak < 32 * MiB, f"peak {peak / MiB:.1f} MiB"
    assert _rel(out, ref) < 1e-4


def test_pi_case_memory_limit(pi_case):
    gabor, image, ref = pi_case
    limit = 24 * MiB
    out, peak = _peak(fftconvolve, gabor, image, "valid", memory_limit=limit)
    assert estimate_peak_bytes(gabor, image, "valid", memory_limit=limit)[0] == "blocked"
    assert peak <= limit, f"peak {peak / MiB:.1f} MiB"
    assert _rel(out, ref) < 1e-6


# ----------------------------------------------------------------------- 3D under a budget


@pytest.mark.parametrize("complex_in", [False, True])
def test_3d_memory_limit_peak_and_equal(complex_in):
    rng = np.random.default_rng(11)
    vol = _rand(rng, (64, 56, 40), complex_in)
    ker = _rand(rng, (9, 7, 5), False)
    unbounded, peak_whole = _peak(fftconvolve, vol, ker, "same")
    limit = unbounded.nbytes + (peak_whole - unbounded.nbytes) // 4
    assert estimate_peak_bytes(vol, ker, "same", memory_limit=limit)[0] == "blocked"
    out, peak = _peak(fftconvolve, vol, ker, "same", memory_limit=limit)
    assert peak <= limit, f"peak {peak} > limit {limit}"
    np.testing.assert_allclose(out, unbounded, rtol=1e-10, atol=1e-11 * np.abs(unbounded).max())
    np.testing.assert_allclose(out, scipy.signal.fftconvolve(vol, ker, "same"), rtol=1e-9,
                               atol=1e-11 * np.abs(unbounded).max())


@pytest.mark.parametrize("mode", ["full", "same", "valid"])
@pytest.mark.parametrize("complex_in", [False, True])
def test_whole_path_peak_at_most_two_padded_buffers(mode, complex_in):
    rng = np.random.default_rng(5)
    a, b = _rand(rng, (41, 37, 29), complex_in), _rand(rng, (11, 9, 7), False)
    out, peak = _peak(fftconvolve, a, b, mode)
    path, planned = estimate_peak_bytes(a, b, mode)
    assert path == "whole" and peak <= planned
    full = [n1 + n2 - 1 for n1, n2 in zip(a.shape, b.shape)]
    from volsweep.tiling import next_fast_len
    two_complex_buffers = 2 * 16 * np.prod([next_fast_len(n) for n in full])
    assert peak <= two_complex_buffers + 16 * 1024  # + small arrays and Python objects
    ref, peak_scipy = _peak(scipy.signal.fftconvolve, a, b, mode)
    assert peak < peak_scipy
    np.testing.assert_allclose(out, ref, rtol=1e-10, atol=1e-12 * np.abs(ref).max())


# ----------------------------------------------------------------------- axes, dtype


def test_axes_and_broadcasting_match_scipy(no_slack):
    rng = np.random.default_rng(9)
    cases = [
        ((6, 9, 5), (6, 4, 3), (1, 2), "full"),
        ((6, 9, 5), (1, 4, 3), (1, 2), "full"),
        ((6, 9, 5), (1, 4, 3), [1, -1], "same"),
        ((6, 9, 5), (6, 4, 3), [1, -1], "same"),
        ((6, 9, 5), (6, 9, 3), (-1,), "valid"),
        ((5, 8), (1, 3), None, "valid"),
        ((1, 8, 3), (4, 3, 1), None, "same"),
        ((1, 5), (3, 1), None, "full"),
        ((7, 5), (3, 5), 0, "same"),
    ]
    for s1, s2, axes, mode in cases:
        a, b = _rand(rng, s1, False), _rand(rng, s2, True)
        ref = scipy.signal.fftconvolve(a, b, mode, axes=axes)
        out = fftconvolve(a, b, mode, axes=axes)
        assert out.shape == ref.shape, (s1, s2, axes, mode)
        np.testing.assert_allclose(out, ref, rtol=1e-10, atol=1e-12 * np.abs(ref).max())
        path, whole = estimate_peak_bytes(a, b, mode, axes=axes)
        if not hasattr(out, "shape"):
            continue
        try:
            blocked = fftconvolve(a, b, mode, axes=axes, memory_limit=whole - 1)
        except MemoryLimitError:
            continue
        np.testing.assert_allclose(blocked, ref, rtol=1e-10, atol=1e-12 * np.abs(ref).max())


def test_dtypes():
    rng = np.random.default_rng(1)
    a32, b32 = _rand(rng, (30, 20), False, np.float32), _rand(rng, (5, 4), False, np.float32)
    ref = scipy.signal.fftconvolve(a32.astype(np.float64), b32.astype(np.float64), "same")
    out = fftconvolve(a32, b32, "same")
    assert out.dtype == np.float32 and _rel(out, ref) < 1e-5
    out = fftconvolve(a32, b32, "same", dtype=np.complex64)
    assert out.dtype == np.complex64 and _rel(out, ref) < 1e-5
    ai = rng.integers(0, 9, (12,))
    out = fftconvolve(ai, [1, 2, 1])
    assert out.dtype == np.float64
    np.testing.assert_allclose(out, np.convolve(ai, [1, 2, 1]), atol=1e-9)
    ac = _rand(rng, (30, 20), True)
    out = fftconvolve(ac, b32, "valid", dtype="complex64")
    assert out.dtype == np.complex64
    assert _rel(out, scipy.signal.fftconvolve(ac, b32.astype(np.float64), "valid")) < 1e-4


# ----------------------------------------------------------------------- errors


def test_errors_name_argument_and_value():
    a, b = np.ones((5, 5)), np.ones((3, 3))
    with pytest.raises(ValueError, match=r"mode.*'circular'"):
        fftconvolve(a, b, "circular")
    with pytest.raises(ValueError, match=r"dimensions.*in1.ndim=2, in2.ndim=1"):
        fftconvolve(a, np.ones(3))
    with pytest.raises(ValueError, match=r"in2 must not be empty.*\(3, 0\)"):
        fftconvolve(a, np.ones((3, 0)))
    with pytest.raises(ValueError, match=r"0-D"):
        fftconvolve(np.float64(1.0), np.float64(2.0))
    with pytest.raises(ValueError, match=r"axes.*axes=\[2\]"):
        fftconvolve(a, b, axes=[2])
    with pytest.raises(ValueError, match=r"axes.*axes=\[0, -2\]"):
        fftconvolve(a, b, axes=[0, -2])
    with pytest.raises(ValueError, match=r"axes.*axes=\[\]"):
        fftconvolve(a, b, axes=[])
    with pytest.raises(TypeError, match=r"axes.*'x'"):
        fftconvolve(a, b, axes="x")
    with pytest.raises(ValueError, match=r"valid.*in1.shape=\(5, 2\)"):
        fftconvolve(np.ones((5, 2)), np.ones((3, 3)), "valid")
    with pytest.raises(ValueError, match=r"incompatible.*axis 0"):
        fftconvolve(np.ones((5, 4)), np.ones((3, 3)), axes=1)
    for bad in (0, -5):
        with pytest.raises(ValueError, match=rf"memory_limit={bad}"):
            fftconvolve(a, b, memory_limit=bad)
    with pytest.raises(TypeError, match=r"memory_limit='1GB'"):
        fftconvolve(a, b, memory_limit="1GB")
    with pytest.raises(MemoryLimitError, match=r"memory_limit=100 bytes is too small"):
        fftconvolve(a, b, memory_limit=100)
    with pytest.raises(ValueError):  # MemoryLimitError is a ValueError (and a MemoryError)
        fftconvolve(a, b, memory_limit=100)
    with pytest.raises(TypeError, match=r"dtype=.*int32"):
        fftconvolve(a, b, dtype=np.int32)
    with pytest.raises(TypeError, match=r"dtype=float32 is real but the inputs are complex"):
        fftconvolve(a + 0j, b, dtype=np.float32)
    with pytest.raises(TypeError, match=r"in1.dtype=<U1"):
        fftconvolve(np.array(["a", "b"]), np.ones(2))


# ----------------------------------------------------------------------- GPU


@pytest.mark.gpu
@pytest.mark.parametrize("nd", [1, 2, 3])
@pytest.mark.parametrize("mode", ["full", "same", "valid"])
@pytest.mark.parametrize("c1,c2", [(False, False), (True, False), (True, True)])
def test_gpu_matches_cupyx_and_scipy(nd, mode, c1, c2):
    import cupy as cp
    import cupyx.scipy.signal

    rng = np.random.default_rng([nd, len(mode), c1, c2, 99])
    for variant in (0, 1):
        s1, s2 = _shapes(rng, nd, mode, variant)
        a, b = _rand(rng, s1, c1), _rand(rng, s2, c2)
        ref = scipy.signal.fftconvolve(a, b, mode)
        da, db = cp.asarray(a), cp.asarray(b)
        ref_cp = cupyx.scipy.signal.fftconvolve(da, db, mode).get()
        for limit in (None, ref.nbytes + 300_000):
            out = fftconvolve(da, db, mode, memory_limit=limit)
            assert isinstance(out, cp.ndarray) and out.shape == ref.shape
            assert out.dtype == ref.dtype
            tol = 1e-10 * np.abs(ref).max()
            np.testing.assert_allclose(out.get(), ref, rtol=1e-9, atol=tol)
            np.testing.assert_allclose(out.get(), ref_cp, rtol=1e-9, atol=tol)


class _PoolPeak:
    """Peak bytes in use of a fresh CuPy pool (cuFFT work areas included)."""

    def __init__(self, cp):
        self.cp = cp
        self.pool = cp.cuda.MemoryPool()
        self.peak = 0

    def malloc(self, size):
        mem = self.pool.malloc(size)
        self.peak = max(self.peak, self.pool.used_bytes())
        return mem

    def __enter__(self):
        self.cp.fft.config.get_plan_cache().clear()
        self.cp.cuda.set_allocator(self.malloc)
        return self

    def __exit__(self, *exc):
        self.cp.cuda.Device().synchronize()
        self.cp.fft.config.get_plan_cache().clear()
        self.cp.cuda.set_allocator(self.cp.get_default_memory_pool().malloc)


@pytest.mark.gpu
def test_gpu_pi_case_and_3d_budget(pi_case):
    import cupy as cp

    gabor, image, ref = pi_case
    dg, di = cp.asarray(gabor), cp.asarray(image)
    for dtype, tol in ((None, 1e-6), (np.complex64, 1e-4)):
        with _PoolPeak(cp) as meter:
            meter.peak = 0
            base = meter.pool.used_bytes()
            out = fftconvolve(dg, di, "valid", dtype=dtype)
        assert _rel(out.get(), ref) < tol
        print(f"GPU pi case dtype={dtype}: pool peak {(meter.peak - base) / MiB:.1f} MiB")
    rng = np.random.default_rng(12)
    vol = cp.asarray(_rand(rng, (96, 80, 64), False, np.float32))
    ker = cp.asarray(_rand(rng, (15, 11, 9), False, np.float32))
    unbounded = fftconvolve(vol, ker, "same")
    _, whole = estimate_peak_bytes(vol, ker, "same")
    limit = whole // 3
    with _PoolPeak(cp) as meter:
        out = fftconvolve(vol, ker, "same", memory_limit=limit)
    print(f"GPU 3D: limit {limit / MiB:.2f} MiB, pool peak {meter.peak / MiB:.2f} MiB")
    assert meter.peak <= limit
    assert _rel(out.get(), unbounded.get()) < 1e-5
