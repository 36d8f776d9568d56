"""CPU sweep against the float64 oracle; the oracle against scipy.ndimage; inputs; tiling."""

import logging

import numpy as np
import pytest
import scipy.ndimage as ndi

import sweep_oracle as oracle
from volsweep import sweep
from volsweep.engine import unique_kernels
from volsweep.engine.wavelet import reference_halfwidth, sample_kernel

SPACING = (1.0, 0.8, 1.3)
SHAPE = (23, 31, 17)
THETA, PHI, XI = [0.3, 1.2], [0.7], [0.5, 1.0, 4.0]
SCIPY_MODE = {"reflect": "reflect", "constant": "constant", "wrap": "grid-wrap"}


def _vol(shape=SHAPE, seed=0):
    return np.random.default_rng(seed).random(shape)


def _errors(ds, ref):
    out = {s: np.max(np.abs(ds[s].values - ref[s]) / np.abs(ref[s])) for s in ("energy", "std")}
    out.update({s: np.max(np.abs(ds[s].values - ref[s]) / ref["std"]) for s in ("max", "mean", "min")})
    return out


@pytest.mark.parametrize("mode", ["reflect", "constant", "wrap"])
def test_oracle_matches_direct_convolution(mode):
    v = _vol(seed=1)
    k = sample_kernel(1.0, 0.4, 1.1, 1.0, SPACING)  # reference box, smaller than the volume
    assert all(2 * h + 1 <= n for h, n in zip(reference_halfwidth(1.0, 1.0, SPACING), SHAPE))
    direct = ndi.convolve(v, k, mode=SCIPY_MODE[mode], cval=0.0)
    g = oracle.response(v, 1.0, 0.4, 1.1, 1.0, SPACING, mode)
    assert np.abs(g - direct).max() < 1e-12 * np.abs(direct).max()


def test_oracle_folds_kernels_larger_than_the_volume():
    # 5..7-voxel axes with a 17-voxel kernel: wrap and reflect fold the kernel; check by
    # explicit tiling of the periodic (or mirrored) extension and a direct convolution.
    v = _vol((5, 6, 7), seed=2)
    a, xi = 1.0, 1.0
    hw = reference_halfwidth(a, xi, (1, 1, 1))
    for mode, ext in (("wrap", "wrap"), ("reflect", "symmetric")):
        big = np.pad(v, [(h, h) for h in hw], mode=ext)
        direct = ndi.convolve(big, sample_kernel(a, 0.5, 0.2, xi), mode="constant")
        core = direct[hw[0]:hw[0] + 5, hw[1]:hw[1] + 6, hw[2]:hw[2] + 7]
        g = oracle.response(v, a, 0.5, 0.2, xi, (1, 1, 1), mode)
        assert np.abs(g - core).max() < 1e-10 * np.abs(core).max(), mode


@pytest.mark.parametrize("mode", ["reflect", "constant", "wrap"])
@pytest.mark.parametrize("a", [1.0, 1.5, 3.0])
def test_sweep_matches_oracle(mode, a):
    v = _vol(seed=3 + int(2 * a))
    ref = oracle.sweep_stats(v, THETA, PHI, XI, a, SPACING, mode)
    ds = sweep(v, THETA, PHI, XI, a=a, spacing=SPACING, mode=mode, device="cpu", progress=False)
    err = _errors(ds, ref)
    assert max(err.values()) < 1e-4, err


def test_modes_are_distinguishable():
    # The tolerance above can fail: the modes differ by far more than 1e-4.
    v = _vol(seed=4)
    r = oracle.sweep_stats(v, THETA, PHI, [1.0], 1.5, SPACING, "reflect")
    w = oracle.sweep_stats(v, THETA, PHI, [1.0], 1.5, SPACING, "wrap")
    assert np.max(np.abs(r["energy"] - w["energy"]) / w["energy"]) > 1e-3


def test_parseval_path_matches_inverse_fft():
    v = _vol((24, 25, 27), seed=5)
    kw = dict(a=1.2, spacing=SPACING, mode="wrap", device="cpu", progress=False)
    p = sweep(v, THETA, PHI, XI, stats=("energy", "std", "mean"), **kw)
    f = sweep(v, THETA, PHI, XI, stats=("energy", "std", "mean", "max"), **kw)
    assert p.attrs["method"] == "parseval" and f.attrs["method"] == "irfft"
    np.testing.assert_allclose(p["energy"].values, f["energy"].values, rtol=1e-5)
    np.testing.assert_allclose(p["std"].values, f["std"].values, rtol=1e-5)
    assert np.max(np.abs(p["mean"].values - f["mean"].values) / f["std"].values) < 1e-5


@pytest.mark.parametrize("mode", ["reflect", "constant", "wrap"])
def test_tiled_equals_untiled(mode):
    v = _vol((30, 26, 22), seed=6)
    kw = dict(a=1.0, spacing=SPACING, mode=mode, device="cpu", progress=False)
    whole = sweep(v, [0.2], [0.4, 2.0], [0.8, 1.5], **kw)
    tiled = sweep(v, [0.2], [0.4, 2.0], [0.8, 1.5], memory_limit=4e5, **kw)
    assert tiled.attrs["n_blocks"] > 1 and whole.attrs["n_blocks"] == 1
    for s in ("energy", "std", "max", "min"):
        np.testing.assert_allclose(tiled[s].values, whole[s].values, rtol=1e-6)
    assert np.max(np.abs(tiled["mean"].values - whole["mean"].values) / whole["std"].values) < 1e-6


def test_duplicates_computed_once_and_broadcast():
    th = [np.pi / 2, -np.pi / 2, 0.3, 0.3 + np.pi]  # poles; u and -u
    ph = [0.0, 1.0]
    ks = unique_kernels(th, ph, [1.5])  # ξ ≠ 1: at ξ = 1 every orientation is one kernel
    assert len(ks.rep) == 3  # pole (x2 θ, x2 φ → 1), θ=0.3 and θ=0.3+π share ±u per φ
    v = _vol((15, 14, 13), seed=7)
    ds = sweep(v, th, ph, [1.5], device="cpu", progress=False)
    e = ds["energy"].values[:, :, 0]
    assert np.all(e[0] == e[0, 0]) and np.all(e[1] == e[0, 0])
    np.testing.assert_array_equal(e[2], e[3])
    ref = oracle.sweep_stats(v, [0.3 + np.pi], ph, [1.5])
    np.testing.assert_allclose(e[3], ref["energy"][0, :, 0], rtol=1e-4)


def test_orientation_map_bruteforce():
    v = _vol((13, 11, 9), seed=8)
    th, ph, xi = [0.0, 0.6, np.pi / 2, -np.pi / 2], [0.0, 1.0], [0.7, 1.5]
    ds = sweep(v, th, ph, xi, a=1.0, spacing=SPACING, device="cpu", progress=False,
               orientation_map=True, orientation_rule="response")
    g = np.stack([oracle.response(v, 1.0, t, p, x, SPACING) for t in th for p in ph for x in xi])
    best = g.max(axis=0)
    assert ds["response_max"].dtype == np.float32 and ds["argmax_theta"].dtype == np.uint16
    np.testing.assert_allclose(ds["response_max"].values, best, atol=1e-5 * best.std())
    flat = np.ravel_multi_index((ds["argmax_theta"].values, ds["argmax_phi"].values,
                                 ds["argmax_xi"].values), (len(th), len(ph), len(xi)))
    chosen = np.take_along_axis(g, flat[None], axis=0)[0]
    assert np.max(np.abs(chosen - best)) < 1e-5 * best.std()
    # ties (the two poles, any φ) resolve to the lowest flat index: θ index 3 never wins
    assert not np.any(ds["argmax_theta"].values == 3)
    pole = ds["argmax_theta"].values == 2
    assert np.all(ds["argmax_phi"].values[pole] == 0)


def test_dataset_layout_and_attrs():
    v = _vol((12, 11, 10), seed=9)
    ds = sweep(v, [0.0, 0.5], [0.1], [1.0, 2.0], a=1.5, spacing=(1, 1, 2), stats=("energy", "max"),
               device="cpu", progress=False)
    assert set(ds.data_vars) == {"energy", "max", "energy_weight", "wavelet_energy"}
    assert ds["energy"].dims == ("theta", "phi", "xi") and ds["energy"].dtype == np.float64
    assert ds["wavelet_energy"].dims == ("xi",)
    for key in ("a", "mode", "spacing", "truncate", "device", "numpy_version", "scipy_version",
                "volsweep_version"):
        assert key in ds.attrs
    assert ds.attrs["device"].startswith("cpu") and ds.attrs["spacing"] == [1.0, 1.0, 2.0]


def test_progress_log(caplog):
    with caplog.at_level(logging.INFO, logger="volsweep"):
        sweep(_vol((10, 10, 10)), [0.0, 0.5], [0.0], [1.0], device="cpu", progress=True)
    assert any("kernels/s" in r.getMessage() and "ETA" in r.getMessage() for r in caplog.records)


@pytest.mark.parametrize("kwargs, exc, word", [
    (dict(xi=[1.0, 0.0]), ValueError, "xi"),
    (dict(xi=[-1.0]), ValueError, "xi"),
    (dict(a=0.0), ValueError, "a="),
    (dict(a=-1.0), ValueError, "a="),
    (dict(theta=[0.0, np.nan]), ValueError, "theta"),
    (dict(phi=[np.inf]), ValueError, "phi"),
    (dict(spacing=(1, -1, 1)), ValueError, "spacing"),
    (dict(spacing=(1, 1)), ValueError, "spacing"),
    (dict(mode="nearest"), ValueError, "mode"),
    (dict(stats=("energy", "median")), ValueError, "stats"),
    (dict(volume=np.zeros((4, 4))), ValueError, "volume"),
    (dict(volume=np.zeros((0, 4, 4))), ValueError, "volume"),
    (dict(volume=np.full((4, 4, 4), np.nan)), ValueError, "volume"),
    (dict(volume=np.zeros((4, 4, 4), complex)), TypeError, "volume"),
    (dict(theta=["a"]), TypeError, "theta"),
    (dict(device="tpu"), ValueError, "device"),
])
def test_bad_input(kwargs, exc, word):
    args = dict(volume=np.zeros((5, 6, 7)), theta=[0.0], phi=[0.0], xi=[1.0])
    args.update(kwargs)
    vol, th, ph, xi = args.pop("volume"), args.pop("theta"), args.pop("phi"), args.pop("xi")
    with pytest.raises(exc, match=word):
        sweep(vol, th, ph, xi, progress=False, **{"device": "cpu", **args})


def test_cpu_statistics_deterministic_across_thread_counts(monkeypatch):
    # Partials are per x-plane and merged in plane order: the statistics are bit-identical
    # run to run and whatever the number of threads (and hence the chunking) is.
    from volsweep.engine import _cpu as _engine_cpu

    v = _vol((26, 23, 21), seed=11)
    kw = dict(a=1.2, spacing=SPACING, mode="reflect", device="cpu", progress=False)
    runs = []
    for n in (1, 2, 3, 2):
        monkeypatch.setattr(_engine_cpu, "n_threads", lambda n=n: n)
        runs.append(sweep(v, THETA, PHI, XI, **kw))
    p = sweep(v, THETA, PHI, XI, **{**kw, "mode": "wrap"}, stats=("energy", "std", "mean"))
    monkeypatch.setattr(_engine_cpu, "n_threads", lambda: 1)
    p1 = sweep(v, THETA, PHI, XI, **{**kw, "mode": "wrap"}, stats=("energy", "std", "mean"))
    for s in ("energy", "std", "max", "mean", "min"):
        for r in runs[1:]:
            np.testing.assert_array_equal(r[s].values, runs[0][s].values)
    for s in ("energy", "std", "mean"):
        np.testing.assert_array_equal(p[s].values, p1[s].values)
