"""GPU sweep: against the float64 oracle, against the CPU path, tiled against untiled."""

import numpy as np
import pytest

import sweep_oracle as oracle
from volsweep import sweep

pytestmark = pytest.mark.gpu

SPACING = (1.0, 0.8, 1.3)
THETA = [0.3, 1.2]
PHI = [0.7]
XI = [0.5, 1.0, 4.0]


def _vol(shape=(23, 31, 17), seed=0):
    return np.random.default_rng(seed).random(shape)


def _rel(ds, ref, s):
    if s in ("energy", "std"):
        return np.max(np.abs(ds[s].values - ref[s]) / np.abs(ref[s]))
    return np.max(np.abs(ds[s].values - ref[s]) / ref["std"])


@pytest.mark.parametrize("mode", ["reflect", "constant", "wrap"])
@pytest.mark.parametrize("a", [1.0, 3.0])
def test_gpu_matches_oracle(mode, a):
    v = _vol(seed=int(a * 10) + len(mode))
    ref = oracle.sweep_stats(v, THETA, PHI, XI, a, SPACING, mode)
    ds = sweep(v, THETA, PHI, XI, a=a, spacing=SPACING, mode=mode, device="cuda", progress=False)
    for s in ("energy", "std", "max", "mean", "min"):
        assert _rel(ds, ref, s) < 1e-4, (s, _rel(ds, ref, s))


@pytest.mark.parametrize("mode", ["reflect", "constant", "wrap"])
def test_gpu_matches_cpu(mode):
    v = _vol((40, 33, 29), seed=3)
    th, ph, xi = np.linspace(0, np.pi, 5), np.linspace(0, np.pi, 4), [0.7, 1.0, 2.5]
    kw = dict(a=1.5, spacing=SPACING, mode=mode, progress=False)
    g = sweep(v, th, ph, xi, device="cuda", **kw)
    c = sweep(v, th, ph, xi, device="cpu", **kw)
    for s in ("energy", "std"):
        np.testing.assert_allclose(g[s].values, c[s].values, rtol=1e-5)
    scale = c["std"].values
    for s in ("max", "mean", "min"):
        assert np.max(np.abs(g[s].values - c[s].values) / scale) < 1e-5, s


def test_gpu_cupy_input_and_parseval():
    import cupy as cp

    v = _vol((32, 30, 28), seed=4)  # wrap at the period; 30 and 28 are fast, 32 too
    kw = dict(a=1.0, spacing=SPACING, mode="wrap", stats=("energy", "std", "mean"), progress=False)
    g = sweep(cp.asarray(v), THETA, PHI, XI, device="auto", **kw)
    assert g.attrs["method"] == "parseval" and g.attrs["device"].startswith("cuda")
    c = sweep(v, THETA, PHI, XI, device="cpu", **{**kw, "stats": ("energy", "std", "mean", "max")})
    assert c.attrs["method"] == "irfft"
    np.testing.assert_allclose(g["energy"].values, c["energy"].values, rtol=1e-5)
    np.testing.assert_allclose(g["std"].values, c["std"].values, rtol=1e-5)
    assert np.max(np.abs(g["mean"].values - c["mean"].values) / c["std"].values) < 1e-5


@pytest.mark.parametrize("mode", ["reflect", "constant", "wrap"])
def test_gpu_tiled_equals_untiled(mode):
    v = _vol((48, 40, 36), seed=5)
    th, ph, xi = [0.2, 1.0], [0.4, 2.0], [0.8, 2.0]
    kw = dict(a=1.2, spacing=SPACING, mode=mode, progress=False, device="cuda")
    whole = sweep(v, th, ph, xi, **kw)
    tiled = sweep(v, th, ph, xi, memory_limit=1.2e6, **kw)
    assert tiled.attrs["n_blocks"] > 1 and whole.attrs["n_blocks"] == 1
    for s in ("energy", "std", "max", "min"):
        np.testing.assert_allclose(tiled[s].values, whole[s].values, rtol=1e-6)
    # the mean is ~0 (the wavelet has zero integral): relative to the std
    assert np.max(np.abs(tiled["mean"].values - whole["mean"].values) / whole["std"].values) < 1e-6


def test_gpu_orientation_map_bruteforce():
    v = _vol((13, 11, 9), seed=6)
    th, ph, xi = [0.0, 0.6, np.pi / 2], [0.0, 1.0], [0.7, 1.5]
    ds = sweep(v, th, ph, xi, a=1.0, spacing=SPACING, mode="reflect", device="cuda",
               progress=False, orientation_map=True, orientation_rule="response")
    g = np.stack([oracle.response(v, 1.0, t, p, x, SPACING, "reflect")
                  for t in th for p in ph for x in xi])
    best = g.max(axis=0)
    np.testing.assert_allclose(ds["response_max"].values, best, rtol=1e-5, atol=1e-5 * best.std())
    flat = np.ravel_multi_index((ds["argmax_theta"].values, ds["argmax_phi"].values,
                                 ds["argmax_xi"].values), (len(th), len(ph), len(xi)))
    chosen = np.take_along_axis(g, flat[None], axis=0)[0]
    # the chosen kernel attains the max (up to float32), and no lower index does strictly better
    assert np.max(np.abs(chosen - best)) < 1e-5 * best.std()
    gpu_cpu = sweep(v, th, ph, xi, a=1.0, spacing=SPACING, mode="reflect", device="cpu",
                    progress=False, orientation_map=True, orientation_rule="response")
    same = (gpu_cpu["argmax_theta"].values == ds["argmax_theta"].values).mean()
    assert same > 0.99


def test_gpu_no_plan_cache_growth():
    import cupy as cp

    cache = cp.fft.config.get_plan_cache()
    before = cache.get_curr_size()
    v = _vol((20, 21, 22), seed=7)
    for shape_a in (1.0, 1.3, 2.0):
        sweep(v, [0.1], [0.2], [1.0], a=shape_a, device="cuda", progress=False)
    assert cache.get_curr_size() == before


@pytest.mark.parametrize("a", [1.0, 1.5])
def test_gpu_parseval_matches_cpu_and_is_deterministic(a):
    # nz = 300: the rfft rows (151) are longer than one pass of the warp (128 frequencies);
    # ξ = 1 takes the separable kernel, the others the general one, in one call
    v = _vol((26, 21, 300), seed=8)
    th, ph, xi = np.linspace(-1.3, 1.3, 5), np.linspace(0, np.pi, 4), [0.5, 1.0, 2.5, 4.0]
    kw = dict(a=a, spacing=SPACING, mode="wrap", stats=("energy", "std", "mean"), progress=False)
    g = sweep(v, th, ph, xi, device="cuda", **kw)
    g2 = sweep(v, th, ph, xi, device="cuda", **kw)
    c = sweep(v, th, ph, xi, device="cpu", **kw)
    assert g.attrs["method"] == "parseval" == c.attrs["method"]
    for s in ("energy", "std"):
        np.testing.assert_allclose(g[s].values, c[s].values, rtol=1e-5)
        assert np.array_equal(g[s].values, g2[s].values), s  # bit-identical run to run
    assert np.max(np.abs(g["mean"].values - c["mean"].values) / c["std"].values) < 1e-5


def test_gpu_parseval_many_kernels():
    # more kernels than one buffer of partials (CHUNK = 256), ξ = 1 and ξ ≠ 1 mixed
    v = _vol((15, 14, 12), seed=9)
    th, ph, xi = np.linspace(-1.4, 1.4, 10), np.linspace(0, np.pi, 10), [1.0, 0.8, 3.0]
    kw = dict(a=1.0, spacing=SPACING, mode="wrap", stats=("energy", "std"), progress=False)
    g = sweep(v, th, ph, xi, device="cuda", **kw)
    c = sweep(v, th, ph, xi, device="cpu", **kw)
    assert g.attrs["method"] == "parseval"
    np.testing.assert_allclose(g["energy"].values, c["energy"].values, rtol=1e-5)
    np.testing.assert_allclose(g["std"].values, c["std"].values, rtol=1e-5)


@pytest.mark.parametrize("mode", ["reflect", "wrap"])
def test_gpu_local_energy_matches_cpu(mode):
    # odd anisotropic shape; in wrap the fast axes (21 → no, 20 and 25 → yes) are periodic
    from volsweep.engine import memory_needs

    v = _vol((25, 21, 20), seed=10)
    th, ph, xi = np.arange(4) * np.pi / 4, [0.3, 1.7], [0.7, 1.0, 2.5]
    kw = dict(a=[1.0, 1.4], spacing=SPACING, mode=mode, progress=False, orientation_map=True,
              integration_scale=1.1)
    g = sweep(v, th, ph, xi, device="cuda", **kw)
    c = sweep(v, th, ph, xi, device="cpu", **kw)
    np.testing.assert_allclose(g["local_energy_max"].values, c["local_energy_max"].values, rtol=1e-4)
    scale = c["response_max"].values.std()
    assert np.max(np.abs(g["response_max"].values - c["response_max"].values)) < 1e-5 * scale
    for name in ("argmax_a", "argmax_theta", "argmax_phi", "argmax_xi"):
        assert np.mean(g[name].values == c[name].values) > 0.99, name
    np.testing.assert_allclose(g["energy"].values, c["energy"].values, rtol=1e-5)
    assert g["energy"].dims == ("a", "theta", "phi", "xi")
    untiled, smallest = memory_needs(v.shape, th, ph, xi, a=[1.0, 1.4], spacing=SPACING,
                                     orientation_map=True, integration_scale=1.1, mode=mode)
    limit = max(0.5 * untiled, 1.05 * smallest)
    t = sweep(v, th, ph, xi, device="cuda", memory_limit=limit, **kw)
    assert t.attrs["n_blocks"] > 1
    np.testing.assert_allclose(t["local_energy_max"].values, c["local_energy_max"].values, rtol=1e-4)
    assert np.mean(t["argmax_theta"].values == c["argmax_theta"].values) > 0.99


def test_gpu_xi_one_once_and_fibres():
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))
    from fibre_volumes import periodic_fibres

    vol, mask, axis = periodic_fibres((48, 48, 48), [{"direction": (2, 3, 1), "count": 3}],
                                      radius=2.5, noise=0.3, seed=1)
    grid = np.arange(12) * np.pi / 12
    kw = dict(a=6.25, mode="wrap", progress=False, orientation_map=True)
    g = sweep(vol, grid, grid, [1.0, 2.0, 3.0], device="cuda", **kw)
    c = sweep(vol, grid, grid, [1.0, 2.0, 3.0], device="cpu", **kw)
    assert g.attrs["n_unique_kernels"] == c.attrs["n_unique_kernels"] < 144 * 3
    e1 = g["energy"].values[:, :, 0]
    assert np.all(e1 == e1[0, 0])
    same = np.mean((g["argmax_theta"].values == c["argmax_theta"].values)
                   & (g["argmax_phi"].values == c["argmax_phi"].values))
    assert same > 0.99


@pytest.mark.parametrize("periodic", [(False, False, False), (True, False, True), (False, True, False)])
def test_gpu_fused_local_energy_equals_separable_filters(periodic):
    # the fused passes against cupyx.scipy.ndimage on an odd block whose buffer is wider along z
    import cupy as cp
    import cupyx.scipy.ndimage as cndi

    from volsweep.engine import _gpu, _plan

    taps = _plan.gaussian_taps(1.3, (1.0, 0.7, 1.6))
    reach = _plan.taps_halo(taps)
    core = (9, 8, 11)
    off = tuple(0 if p else r + 2 for p, r in zip(periodic, reach))
    fft = tuple(c if p else c + 2 * o for c, p, o in zip(core, periodic, off))
    block = _plan.Block((0, 0, 0), fft, tuple(slice(0, c) for c in core), off, periodic)
    g = cp.asarray(np.random.default_rng(3).standard_normal(fft[:2] + (fft[2] + 3,)), cp.float32)
    best = cp.full(core, -cp.inf, cp.float32)
    arg = cp.zeros(core, cp.int32)
    energy = _gpu.LocalEnergy(block)
    energy.fold(g, taps, 0.37, best, arg, 4)
    ref = _plan.local_energy(g, block, taps, 0.37, cp, cndi)
    np.testing.assert_allclose(best.get(), ref.get(), rtol=2e-6, atol=0)
    assert (arg.get() == 4).all()
    half = best * 0.5
    energy.fold(g * np.float32(0.5), taps, 0.37, best, arg, 7)  # a quarter of the energy: kept
    assert (arg.get() == 4).all()
    energy.fold(g * np.float32(2.0), taps, 0.37, half, arg, 9)  # four times: replaces
    assert (arg.get() == 9).all()
    np.testing.assert_allclose(half.get(), 4 * ref.get(), rtol=2e-6)


def test_gpu_map_copied_in_background_equals_in_line(monkeypatch):
    # the map's copies and unravelling on their own stream while the statistics run
    from volsweep import backend
    from volsweep.engine import memory_needs

    v = _vol((41, 37, 29), seed=12)
    th, ph, xi = np.arange(5) * np.pi / 5, [0.3, 1.9], [1.0, 2.5]
    kw = dict(a=1.2, spacing=SPACING, mode="reflect", progress=False, orientation_map=True)
    calls, when_done = [], backend.when_done
    monkeypatch.setattr(backend, "when_done", lambda fn, arrays: calls.append(1) or when_done(fn, arrays))
    background = sweep(v, th, ph, xi, device="cuda", **kw)
    assert len(calls) == 1
    untiled, _ = memory_needs(v.shape, th, ph, xi, a=1.2, spacing=SPACING, orientation_map=True,
                              mode="reflect", device="cuda")
    in_line = sweep(v, th, ph, xi, device="cuda", memory_limit=untiled, **kw)
    assert len(calls) == 1 and in_line.attrs["n_blocks"] == 1
    for name in background.data_vars:
        np.testing.assert_array_equal(background[name].values, in_line[name].values, err_msg=name)
    cpu = sweep(v, th, ph, xi, device="cpu", **kw)
    for name in ("argmax_theta", "argmax_phi", "argmax_xi"):
        assert np.mean(background[name].values == cpu[name].values) > 0.99, name
