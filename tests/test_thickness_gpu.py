"""GPU local thickness: CuPy == CPU == oracle (gpu-marked), plus the CUDA source
emulated on the CPU (compiled with g++, one thread after another) so the kernels'
logic is checked on machines without a GPU."""

from __future__ import annotations

import ctypes
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from thickness_oracle import oracle_d2_int, oracle_local_thickness  # noqa: E402

from volsweep import thickness as T  # noqa: E402
from volsweep.thickness import _tables as TAB  # noqa: E402
from volsweep.thickness._gpu import CUDA_SOURCE  # noqa: E402
from volsweep.tiling import plan_tiles  # noqa: E402


def blobs(shape, porosity=0.5, sigma=2.0, seed=0):
    from scipy import ndimage as ndi

    g = ndi.gaussian_filter(np.random.default_rng(seed).random(shape), sigma)
    return g > np.quantile(g, 1 - porosity)


# ----------------------------------------------------------------------------- emulation
SHIM = r"""
#include <cmath>
#include <cstring>
using std::isfinite;
struct D3 { unsigned x, y, z; };
static D3 threadIdx, blockIdx, blockDim;
#define __global__
#define __device__
#define __forceinline__ inline
#define __restrict__
static inline double __dmul_rn(double a, double b) { volatile double r = a * b; return r; }
static inline double __dadd_rn(double a, double b) { volatile double r = a + b; return r; }
static inline double __longlong_as_double(long long v) { double d; memcpy(&d, &v, 8); return d; }
template <class T> static inline T atomicMax(T* p, T v) { T o = *p; if (v > o) *p = v; return o; }
static inline int __ffsll(long long v) { return __builtin_ffsll(v); }
#define LAUNCH(name, ...) \
  for (unsigned b = 0; b < grid; ++b) for (unsigned t = 0; t < block; ++t) { \
    blockIdx.x = b; threadIdx.x = t; blockDim.x = block; name(__VA_ARGS__); }
"""

WRAPPERS = r"""
extern "C" void run_edt0(unsigned grid, unsigned block, const unsigned char* ph, double* f,
                         long long n0, long long nline, double sx)
{ LAUNCH(lt_edt0, ph, f, n0, nline, sx) }
extern "C" void run_pass(unsigned grid, unsigned block, const double* fin, double* fout,
                         long long n, long long len, long long stride, double s)
{ LAUNCH(lt_edt_pass, fin, fout, n, len, stride, s) }
extern "C" void run_prune(unsigned grid, unsigned block, const double* d2, unsigned char* keep,
                          long long n0, long long n1, long long n2, double sx, double sy, double sz,
                          double eps, long long lo0, long long lo1, long long lo2, long long hi0,
                          long long hi1, long long hi2, double r2keep, const double* levels,
                          long long nlev, const double* need, double r2cap)
{ LAUNCH(lt_prune, d2, keep, n0, n1, n2, sx, sy, sz, eps, lo0, lo1, lo2, hi0, hi1, hi2, r2keep,
         levels, nlev, need, r2cap) }
extern "C" void run_prune_far(unsigned grid, unsigned block, const double* d2, const long long* cand,
                              long long ncand, long long n0, long long n1, long long n2, double sx,
                              double sy, double sz, double eps, long long lo0, long long lo1,
                              long long lo2, long long hi0, long long hi1, long long hi2,
                              double r2keep, double r2min, double step, double ridge,
                              double cap, unsigned char* keep)
{ LAUNCH(lt_prune_far, d2, cand, ncand, n0, n1, n2, sx, sy, sz, eps, lo0, lo1, lo2, hi0, hi1, hi2,
         r2keep, r2min, step, ridge, cap, keep) }
extern "C" void run_paint_rows(unsigned grid, unsigned block, const long long* cand,
                               const long long* sel, long long nsel, const double* d2,
                               const unsigned int* rank, long long n1, long long n2,
                               double sx, double sy, double sz, long long lo0, long long lo1,
                               long long lo2, long long hi0, long long hi1, long long hi2,
                               unsigned int* M, const unsigned long long* masks,
                               const long long* moff)
{ LAUNCH(lt_paint_rows, cand, sel, nsel, d2, rank, n1, n2, sx, sy, sz, lo0, lo1, lo2, hi0, hi1,
         hi2, M, masks, moff) }
extern "C" void run_plane_words(unsigned grid, unsigned block, const double* d2,
                                const long long* cand, long long ncand, long long n1, long long n2,
                                double sx, long long lo0, long long hi0, long long* nw)
{ LAUNCH(lt_plane_words, d2, cand, ncand, n1, n2, sx, lo0, hi0, nw) }
extern "C" void run_disc_masks(unsigned grid, unsigned block, const double* d2,
                               const long long* cand, long long ncand, const long long* moff,
                               long long nwords, long long n0, long long n1, long long n2,
                               double sx, const double* need2, long long nrho, const double* far,
                               long long nfar, long long lo0, long long hi0,
                               unsigned long long* masks, unsigned char* visible)
{ LAUNCH(lt_disc_masks, d2, cand, ncand, moff, nwords, n0, n1, n2, sx, need2, nrho, far, nfar,
         lo0, hi0, masks, visible) }
extern "C" void run_edt_line(unsigned grid, unsigned block, const double* fin, double* fout,
                             long long nline, long long len, long long inner, long long w, int* sb,
                             int* tb)
{ LAUNCH(lt_edt_line, fin, fout, nline, len, inner, w, sb, tb) }
extern "C" void run_pushdown(unsigned grid, unsigned block, unsigned int* M, long long level,
                             long long m2, int q)
{ LAUNCH(lt_pushdown, M, level, m2, q) }
"""


@pytest.fixture(scope="module")
def emulated(tmp_path_factory):
    gxx = shutil.which("g++")
    if gxx is None:
        pytest.skip("g++ not found: cannot emulate the CUDA kernels on the CPU")
    d = tmp_path_factory.mktemp("cuda_emul")
    src = d / "k.cpp"
    src.write_text(SHIM + CUDA_SOURCE + WRAPPERS)
    lib = d / "k.so"
    subprocess.run([gxx, "-O1", "-ffp-contract=off", "-shared", "-fPIC", str(src), "-o", str(lib)],
                   check=True, capture_output=True)
    return ctypes.CDLL(str(lib))


def _p(a):
    return a.ctypes.data_as(ctypes.c_void_p)


def emulated_prune_far(lib, d2, cand, weights, box_lo, box_hi, r2keep):
    """lt_prune_far's keep flags (uint8) of the centres ``cand``."""
    L, D = ctypes.c_longlong, ctypes.c_double
    keep = np.empty(cand.size, np.uint8)
    cand = np.ascontiguousarray(cand, np.int64)
    lib.run_prune_far((cand.size + 63) // 64, 64, _p(d2), _p(cand), L(cand.size),
                      *[L(v) for v in d2.shape], *[D(float(w)) for w in weights], D(0.0),
                      *[L(v) for v in box_lo], *[L(v) for v in box_hi], D(r2keep),
                      D(TAB.far_min_r2(weights)), D(TAB.FAR_STEP), D(TAB.FAR_RIDGE),
                      D(TAB.cap_limit(weights)), _p(keep))
    return keep


def emulated_disc_masks(lib, d2, cand, weights, box_lo, box_hi, r2max, table_max=None,
                        clip=True):
    """lt_disc_masks of the centres ``cand`` as the GPU module runs it: (moff, masks,
    visible).  The disc table stops at ``table_max`` (``INT_TABLE_MAX``) and past it the
    needs come from ``disc_need_far`` (clipped to the array unless ``clip`` is False)."""
    L, D = ctypes.c_longlong, ctypes.c_double
    n0, n1, n2 = d2.shape
    g = lambda m, bs=64: (m + bs - 1) // bs  # noqa: E731
    tab = min(r2max, (table_max or TAB.INT_TABLE_MAX) - 1)
    need2 = np.ascontiguousarray(TAB.disc_need_table(tab, weights[1], weights[2]), np.float64)
    far = np.zeros((7, 1))
    if r2max > tab:
        extent = (n1, n2) if clip else None
        far = np.ascontiguousarray(
            TAB.with_far_buckets(TAB.disc_need_far(r2max, weights[1], weights[2], extent)),
            np.float64)
    nw = np.empty(cand.size, np.int64)
    lib.run_plane_words(g(cand.size), 64, _p(d2), _p(cand), L(cand.size), L(n1), L(n2),
                        D(float(weights[0])), L(box_lo[0]), L(box_hi[0]), _p(nw))
    moff = np.zeros(cand.size + 1, np.int64)
    np.cumsum(nw, out=moff[1:])
    masks = np.empty(max(int(moff[-1]), 1), np.uint64)
    visible = np.zeros(cand.size, np.uint8)
    lib.run_disc_masks(g(int(moff[-1])), 64, _p(d2), _p(cand), L(cand.size), _p(moff),
                       L(int(moff[-1])), L(n0), L(n1), L(n2), D(float(weights[0])), _p(need2),
                       L(need2.shape[1]), _p(far), L(far.shape[1]), L(box_lo[0]),
                       L(box_hi[0]), _p(masks), _p(visible))
    return moff, masks, visible


def emulated_thickness(lib, phase, spacing, box_lo=None, box_hi=None, r_max=None,
                       brute_span=None):
    """The GPU module's pipeline, step for step, with the kernels run on the CPU
    (``brute_span``: the distance passes' switch to the lower envelope, as G.BRUTE_SPAN)."""
    from volsweep.thickness import _gpu as G

    brute_span = G.BRUTE_SPAN if brute_span is None else brute_span
    L, D = ctypes.c_longlong, ctypes.c_double
    n0, n1, n2 = phase.shape
    n = phase.size
    box_lo = box_lo or (0, 0, 0)
    box_hi = box_hi or phase.shape
    weights, scale = TAB.lattice(tuple(float(s) for s in spacing))
    r2keep = np.inf if r_max is None else (r_max / scale) ** 2 * (1 + 1e-9)
    sx, sy, sz = (float(w) for w in weights)
    ph = np.ascontiguousarray(phase).view(np.uint8)
    a = np.empty(phase.shape)
    b = np.empty(phase.shape)
    g = lambda m, bs=64: (m + bs - 1) // bs  # noqa: E731
    lib.run_edt0(g(n1 * n2), 64, _p(ph), _p(a), L(n0), L(n1 * n2), D(sx))
    for src, dst, length, inner, w in ((a, b, n1, n2, sy), (b, a, n2, 1, sz)):
        if np.max(src, where=np.isfinite(src), initial=0.0) < (brute_span * w) ** 2:
            lib.run_pass(g(n), 64, _p(src), _p(dst), L(n), L(length), L(inner), D(w))
        else:
            s_ = np.empty(n, np.int32)
            t_ = np.empty(n, np.int32)
            lib.run_edt_line(g(n // length), 64, _p(src), _p(dst), L(n // length), L(length),
                             L(inner), L(int(w)), _p(s_), _p(t_))
    d2 = a
    r2need = float(np.max(d2, where=np.isfinite(d2), initial=0.0))
    levels, need, cap = TAB.prune_table(r2need, weights)
    need = np.ascontiguousarray(need)
    keep = np.empty(phase.shape, np.uint8)
    lib.run_prune(g(n), 64, _p(d2), _p(keep), L(n0), L(n1), L(n2), D(sx), D(sy), D(sz), D(0.0),
                  *[L(v) for v in box_lo], *[L(v) for v in box_hi], D(r2keep), _p(levels),
                  L(levels.size), _p(need), D(cap))
    cand = np.flatnonzero(keep).astype(np.int64)
    if cand.size and r2need >= TAB.far_min_r2(weights, TAB.GPU_FAR_MIN_RADIUS):
        cand = cand[emulated_prune_far(lib, d2, cand, weights, box_lo, box_hi, r2keep) == 1]
    r2s = d2.ravel()[cand]
    values = np.unique(r2s)
    rank = (np.searchsorted(values, r2s) + 1).astype(np.uint32)
    shape = tuple(h - l for l, h in zip(box_lo, box_hi))
    nq = max(0, shape[2].bit_length() - 1)
    M = np.zeros((nq + 1,) + shape, np.uint32)
    box = [L(v) for v in box_lo] + [L(v) for v in box_hi]

    if values.size:
        moff, masks, visible = emulated_disc_masks(lib, d2, cand, weights, box_lo, box_hi,
                                                   int(values[-1]))
        sel = np.flatnonzero(visible).astype(np.int64)
        lib.run_paint_rows(g(sel.size * 32), 64, _p(cand), _p(sel), L(sel.size), _p(d2),
                           _p(rank), L(n1), L(n2), D(sx), D(sy), D(sz), *box, _p(M), _p(masks),
                           _p(moff))
    size = int(np.prod(shape))
    for q in range(nq, 0, -1):
        lib.run_pushdown(g(size), 64, _p(M), L(size), L(shape[2]), ctypes.c_int(q))
    return d2, TAB.diameter_lut(values, scale)[M[0]]


SPACINGS = [(1, 1, 1), (1, 2, 3), (0.7, 1.1, 1.3), (0.65, 0.65, 0.65), (0.65, 0.65, 2.0),
            (0.7, 1.3, 1.0), (0.3, 0.3, 0.3)]


@pytest.mark.parametrize("spacing", SPACINGS)
@pytest.mark.parametrize("kind", ["random", "blobs"])
def test_cuda_source_emulated_matches_cpu_and_oracle(emulated, spacing, kind):
    rng = np.random.default_rng(sum(map(ord, kind)) + int(10 * sum(spacing)))
    shape = (13, 17, 11)
    phase = rng.random(shape) > 0.3 if kind == "random" else blobs(shape, sigma=1.5, seed=5)
    d2, lt = emulated_thickness(emulated, phase, spacing)
    np.testing.assert_array_equal(d2, oracle_d2_int(phase, spacing)[0])
    np.testing.assert_array_equal(lt, T.local_thickness(phase, spacing=spacing, device="cpu"))
    np.testing.assert_array_equal(lt, oracle_local_thickness(phase, spacing))


def solid_with_pores(shape, count, seed):
    x = np.ones(shape, bool)
    rng = np.random.default_rng(seed)
    x[tuple(rng.integers(0, n, count) for n in shape)] = False
    return x


@pytest.mark.parametrize("spacing", [(1, 1, 1), (1, 3, 2), (0.65, 0.65, 2.0), (0.7, 1.3, 1.0)])
@pytest.mark.parametrize("brute_span", [1, 64])
def test_cuda_source_emulated_solid_with_pores(emulated, spacing, brute_span):
    # Large balls (hidden balls and discs skipped), distance passes by lower envelope
    # (brute_span=1) or outward search.
    for shape, count, seed in [((40, 13, 11), 3, 0), ((9, 23, 21), 2, 1)]:
        phase = solid_with_pores(shape, count, seed)
        d2, lt = emulated_thickness(emulated, phase, spacing, brute_span=brute_span)
        np.testing.assert_array_equal(d2, oracle_d2_int(phase, spacing)[0])
        np.testing.assert_array_equal(lt, oracle_local_thickness(phase, spacing))


@pytest.mark.usefixtures("far_pruning_of_small_solids")
@pytest.mark.parametrize("spacing", [(1, 1, 1), (1, 3, 2), (0.65, 0.65, 2.0)])
def test_cuda_source_emulated_far_pruning_equals_the_cpu_kernel(emulated, spacing):
    # The same centres dropped as the CPU's prune_far, in the whole box and in a core box
    # with a finite keep radius; and the emulated pipeline equals the brute force (at one
    # anisotropic spacing: the brute force is the cost).
    from volsweep.thickness import _cpu as CPU

    phase = solid_with_pores((36, 31, 27), 3, 6)
    weights, _ = TAB.lattice(spacing)
    d2 = CPU.edt_sq(phase, weights).copy()
    every = np.flatnonzero(phase.ravel())
    near = float((6 * max(weights)) ** 2)
    for lo, hi, r2keep in [((0, 0, 0), phase.shape, np.inf), ((5, 7, 3), (30, 20, 22), near)]:
        inside = np.empty(every.size, np.int64)
        CPU._kernels().prune_far(d2, every, *(float(w) for w in weights), 0.0, *lo, *hi,
                                 r2keep, TAB.far_min_r2(weights), TAB.FAR_STEP, TAB.FAR_RIDGE,
                                 TAB.cap_limit(weights), inside, 0, every.size)
        keep = emulated_prune_far(emulated, d2, every, weights, lo, hi, r2keep)
        assert (inside >= 0).sum() > 0.01 * every.size
        np.testing.assert_array_equal(keep == 1, inside < 0)
    if spacing == (1, 3, 2):
        _, lt = emulated_thickness(emulated, phase, spacing)
        np.testing.assert_array_equal(lt, oracle_local_thickness(phase, spacing))


def test_cuda_source_emulated_beyond_the_integer_tables(emulated):
    # Squared lattice radii past INT_TABLE_MAX: the disc masks' needs from disc_need_far.
    spacing = (0.65, 0.65, 2.0)  # lattice weights (13, 13, 40)
    phase = np.ones((7, 9, 64), bool)
    phase[3, 4, 0] = phase[5, 1, 63] = False
    d2, lt = emulated_thickness(emulated, phase, spacing)
    assert d2[np.isfinite(d2)].max() >= TAB.INT_TABLE_MAX
    np.testing.assert_array_equal(lt, oracle_local_thickness(phase, spacing))


@pytest.mark.parametrize("spacing", [(1, 1, 1), (0.65, 0.65, 2.0)])
def test_cuda_source_emulated_core_mode(emulated, spacing):
    phase = blobs((30, 26, 22), sigma=2.5, seed=9)
    whole = T.local_thickness(phase, spacing=spacing)
    r_max = T.max_inscribed_radius(phase, spacing=spacing)
    # One core with a halo thinner than 2 R_max on purpose would not be exact; use the real one.
    halo = T.thickness_halo(r_max, spacing)
    core = (slice(8, 16), slice(5, 12), slice(9, 15))
    start = [max(0, s.start - h) for s, h in zip(core, halo)]
    stop = [min(n, s.stop + h) for s, h, n in zip(core, halo, phase.shape)]
    block = phase[tuple(slice(a, b) for a, b in zip(start, stop))]
    lo = tuple(s.start - a for s, a in zip(core, start))
    hi = tuple(s.stop - a for s, a in zip(core, start))
    _, lt = emulated_thickness(emulated, block, spacing, lo, hi, r_max)
    np.testing.assert_array_equal(lt, whole[core])


def test_gpu_module_needs_no_cpu_module():
    src = (Path(T.__file__).parent / "_gpu.py").read_text()
    assert "_cpu" not in src.split('"""', 2)[2] and "numba" not in src.split('"""', 2)[2]


# ----------------------------------------------------------------------------- real GPU
@pytest.mark.gpu
@pytest.mark.parametrize("spacing", SPACINGS)
def test_gpu_equals_cpu_and_oracle(spacing):
    import cupy as cp

    for seed, shape in [(0, (17, 23, 11)), (1, (20, 9, 31))]:
        rng = np.random.default_rng(seed)
        for phase in (rng.random(shape) > 0.35, blobs(shape, sigma=2.0, seed=seed)):
            gpu = T.local_thickness(cp.asarray(phase), spacing=spacing)
            assert isinstance(gpu, cp.ndarray) and gpu.dtype == np.float32
            cpu = T.local_thickness(phase, spacing=spacing, device="cpu")
            np.testing.assert_array_equal(gpu.get(), cpu)
            np.testing.assert_array_equal(cpu, oracle_local_thickness(phase, spacing))
            n_gpu = T._squared_radius(phase, spacing=spacing, device="cuda")[0]
            np.testing.assert_array_equal(n_gpu, T._squared_radius(phase, spacing=spacing)[0])


@pytest.mark.gpu
def test_gpu_thin_block_past_the_tables_clips_the_disc_table(monkeypatch):
    # The module builds the disc table past the integer tables clipped to the block.
    import cupy as cp

    from volsweep.thickness import _gpu as G

    phase = np.ones((140, 6, 5), bool)
    phase[0, 2, 3] = False  # balls reach (139 * 10)**2 > 2**20
    built = []

    def recorded(r2max, wy, wz, extent):
        built.append(TAB.disc_need_far(r2max, wy, wz, extent).shape[1])
        return TAB.disc_need_far(r2max, wy, wz, extent)

    monkeypatch.setattr(G, "disc_need_far", recorded)
    got = T.local_thickness(cp.asarray(phase), spacing=(10, 1, 1)).get()
    np.testing.assert_array_equal(got, oracle_local_thickness(phase, (10, 1, 1)))
    assert built and built[0] <= 6 * 5


@pytest.mark.gpu
def test_gpu_disc_need_table_stays_on_the_device_and_grows():
    # The disc needs' table is kept on the device: at lattice weights in the hundreds
    # every call reads the full table, uploaded once; a larger squared radius grows it, a
    # smaller one reads the longer table, and another lattice replaces it.
    import cupy as cp

    from volsweep.thickness import _gpu as G

    G.DISC_NEEDS.clear()
    spacing = (2.79, 2.39, 2.39)
    phase = blobs((23, 19, 21), sigma=2.0, seed=8)
    cpu = T.local_thickness(phase, spacing=spacing, device="cpu")
    x = cp.asarray(phase)
    np.testing.assert_array_equal(T.local_thickness(x, spacing=spacing).get(), cpu)
    table = G.DISC_NEEDS.current()
    np.testing.assert_array_equal(T.local_thickness(x, spacing=spacing).get(), cpu)
    assert G.DISC_NEEDS.current() is table and table.shape[1] == TAB.INT_TABLE_MAX
    small = blobs((15, 16, 17), sigma=1.5, seed=9)
    solid = np.ones((30, 31, 29), bool)
    solid[3, 20, 7] = solid[25, 4, 22] = False
    T.local_thickness(cp.asarray(small))
    short = G.DISC_NEEDS.current()
    assert short.shape[1] < TAB.INT_TABLE_MAX
    np.testing.assert_array_equal(T.local_thickness(cp.asarray(solid)).get(),
                                  oracle_local_thickness(solid, (1, 1, 1)))
    grown = G.DISC_NEEDS.current()
    assert grown.shape[1] > short.shape[1]
    np.testing.assert_array_equal(T.local_thickness(cp.asarray(small)).get(),
                                  oracle_local_thickness(small, (1, 1, 1)))
    assert G.DISC_NEEDS.current() is grown
    cols = grown.shape[1]
    np.testing.assert_array_equal(grown.get(), TAB.disc_need_table(cols - 1, 1, 1))


@pytest.mark.gpu
def test_gpu_caches_hold_one_entry_per_device(monkeypatch):
    # A process that calls on two GPUs gets each device's own module and tables: an entry
    # made under one device id is never handed to another.
    import cupy as cp

    from volsweep.thickness import _gpu as G

    G.DISC_NEEDS.clear()
    G.TABLES.clear()
    phase = blobs((17, 15, 19), sigma=1.5, seed=4)
    expect = oracle_local_thickness(phase, (1, 1, 1))
    tables, needs, modules = {}, {}, {}
    for dev in (0, 7):
        monkeypatch.setattr(G, "_device_id", lambda dev=dev: dev)
        np.testing.assert_array_equal(T.local_thickness(cp.asarray(phase)).get(), expect)
        tables[dev] = G.TABLES.get(64.0, (1, 1, 1))
        needs[dev] = G.DISC_NEEDS.current()
        modules[dev] = G._module(dev)
    assert tables[0][1] is not tables[7][1] and tables[0][2] is not tables[7][2]
    assert needs[0] is not None and needs[7] is not None and needs[0] is not needs[7]
    np.testing.assert_array_equal(needs[0].get(), needs[7].get())
    assert modules[0] is not modules[7]
    monkeypatch.setattr(G, "_device_id", lambda: 0)
    assert G.DISC_NEEDS.current() is needs[0] and G.TABLES.get(64.0, (1, 1, 1))[1] is tables[0][1]


@pytest.mark.gpu
def test_gpu_reproducer_and_exact_scale_invariance():
    import cupy as cp

    g = np.mgrid[:13, :13, :13] - 6
    phase = (g ** 2).sum(0) <= 25
    phase[2, 3, 6] = False
    dev = cp.asarray(phase)
    base = T.local_thickness(dev).get()
    assert T.local_thickness(dev, spacing=(0.65,) * 3).get()[1, 6, 6] == (
        np.float32(2 * np.sqrt(17)) * np.float32(0.65))
    for s in (0.3, 0.65, 0.7, 1.1):
        np.testing.assert_array_equal(T.local_thickness(dev, spacing=(s, s, s)).get(), s * base)


@pytest.mark.gpu
def test_gpu_painting_every_phase_voxel_equals_pruned():
    # No pruning (every phase voxel a centre) gives the same map as the pruned centres.
    import cupy as cp

    from volsweep.thickness import _gpu as G

    phase = cp.asarray(blobs((48, 40, 33), sigma=3.0, seed=8))
    for spacing in [(1, 1, 1), (0.7, 1.1, 1.3)]:
        weights, scale = TAB.lattice(spacing)
        d2 = G.edt_sq(phase, weights)
        cand, _ = G.candidates(d2, weights, (0, 0, 0), phase.shape, np.inf)
        everything = cp.flatnonzero(phase)
        assert cand.size < everything.size
        a = G.finish(*G.paint(d2, cand, weights, (0, 0, 0), phase.shape), scale)
        b = G.finish(*G.paint(d2, everything, weights, (0, 0, 0), phase.shape), scale)
        assert bool((a == b).all())


@pytest.mark.gpu
def test_gpu_numpy_in_numpy_out_and_large_equals_cpu():
    phase = blobs((96, 80, 64), sigma=3.0, seed=3)
    gpu = T.local_thickness(phase, device="cuda")
    assert isinstance(gpu, np.ndarray)
    np.testing.assert_array_equal(gpu, T.local_thickness(phase, device="cpu"))
    assert T.max_inscribed_radius(phase, device="cuda") == T.max_inscribed_radius(phase, device="cpu")


@pytest.mark.gpu
def test_gpu_chunked_equals_whole():
    import cupy as cp

    phase = blobs((40, 36, 30), sigma=3.0, seed=4)
    whole = T.local_thickness(phase, device="cpu")
    r_max = T.max_inscribed_radius(phase)
    halo = T.thickness_halo(r_max)
    tile = tuple(max(2, int(r_max)) for _ in range(3))  # cores smaller than 2 R_max
    assert all(t < 2 * r_max for t in tile)
    out = cp.zeros(phase.shape, cp.float32)
    dev = cp.asarray(phase)
    for t in plan_tiles(phase.shape, tile, halo):
        region, cib = t.clipped(phase.shape)
        out[t.core] = T.local_thickness_core(dev[region], cib, r_max)
    np.testing.assert_array_equal(out.get(), whole)


@pytest.mark.gpu
def test_gpu_repeated_calls_no_memory_growth_and_within_the_estimate():
    import cupy as cp

    phase_np = blobs((64, 64, 64), sigma=3.0, seed=6)
    pool = cp.get_default_memory_pool()
    pool.free_all_blocks()
    phase = cp.asarray(phase_np)
    first = T.local_thickness(phase)
    for _ in range(3):  # warm-up: the pool settles once the caller holds one result
        again = T.local_thickness(phase)
    cp.cuda.Device().synchronize()
    held = pool.total_bytes()
    for _ in range(20):
        again = T.local_thickness(phase)
    cp.cuda.Device().synchronize()
    assert pool.total_bytes() <= held
    assert bool((again == first).all())
    # the pool holds the peak of one call (plus the caller's input and two results)
    assert held <= T.thickness_memory_bytes(phase.shape, device="cuda") + 3 * phase.size * 4


@pytest.mark.gpu
def test_device_out_of_memory_falls_back_to_the_cpu():
    import cupy as cp

    rng = np.random.default_rng(9)
    binary = rng.random((48, 40, 33)) < 0.6
    want = T.local_thickness(binary, spacing=(0.65, 0.65, 2.0), device="cpu")
    pool = cp.get_default_memory_pool()
    pool.free_all_blocks()
    pool.set_limit(size=64 * 1024)  # far below what the GPU painter needs
    try:
        got = T.local_thickness(binary, spacing=(0.65, 0.65, 2.0), device="cuda")
    finally:
        pool.set_limit(size=0)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("spacing", [(1, 1, 1), (0.65, 0.65, 2.0), (0.7, 1.3, 1.0)])
def test_cuda_source_emulated_masks_past_the_table_equal_the_tables(emulated, spacing):
    # With the disc table cut short, the masks from disc_need_far past its end are the
    # full table's, bit for bit, and they hide discs there; clipped to the array, they hide
    # those discs and more (the parts outside the array need no cover).
    from volsweep.thickness import _cpu as CPU

    phase = solid_with_pores((23, 19, 29), 2, 3)
    weights, _ = TAB.lattice(spacing)
    d2 = CPU.edt_sq(phase, weights).copy()
    cand = np.flatnonzero(phase.ravel()).astype(np.int64)
    r2max = int(d2.ravel()[cand].max())
    lo, hi = (2, 0, 0), (20, 19, 29)
    full = emulated_disc_masks(emulated, d2, cand, weights, lo, hi, r2max)
    short = emulated_disc_masks(emulated, d2, cand, weights, lo, hi, r2max, table_max=r2max // 8,
                                clip=False)
    for a, b in zip(full, short):
        np.testing.assert_array_equal(a, b)
    assert 0 < full[2].sum() < cand.size
    _, clipped, visible = emulated_disc_masks(emulated, d2, cand, weights, lo, hi, r2max,
                                              table_max=r2max // 8)
    np.testing.assert_array_equal(full[1] & ~clipped, 0)
    assert np.all(visible <= full[2])


def test_cuda_source_emulated_thin_block_past_the_tables(emulated):
    # A block thin along axes 1 and 2 whose balls pass the integer tables along axis 0: the
    # masks' needs come from the disc table clipped to the block, and the result is exact.
    phase = np.ones((140, 6, 5), bool)
    phase[0, 2, 3] = False  # balls reach (139 * 10)**2 > 2**20
    _, lt = emulated_thickness(emulated, phase, (10, 1, 1))
    np.testing.assert_array_equal(lt, oracle_local_thickness(phase, (10, 1, 1)))


@pytest.mark.gpu
def test_gpu_call_logs_its_stages_at_debug_level(caplog):
    # The GPU's DEBUG line: its kept centres (the GPU's candidates), the four stages'
    # seconds from CUDA events, within the call's time (synchronised).
    import re
    import time

    import cupy as cp

    from volsweep.thickness import _gpu as G

    phase = cp.asarray(solid_with_pores((41, 30, 27), 3, 6))
    weights, _ = TAB.lattice((0.65, 0.65, 2.0))
    d2 = G.edt_sq(phase, weights)
    kept = int(G.candidates(d2, weights, (0, 0, 0), phase.shape, np.inf)[0].size)
    T.local_thickness(phase, spacing=(0.65, 0.65, 2.0))
    cp.cuda.Device().synchronize()
    with caplog.at_level("DEBUG", logger="volsweep"):
        t = time.perf_counter()
        T.local_thickness(phase, spacing=(0.65, 0.65, 2.0))
        cp.cuda.Device().synchronize()
        wall = time.perf_counter() - t
    (rec,) = caplog.records
    msg = rec.getMessage()
    assert "(41, 30, 27) block on cuda" in msg and f": {kept} ball centres kept" in msg, msg
    seconds = [float(v) for v in re.findall(r"(?:distance map|pruning|painting|diameters) "
                                            r"([0-9.e-]+) s", msg)]
    assert len(seconds) == 4 and 0 < sum(seconds) <= 1.01 * wall, msg  # 3 digits each
