"""Per-voxel orientation (local energy), scales, ξ = 1, fibre families, metadata, cost model."""

import numpy as np
import pytest
import scipy.ndimage as ndi
import xarray as xr

import sweep_oracle as oracle
from fibre_volumes import axis_angle, lattice_direction, open_fibres, periodic_fibres
from volsweep import sweep
from volsweep.engine._plan import gaussian_taps, taps_halo
from volsweep.engine import memory_needs, sweep_cost
from volsweep.engine.orientation import (MAP_SCALE_PER_RADIUS, SCALE_PER_RADIUS, auto_scales,
                                        scale_from_thickness)
from volsweep.engine.products import dominant_orientation, with_products
from volsweep.engine.wavelet import axis_vector, reference_halfwidth, wavelet_energy

SPACING = (1.0, 0.8, 1.3)
N_GRID = 12
GRID = np.arange(N_GRID) * np.pi / N_GRID  # θ and φ: k·π/12, as config {num: 12}
STEP = np.pi / N_GRID


def _vol(shape, seed):
    return np.random.default_rng(seed).random(shape)


def _oracle_local_energy(v, a, th, ph, xi, sigma, spacing, boundary="mode"):
    """float64 brute force: G on the extension (reflect, or the mean for ``boundary='mean'``),
    G²/W, separable Gaussian, core; and G on the reflect extension."""
    taps = gaussian_taps(sigma, spacing)
    reach = taps_halo(taps)
    hw = reference_halfwidth(a, max(xi), spacing)
    pad = [r + h + 1 for r, h in zip(reach, hw)]
    big = np.pad(v, [(p, p) for p in pad], mode="symmetric")  # scipy's 'reflect'
    mean = np.pad(v - v.mean(), [(p, p) for p in pad])  # the mean outside, V − mean inside
    out = []
    for t in th:
        for p in ph:
            for x in xi:
                g = oracle.response(big, a, t, p, x, spacing, "wrap")  # exact away from the edges
                gm = oracle.response(mean, a, t, p, x, spacing, "wrap") if boundary == "mean" else g
                e = gm * gm / wavelet_energy(a, [x], spacing)[0]
                for d in range(3):
                    e = ndi.correlate1d(e, taps[d], axis=d, mode="constant")
                core = tuple(slice(q, q + n) for q, n in zip(pad, v.shape))
                out.append((e[core], g[core]))
    return out


@pytest.mark.parametrize("boundary", ["mean", "mode"])
def test_local_energy_matches_bruteforce(boundary):
    v = _vol((13, 11, 9), seed=1)
    th, ph, xi = [0.0, 0.6, np.pi / 2], [0.0, 1.0], [0.7, 1.0, 1.5]
    a, sigma = 1.0, 1.2
    ds = sweep(v, th, ph, xi, a=a, spacing=SPACING, device="cpu", progress=False,
               orientation_map=True, integration_scale=sigma, orientation_boundary=boundary)
    assert ds.attrs["orientation_boundary"] == boundary
    ref = _oracle_local_energy(v, a, th, ph, xi, sigma, SPACING, boundary)
    e = np.stack([r[0] for r in ref])
    g = np.stack([r[1] for r in ref])
    directional = np.array([x != 1.0 for _ in th for _ in ph for x in xi])
    best = e[directional].max(axis=0)
    np.testing.assert_allclose(ds["local_energy_max"].values, best, rtol=1e-4)
    np.testing.assert_allclose(ds["response_max"].values, g.max(axis=0), atol=1e-5 * g.std())
    flat = np.ravel_multi_index((ds["argmax_theta"].values, ds["argmax_phi"].values,
                                 ds["argmax_xi"].values), (len(th), len(ph), len(xi)))
    assert not np.any(np.asarray(xi)[ds["argmax_xi"].values] == 1.0)  # ξ = 1 has no direction
    chosen = np.take_along_axis(e, flat[None], axis=0)[0]
    assert np.max(np.abs(chosen - best) / best) < 1e-4
    # the rule differs from the raw per-voxel maximum on random data
    raw = np.argmax(np.where(directional[:, None, None, None], g, -np.inf), axis=0)
    assert np.mean(raw != flat) > 0.2
    assert ds.attrs["orientation_rule"] == "local_energy" and ds.attrs["integration_scale"] == sigma


@pytest.mark.parametrize("mode, limit", [("reflect", 2.8e6), ("wrap", 8e6)])
def test_local_energy_tiled_equals_untiled(mode, limit):
    v = _vol((30, 24, 20), seed=2)  # 24 and 20 are fast: wrap transforms them at their period
    kw = dict(a=1.0, spacing=SPACING, mode=mode, device="cpu", progress=False, orientation_map=True)
    th, ph, xi = [0.2, 1.0], [0.4, 2.0], [0.8, 2.0]
    whole = sweep(v, th, ph, xi, **kw)
    tiled = sweep(v, th, ph, xi, memory_limit=limit, **kw)
    assert tiled.attrs["n_blocks"] > 1 and whole.attrs["n_blocks"] == 1
    if mode == "reflect":  # the map's own pass on the mean extension: tiled halos are full
        assert tiled.attrs["orientation_n_blocks"] > 1 and whole.attrs["orientation_n_blocks"] == 1
        assert np.all(np.array(tiled.attrs["orientation_halo"]) > np.array(whole.attrs["orientation_halo"]))
    np.testing.assert_allclose(tiled["response_max"].values, whole["response_max"].values, rtol=1e-5,
                               atol=1e-6 * np.abs(whole["response_max"].values).max())
    np.testing.assert_allclose(tiled["local_energy_max"].values, whole["local_energy_max"].values, rtol=1e-5)
    for name in ("argmax_theta", "argmax_phi", "argmax_xi"):
        assert np.mean(tiled[name].values == whole[name].values) > 0.999, name
    np.testing.assert_allclose(tiled["orientation_votes"].values, whole["orientation_votes"].values,
                               rtol=1e-3, atol=1e-3 * whole["orientation_votes"].values.max())


def _count_background_copies(monkeypatch):
    from volsweep import backend

    calls, when_done = [], backend.when_done
    monkeypatch.setattr(backend, "when_done", lambda fn, arrays: calls.append(1) or when_done(fn, arrays))
    return calls


def test_map_copied_in_background_equals_in_line(monkeypatch):
    # the map's host copies overlap the statistics pass unless the budget cannot hold them
    v = _vol((21, 18, 13), seed=1)
    kw = dict(a=1.0, spacing=SPACING, mode="reflect", device="cpu", progress=False, orientation_map=True)
    th, ph, xi = [0.2, 1.0], [0.4, 2.0], [0.8, 2.0]
    calls = _count_background_copies(monkeypatch)
    seen = []
    background = sweep(v, th, ph, xi, on_map=lambda arrays: seen.append(sorted(arrays)), **kw)
    assert len(calls) == 1
    untiled, _ = memory_needs(v.shape, th, ph, xi, a=1.0, spacing=SPACING, orientation_map=True,
                              mode="reflect", device="cpu")
    in_line = sweep(v, th, ph, xi, memory_limit=untiled, **kw)  # untiled, nothing spare
    assert len(calls) == 1 and in_line.attrs["n_blocks"] == in_line.attrs["orientation_n_blocks"] == 1
    assert seen == [["argmax_phi", "argmax_theta", "argmax_xi", "local_energy_max"]]
    assert list(background.data_vars) == list(in_line.data_vars)
    for name in background.data_vars:
        np.testing.assert_array_equal(background[name].values, in_line[name].values, err_msg=name)


def test_on_map_errors_reach_the_caller():
    def refuse(arrays):
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        sweep(_vol((12, 11, 10), seed=2), [0.3], [0.5], [2.0], a=1.0, device="cpu", progress=False,
              orientation_map=True, on_map=refuse)


def test_xi_one_is_one_kernel_and_isotropic():
    v = _vol((15, 14, 13), seed=3)
    th, ph = [0.0, 0.5, 1.1], [0.0, 0.7]
    ds = sweep(v, th, ph, [1.0, 2.0], a=1.2, spacing=SPACING, device="cpu", progress=False)
    assert ds.attrs["n_unique_kernels"] == 1 + 6 and ds.attrs["n_kernels"] == 12
    assert ds.sizes == {"theta": 3, "phi": 2, "xi": 2}  # the grid stays full
    e1 = ds["energy"].values[:, :, 0]
    assert np.all(e1 == e1[0, 0])
    ref = oracle.sweep_stats(v, [0.5], [0.7], [1.0], 1.2, SPACING)
    np.testing.assert_allclose(e1[1, 1], ref["energy"][0, 0, 0], rtol=1e-4)
    prod = with_products(ds)
    assert np.isnan(prod["dominant_theta"].values[0]) and np.isnan(prod["dominant_phi"].values[0])
    assert np.isfinite(prod["dominant_theta"].values[1])
    assert prod["dominant_theta_index"].values[0] == -1
    assert "isotropic" in prod["dominant_theta"].attrs["comment"]
    assert "isotropic" in prod.attrs["isotropic_xi"]
    assert np.all(np.isnan(prod["degree_of_anisotropy"].values[0]))
    with pytest.raises(ValueError, match="xi"):
        sweep(v, th, ph, [1.0], device="cpu", progress=False, orientation_map=True)


def test_a_list_adds_a_dimension_and_best_scale():
    v = _vol((17, 14, 12), seed=4)
    th, ph, xi = [0.3, 1.2], [0.7], [0.6, 2.0]
    kw = dict(spacing=SPACING, device="cpu", progress=False, orientation_map=True)
    both = sweep(v, th, ph, xi, a=[1.0, 1.6], **kw)
    one = [sweep(v, th, ph, xi, a=a, **kw) for a in (1.0, 1.6)]
    assert both["energy"].dims == ("a", "theta", "phi", "xi")
    assert both["wavelet_energy"].dims == ("a", "xi") and list(both["a"].values) == [1.0, 1.6]
    for k in range(2):
        np.testing.assert_allclose(both["energy"].values[k], one[k]["energy"].values, rtol=1e-5)
    stack = np.stack([o["local_energy_max"].values for o in one])  # other FFT shapes: float32 rounding
    np.testing.assert_allclose(both["local_energy_max"].values, stack.max(axis=0), rtol=1e-5)
    clear = np.abs(stack[0] - stack[1]) > 1e-3 * stack.max(axis=0)
    np.testing.assert_array_equal(both["argmax_a"].values[clear], np.argmax(stack, axis=0)[clear])
    assert both.attrs["integration_scale"] == [1.0, 1.6]
    dom = dominant_orientation(both)
    assert dom["dominant_theta"].dims == ("a", "xi")
    small = sweep(v, th, ph, xi, a=[1.0, 1.6], orientation_a=1.0, **kw)  # the map at a = 1 only
    assert np.all(small["argmax_a"].values == 0) and small.attrs["orientation_a"] == [1.0]
    np.testing.assert_allclose(small["local_energy_max"].values, stack[0], rtol=1e-5)
    np.testing.assert_array_equal(small["energy"].values, both["energy"].values)
    with pytest.raises(ValueError, match="orientation_a"):
        sweep(v, th, ph, xi, a=[1.0, 1.6], orientation_a=2.0, **kw)


def _accuracy(ds, mask, axis):
    u = axis_vector(GRID[ds["argmax_theta"].values], GRID[ds["argmax_phi"].values])
    return float(np.mean(axis_angle(u[mask], axis[mask]) <= STEP + 1e-9))


@pytest.mark.parametrize("seed", [1, 7])
def test_per_voxel_orientation_of_fibres_edges_included(seed):
    # radius 2.5, noise σ = 0.3, a 12 × 12 grid; the direction (2, 3, 1) is 7° off the grid
    vol, mask, axis = periodic_fibres((48, 48, 48), [{"direction": (2, 3, 1), "count": 3}],
                                      radius=2.5, noise=0.3, seed=seed)
    kw = dict(a=SCALE_PER_RADIUS * 2.5, mode="wrap", device="cpu", progress=False, orientation_map=True)
    ds = sweep(vol, GRID, GRID, [2.0, 3.0], **kw)
    acc = _accuracy(ds, mask, axis)
    assert acc >= 0.85
    raw = sweep(vol, GRID, GRID, [2.0, 3.0], orientation_rule="response", **kw)
    one_voxel = sweep(vol, GRID, GRID, [2.0, 3.0], integration_scale=0.0, **kw)
    assert acc >= _accuracy(raw, mask, axis) and acc >= _accuracy(one_voxel, mask, axis)


@pytest.mark.parametrize("radius", [2.0, 3.0, 4.0])
def test_dominant_direction_with_a_from_thickness(radius):
    import volsweep

    n = 48 if radius < 4 else 72  # the kernel (a·ξ ≈ 30 voxels at R = 4) fits the period
    vol, mask, axis = periodic_fibres((n, n, n), [{"direction": (2, 3, 1), "count": 2}],
                                      radius=radius, noise=0.3, seed=5)
    lt = volsweep.local_thickness(mask, device="cpu")
    a = scale_from_thickness(volsweep.thickness_distribution(lt, bins=20))
    assert abs(a / (SCALE_PER_RADIUS * radius) - 1) < 0.25
    ds = sweep(vol, GRID, GRID, [2.0, 3.0], a=a, mode="wrap", device="cpu", progress=False)
    dom = dominant_orientation(ds)
    truth = lattice_direction((2, 3, 1))
    for t, p in zip(dom["dominant_theta_refined"].values, dom["dominant_phi_refined"].values):
        assert axis_angle(axis_vector(t, p), truth) <= STEP / 2, (radius, a, t, p)


def test_two_families_at_60_degrees_are_separate_maxima():
    import volsweep

    d1, d2 = (1, 1, 2), (2, -1, 1)  # 60° apart, both 6.6° off the grid
    assert abs(np.degrees(axis_angle(lattice_direction(d1), lattice_direction(d2))) - 60) < 1e-9
    vol, mask, axis = periodic_fibres((48, 48, 48), [{"direction": d1, "count": 2},
                                                     {"direction": d2, "count": 2}],
                                      radius=2.5, noise=0.3, seed=2)
    # a: auto: the map at √2·r, the statistics at √2·r and 2.5·r
    a, a_map = auto_scales(volsweep.thickness_distribution(volsweep.local_thickness(mask, device="cpu"), bins=20))
    assert abs(a_map / (MAP_SCALE_PER_RADIUS * 2.5) - 1) < 0.1 and len(a) == 2
    ds = with_products(sweep(vol, GRID, GRID, [2.0, 3.0], a=a, orientation_a=a_map, mode="wrap",
                             device="cpu", progress=False, orientation_map=True))
    assert np.all(ds["argmax_a"].values == a.index(a_map))
    assert _accuracy(ds, mask, axis) >= 0.85  # 70% with the map at 2.5·r
    assert int(ds["vote_n_families"]) == 2
    found = [axis_vector(t, p) for t, p in zip(ds["vote_family_theta"].values[:2], ds["vote_family_phi"].values[:2])]
    err = [[np.degrees(axis_angle(f, lattice_direction(d))) for d in (d1, d2)] for f in found]
    assert min(err[0]) <= 15 and min(err[1]) <= 15 and np.argmin(err[0]) != np.argmin(err[1]), err
    assert np.all(ds["vote_family_spread"].values[:2] > 0)
    assert 0.5 < float(ds["vote_degree_of_anisotropy"]) <= 1.0
    assert ds["fabric_eigenvalues"].dims == ("a", "xi", "eigen")
    np.testing.assert_allclose(ds["fabric_eigenvalues"].sum("eigen").values, 1.0)


def _face_distance(shape):
    idx = np.indices(shape)
    return np.min([np.minimum(idx[d], shape[d] - 1 - idx[d]) for d in range(3)], axis=0)


def test_map_near_the_faces_of_an_open_box():
    # fibres crossing the faces of an odd, anisotropic open box, on a background of 0.5
    shape, radius, n = (37, 30, 26), 2.0, 8
    grid, step = np.arange(n) * np.pi / n, np.pi / n
    vol, mask, axis = open_fibres(shape, [{"direction": (2, 3, 1), "count": 3}], radius=radius,
                                  noise=0.3, seed=4)
    face = mask & (_face_distance(shape) <= 1)
    assert face.sum() > 0.3 * mask.sum()
    kw = dict(a=MAP_SCALE_PER_RADIUS * radius, device="cpu", progress=False, orientation_map=True,
              truncate=4.0)
    acc = {}
    for mode, boundary in (("reflect", "mean"), ("reflect", "mode"), ("constant", "mode")):
        ds = sweep(vol + 0.5, grid, grid, [2.5], mode=mode, orientation_boundary=boundary, **kw)
        u = axis_vector(grid[ds["argmax_theta"].values], grid[ds["argmax_phi"].values])
        ok = axis_angle(u, axis) <= step + 1e-9
        acc[mode, boundary] = (ok[mask].mean(), ok[face].mean())
    assert acc["reflect", "mean"][0] >= 0.97 and acc["reflect", "mean"][1] >= 0.95, acc
    # the mirrored fibres (reflect) and the step to zero (constant) corrupt the faces
    assert acc["reflect", "mode"][1] < acc["reflect", "mean"][1] - 0.1, acc
    assert acc["constant", "mode"][1] < acc["reflect", "mean"][1] - 0.2, acc


def test_sweep_cost_agrees_with_the_map_pass():
    shape, th, ph, xi = (19, 16, 13), GRID[:3], GRID[:2], [1.0, 2.5]
    kw = dict(a=[1.1, 1.7], spacing=SPACING, orientation_map=True, orientation_a=1.1, integration_scale=0.9)
    c = sweep_cost(shape, th, ph, xi, device="cpu", **kw)
    ds = sweep(_vol(shape, 12), th, ph, xi, device="cpu", progress=False, **kw)
    assert ds.attrs["orientation_boundary"] == "mean"
    assert c["map_fft_shapes"] == [ds.attrs["orientation_fft_shape"]] and c["map_halo"] == ds.attrs["orientation_halo"]
    assert c["map_n_kernels"] == 3 * 2 and c["halo"] == ds.attrs["halo"]  # ξ = 1 and a = 1.7 not in the map
    assert all(m <= h for m, h in zip(ds.attrs["orientation_halo"], ds.attrs["halo"]))
    untiled, smallest = memory_needs(shape, th, ph, xi, spacing=SPACING, a=[1.1, 1.7], orientation_map=True,
                                     orientation_a=1.1, integration_scale=0.9, mode="reflect")
    assert untiled == c["peak_bytes"] > smallest
    assert memory_needs(shape, th, ph, xi, spacing=SPACING, a=[1.1, 1.7], orientation_map=True,
                        orientation_a=1.1, integration_scale=0.9)[1] >= smallest  # every mode
    wrap = sweep_cost(shape, th, ph, xi, device="cpu", mode="wrap", **kw)
    assert "map_fft_shapes" not in wrap
    with pytest.raises(ValueError, match="orientation_boundary"):
        sweep(_vol(shape, 12), th, ph, xi, device="cpu", progress=False, orientation_boundary="reflect", **kw)


def test_scale_from_thickness_reads_the_median_diameter():
    ds = xr.Dataset({"median": 6.0, "mean": 7.0})
    assert scale_from_thickness(ds) == pytest.approx(SCALE_PER_RADIUS * 3.0)
    assert scale_from_thickness(ds, statistic="mean", factor=1.0) == pytest.approx(3.5)
    with pytest.raises(ValueError, match="median"):
        scale_from_thickness(xr.Dataset({"median": np.nan}))
    with pytest.raises(KeyError, match="median"):
        scale_from_thickness(xr.Dataset({"mode": 1.0}))


def test_attrs_units_and_one_set_of_versions():
    v = _vol((12, 11, 10), seed=9)
    ds = with_products(sweep(v, [0.0, 0.5], [0.1], [1.0, 2.0], a=1.5, device="cpu", progress=False,
                             unit="micrometer"))
    assert ds.attrs["unit"] == "micrometer"
    names = [v for v in ds.variables]
    assert len({ds[n].attrs.get("long_name") for n in names}) == len(names)  # each its own
    for n in names:
        assert "units" in ds[n].attrs, n
    assert not any(k.startswith("version_") for k in ds.attrs)


def test_merge_sweep_blocks_totals_and_per_block_lists(tmp_path):
    pytest.importorskip("h5netcdf")
    from volsweep.io.datasets import merge_sweep_blocks, write_netcdf

    v = _vol((14, 12, 11), seed=10)
    paths = []
    for b, (th, xi) in enumerate((([0.0, 0.4], [2.0]), ([0.8], [2.0]))):
        ds = sweep(v, th, [0.3], xi, a=1.0, device="cpu", progress=False, memory_limit=None if b else 3e5)
        ds.attrs["block"] = b
        paths.append(tmp_path / f"{b}.nc")
        write_netcdf(ds, paths[-1])
    merged = merge_sweep_blocks(paths, unit="micrometer",
                                provenance={"version_numpy": np.__version__, "config_sha256": "x"})
    assert merged.attrs["n_kernels"] == 3 and merged.attrs["n_unique_kernels"] == 3
    assert merged.attrs["n_parameter_blocks"] == 2 and merged.attrs["unit"] == "micrometer"
    assert merged.attrs["config_sha256"] == "x" and "version_numpy" not in merged.attrs
    assert merged.attrs["numpy_version"] == np.__version__
    assert isinstance(merged.attrs["n_blocks_per_parameter_block"], list)
    assert "block" not in merged.attrs
    assert merged["energy"].attrs["long_name"].startswith("response energy")


def test_sweep_cost_agrees_with_the_sweep():
    shape, th, ph, xi = (20, 18, 16), GRID[:4], GRID[:3], [1.0, 2.5]
    c = sweep_cost(shape, th, ph, xi, a=1.3, spacing=SPACING, device="cpu")
    ds = sweep(_vol(shape, 11), th, ph, xi, a=1.3, spacing=SPACING, device="cpu", progress=False)
    assert c["n_unique_kernels"] == ds.attrs["n_unique_kernels"] and c["n_kernels"] == ds.attrs["n_kernels"]
    assert c["fft_shapes"] == [ds.attrs["fft_shape"]] and c["halo"] == ds.attrs["halo"]
    assert c["peak_bytes"] == memory_needs(shape, th, ph, xi, a=1.3, spacing=SPACING)[0]
    more = sweep_cost(shape, GRID, GRID, xi, a=1.3, spacing=SPACING, device="cpu")
    assert more["seconds"] > 2 * c["seconds"] > 0
    gpu = sweep_cost(shape, th, ph, xi, a=1.3, spacing=SPACING, device="cuda")
    assert gpu["seconds"] < c["seconds"]


@pytest.mark.parametrize("kwargs, exc, word", [
    (dict(a=[1.0, 0.0]), ValueError, "a="),
    (dict(a=[1.0, 1.0]), ValueError, "a="),
    (dict(a=["x"]), TypeError, "a="),
    (dict(integration_scale=-1.0), ValueError, "integration_scale"),
    (dict(integration_scale=[1.0]), TypeError, "integration_scale"),
    (dict(orientation_rule="max"), ValueError, "orientation_rule"),
    (dict(unit=3), TypeError, "unit"),
])
def test_bad_orientation_inputs(kwargs, exc, word):
    with pytest.raises(exc, match=word):
        sweep(np.zeros((5, 6, 7)), [0.0], [0.0], [2.0], device="cpu", progress=False,
              orientation_map=True, **kwargs)


@pytest.mark.parametrize("boundary", ["mean", "mode"])
def test_on_map_gets_the_final_map_after_its_pass(monkeypatch, boundary):
    from volsweep.engine import _cpu

    events, seen = [], {}
    run_block = _cpu.CpuEngine.run_block

    def logged(self, volume, block, job, progress):
        events.append(job.omap)
        return run_block(self, volume, block, job, progress)

    def on_map(arrays):
        events.append("on_map")
        seen.update({n: a.copy() for n, a in arrays.items()})

    monkeypatch.setattr(_cpu.CpuEngine, "run_block", logged)
    shape, th, ph, xi = (17, 14, 11), GRID[:3], GRID[:2], [1.0, 2.5]
    kw = dict(a=1.3, orientation_map=True, orientation_boundary=boundary)
    ds = sweep(_vol(shape, 5), th, ph, xi, device="cpu", progress=False, on_map=on_map, **kw)
    names = ["argmax_phi", "argmax_theta", "argmax_xi", "local_energy_max"]
    if boundary == "mean":  # the map's pass, then its arrays while the statistics' blocks run
        n_local = events.count("local_energy")
        assert n_local >= 1 and events[:n_local] == ["local_energy"] * n_local
        assert events.count("on_map") == 1 and events.index("on_map") >= n_local
        assert set(events[n_local:]) == {"response", "on_map"}
    else:  # one pass: everything at its end
        assert events[-1] == "on_map" and events.count("on_map") == 1
        names = ["response_max"] + names
    assert sorted(seen) == sorted(names)
    for name in names:
        np.testing.assert_array_equal(seen[name], ds[name].values, err_msg=name)


def test_bad_on_map_and_memory_device_are_refused_before_any_work():
    shape, th, ph, xi = (9, 8, 7), GRID[:2], GRID[:1], [1.0, 2.0]
    with pytest.raises(TypeError, match="on_map must be a callable.*on_map=3"):
        sweep(_vol(shape, 1), th, ph, xi, device="cpu", progress=False, orientation_map=True, on_map=3)
    with pytest.raises(ValueError, match="device=.gpu."):
        memory_needs(shape, th, ph, xi, device="gpu")
