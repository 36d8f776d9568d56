"""Exact local thickness on the CPU: oracle equality, chunks, phase selection,
distribution and errors.  GPU comparisons live in test_thickness_gpu.py."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from thickness_oracle import oracle_d2, oracle_local_thickness  # noqa: E402

import volsweep  # noqa: E402
from volsweep import thickness as T  # noqa: E402
from volsweep import _thickness_cpu as CPU  # noqa: E402
from volsweep.tiling import plan_tiles  # noqa: E402


def blobs(shape, porosity=0.5, sigma=2.0, seed=0):
    from scipy import ndimage as ndi

    g = ndi.gaussian_filter(np.random.default_rng(seed).random(shape), sigma)
    return g > np.quantile(g, 1 - porosity)


def random_phase(shape, seed, p=0.3):
    return np.random.default_rng(seed).random(shape) > p


# ----------------------------------------------------------------------------- exactness
@pytest.mark.parametrize("spacing", [(1, 1, 1), (1, 2, 3), (3, 1, 2)])
@pytest.mark.parametrize("shape,seed", [((17, 23, 11), 0), ((9, 14, 20), 1), ((1, 30, 25), 2)])
def test_identical_to_oracle_integer_spacing(shape, seed, spacing):
    for phase in (random_phase(shape, seed), blobs(shape, sigma=2.0, seed=seed)):
        got = volsweep.local_thickness(phase, spacing=spacing)
        assert got.dtype == np.float32 and got.shape == phase.shape
        np.testing.assert_array_equal(got, oracle_local_thickness(phase, spacing))


@pytest.mark.parametrize("spacing", [(0.7, 1.1, 1.3), (0.5, 0.25, 0.8), (1.3, 0.9, 1.0)])
def test_oracle_non_integer_spacing(spacing):
    for seed, phase in enumerate((random_phase((12, 15, 10), 3), blobs((14, 11, 16), sigma=2, seed=4))):
        got = T.local_thickness(phase, spacing=spacing)
        ref = oracle_local_thickness(phase, spacing)
        np.testing.assert_allclose(got, ref, rtol=1e-6, atol=0)
        assert ((got > 0) == phase).all()


def test_distance_maps_equal_oracle():
    phase = blobs((15, 12, 18), sigma=2, seed=5)
    for spacing in [(1, 1, 1), (2, 1, 3)]:
        ref = oracle_d2(phase, spacing)
        np.testing.assert_array_equal(CPU.edt_sq(phase, spacing, method="edt"), ref)
        np.testing.assert_array_equal(CPU.edt_sq(phase, spacing, method="numba"), ref)
    ref = oracle_d2(phase, (0.7, 1.1, 1.3))
    np.testing.assert_array_equal(CPU.edt_sq(phase, (0.7, 1.1, 1.3)), ref)


def test_known_shapes():
    # A 5-voxel-thick slab (axis 0), infinite along the others: D at its middle is 3,
    # so every slab voxel is covered by a ball of diameter 6.
    phase = np.zeros((9, 8, 8), bool)
    phase[2:7] = True
    lt = T.local_thickness(phase)
    assert np.all(lt[2:7] == 6.0) and np.all(lt[:2] == 0) and np.all(lt[7:] == 0)
    # Same with spacing 2 along axis 0: diameters double.
    assert np.all(T.local_thickness(phase, spacing=(2, 1, 1))[2:7] == 12.0)
    # Empty phase: zeros.
    assert not T.local_thickness(np.zeros((4, 5, 6), bool)).any()
    # One isolated voxel: D = 1, LT = 2.
    one = np.zeros((5, 5, 5), bool)
    one[2, 2, 2] = True
    assert T.local_thickness(one)[2, 2, 2] == 2.0


def test_pruning_keeps_far_fewer_centres_and_stays_exact():
    phase = blobs((40, 40, 40), sigma=3, seed=7)
    d2 = CPU.edt_sq(phase, (1, 1, 1))
    cand = CPU.candidates(d2, (1, 1, 1), (0, 0, 0), phase.shape, np.inf, 0.0)
    assert cand.size < 0.5 * phase.sum()
    # Painting every phase voxel's ball (no pruning) gives the same map.
    everything = np.flatnonzero(phase.ravel())
    ranks_all, vals_all = CPU.paint(d2, everything, (1, 1, 1), (0, 0, 0), phase.shape)
    np.testing.assert_array_equal(CPU.finish(ranks_all, vals_all), T.local_thickness(phase))


def test_exact_beyond_the_pruning_table(monkeypatch):
    # Radii past the discrete table fall back to the continuous containment test.
    monkeypatch.setattr(CPU, "MAX_TABLE_OFFSETS", 30)
    monkeypatch.setattr(CPU, "_PRUNE_TABLES", {})
    for spacing in [(1, 1, 1), (0.7, 1.1, 1.3)]:
        phase = blobs((16, 14, 18), sigma=2.5, seed=12)
        levels, need, cap = CPU.prune_table(100.0, spacing)
        d2 = CPU.edt_sq(phase, spacing)
        assert d2.max() > cap  # the fallback is exercised
        got = T.local_thickness(phase, spacing=spacing)
        ref = oracle_local_thickness(phase, spacing)
        if CPU.is_integer_spacing(spacing):
            np.testing.assert_array_equal(got, ref)
        else:
            np.testing.assert_allclose(got, ref, rtol=1e-6, atol=0)


# ----------------------------------------------------------------------------- chunks
def chunked(phase, tile, spacing, halo=None, r_max=None):
    r_max = T.max_inscribed_radius(phase, spacing=spacing) if r_max is None else r_max
    halo = T.thickness_halo(r_max, spacing) if halo is None else halo
    out = np.full(phase.shape, -1.0, np.float32)
    for t in plan_tiles(phase.shape, tile, halo):
        start = [max(0, a) for a in t.start]
        stop = [min(n, b) for b, n in zip(t.stop, phase.shape)]
        block = phase[tuple(slice(a, b) for a, b in zip(start, stop))]
        cib = tuple(slice(c.start - a, c.stop - a) for c, a in zip(t.core, start))
        out[t.core] = T.local_thickness_core(block, cib, r_max, spacing=spacing)
    return out, r_max


@pytest.mark.parametrize("spacing", [(1, 1, 1), (1, 2, 1), (0.8, 1.2, 1.0)])
def test_chunked_equals_whole_with_chunks_smaller_than_2rmax(spacing):
    phase = blobs((44, 38, 33), sigma=3.0, seed=11)
    whole = T.local_thickness(phase, spacing=spacing)
    r_max = T.max_inscribed_radius(phase, spacing=spacing)
    tile = tuple(max(2, int(r_max / s)) for s in spacing)
    assert all(t * s < 2 * r_max for t, s in zip(tile, spacing))
    out, _ = chunked(phase, tile, spacing)
    np.testing.assert_array_equal(out, whole)


def test_chunked_with_too_thin_halo_is_not_exact():
    # The halo matters: with a one-voxel halo some core voxel differs (or r_max is refuted).
    phase = blobs((44, 38, 33), sigma=3.0, seed=11)
    whole = T.local_thickness(phase)
    try:
        out, _ = chunked(phase, (8, 8, 8), (1, 1, 1), halo=1)
    except ValueError:
        return
    assert not np.array_equal(out, whole)


def test_core_rejects_too_small_r_max():
    phase = blobs((30, 30, 30), sigma=3.0, seed=2)
    r_max = T.max_inscribed_radius(phase)
    with pytest.raises(ValueError, match="r_max"):
        T.local_thickness_core(phase, (slice(0, 30),) * 3, r_max / 2)


def test_thickness_halo():
    assert T.thickness_halo(3.0) == (7, 7, 7)
    assert T.thickness_halo(3.0, (1, 2, 0.5)) == (7, 5, 13)
    assert T.thickness_halo(2.5) == (7, 7, 7)
    assert T.thickness_halo(0.0) == (1, 1, 1)
    with pytest.raises(ValueError, match="r_max"):
        T.thickness_halo(-1.0)


def test_max_inscribed_radius():
    phase = np.zeros((11, 11, 11), bool)
    phase[1:10, 1:10, 1:10] = True  # 9-voxel cube: centre is 5 from the outside layer
    assert T.max_inscribed_radius(phase) == 5.0
    assert T.max_inscribed_radius(phase, spacing=(1, 1, 0.5)) == 2.5
    assert T.max_inscribed_radius(np.zeros((3, 3, 3), bool)) == 0.0


# ----------------------------------------------------------------------------- phase selection
def test_select_phase():
    vol = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    np.testing.assert_array_equal(T.select_phase(vol, threshold=10), vol > 10)
    np.testing.assert_array_equal(T.select_phase(vol, threshold=10, invert=True), vol <= 10)
    lab = (np.arange(24) % 3).reshape(2, 3, 4)
    np.testing.assert_array_equal(T.select_phase(lab, label=2), lab == 2)
    np.testing.assert_array_equal(T.select_phase(lab, label=2, invert=True), lab != 2)
    with pytest.raises(ValueError, match="sample7.*empty"):
        T.select_phase(vol, threshold=100, name="sample7")
    with pytest.raises(ValueError, match="sample7.*fills"):
        T.select_phase(vol, threshold=-1, name="sample7")
    with pytest.raises(ValueError, match="sample7.*empty"):
        T.select_phase(lab, label=5, name="sample7")
    with pytest.raises(ValueError, match="exactly one"):
        T.select_phase(vol)
    with pytest.raises(ValueError, match="exactly one"):
        T.select_phase(vol, threshold=1, label=1)


# ----------------------------------------------------------------------------- distribution
def test_value_counts_and_merge_are_exact_and_order_independent():
    rng = np.random.default_rng(0)
    phase = blobs((30, 26, 20), sigma=2.5, seed=1)
    lt = T.local_thickness(phase)
    v, c = T.value_counts(lt)
    assert v.dtype == np.float64 and c.dtype == np.int64 and np.all(np.diff(v) > 0)
    assert c.sum() == phase.sum()
    parts = [T.value_counts(lt[a:b]) for a, b in [(0, 7), (7, 19), (19, 30)]]
    for perm in ([0, 1, 2], [2, 0, 1], [1, 2, 0]):
        mv, mc = T.merge_value_counts([parts[i] for i in perm])
        np.testing.assert_array_equal(mv, v)
        np.testing.assert_array_equal(mc, c)
    ref_v, ref_c = np.unique(lt[lt > 0], return_counts=True)
    np.testing.assert_array_equal(v, ref_v.astype(np.float64))
    np.testing.assert_array_equal(c, ref_c)
    assert rng is not None


def test_distribution_numbers_match_numpy():
    phase = blobs((30, 26, 20), sigma=2.5, seed=1)
    spacing = (0.5, 1.0, 2.0)
    lt = T.local_thickness(phase, spacing=spacing)
    vals = lt[lt > 0].astype(np.float64)
    ds = volsweep.thickness_distribution(lt, bins=12, spacing=spacing)
    edges = np.linspace(0, vals.max(), 13)
    hist, _ = np.histogram(vals, bins=edges)
    np.testing.assert_array_equal(ds["voxel_count"].values, hist)
    np.testing.assert_allclose(ds["volume"].values, hist * 1.0)
    np.testing.assert_allclose(ds["volume_fraction_of_phase"].values.sum(), 1.0)
    np.testing.assert_allclose(float(ds["mean"]), vals.mean(), rtol=1e-12)
    assert float(ds["median"]) == np.median(vals)
    assert float(ds["max"]) == vals.max()
    assert float(ds["volume_fraction"]) == phase.mean()
    np.testing.assert_allclose(ds["diameter_lower"].values, edges[:-1])
    assert "DIAMETER" in ds.attrs["quantity"] and "radius" in ds.attrs["quantity"]
    assert ds["mean"].attrs["units"] and ds["voxel_count"].attrs["long_name"]
    # Explicit edges and the composition from merged counts.
    edges2 = np.array([0, 1, 2.5, 4, 8, 100.0])
    ds2 = T.distribution_from_counts(*T.value_counts(lt), lt.size, bins=edges2, spacing=spacing)
    np.testing.assert_array_equal(ds2["voxel_count"].values, np.histogram(vals, bins=edges2)[0])
    # Median of an even-sized multiset averages the two middle values (numpy convention).
    v, c = np.array([1.0, 2.0, 3.0]), np.array([1, 1, 2])
    assert float(T.distribution_from_counts(v, c, 10, bins=3)["median"]) == 2.5


# ----------------------------------------------------------------------------- errors, API
def test_bad_inputs_name_the_argument():
    vol = np.random.default_rng(0).random((5, 6, 7)).astype(np.float32)
    with pytest.raises(TypeError, match=r"binary.*bool.*volume > t.*select_phase"):
        T.local_thickness(vol)
    with pytest.raises(TypeError, match="binary"):
        T.local_thickness((vol > 0.5).astype(np.uint8))
    with pytest.raises(ValueError, match=r"binary must be a 3D array.*2D"):
        T.local_thickness(vol[0] > 0.5)
    with pytest.raises(ValueError, match=r"spacing.*\(1, 0, 1\)"):
        T.local_thickness(vol > 0.5, spacing=(1, 0, 1))
    with pytest.raises(ValueError, match=r"spacing.*-2"):
        T.max_inscribed_radius(vol > 0.5, spacing=(1, 1, -2))
    with pytest.raises(ValueError, match="spacing"):
        T.local_thickness(vol > 0.5, spacing=(1, 1))
    with pytest.raises(ValueError, match="device"):
        T.local_thickness(vol > 0.5, device="gpu")
    with pytest.raises(ValueError, match="no background"):
        T.local_thickness(np.ones((3, 4, 5), bool))
    with pytest.raises(TypeError, match="block"):
        T.local_thickness_core(vol, (slice(0, 2),) * 3, 2.0)


def test_public_exports():
    assert volsweep.local_thickness is T.local_thickness
    assert volsweep.thickness_distribution is T.thickness_distribution


@pytest.mark.parametrize("spacing", [(1, 1, 1), (2, 1, 3), (0.7, 1.1, 1.3)])
def test_cpu_painters_agree(spacing):
    # "bits" (default: decreasing D2, a bit per voxel, discs inside an uphill neighbour's
    # disc skipped) and "table" must agree, with and without prune's uphill bits.
    phase = blobs((30, 26, 37), sigma=2.5, seed=11)
    d2 = CPU.edt_sq(phase, spacing)
    cand, up = CPU.candidates(d2, spacing, (0, 0, 0), phase.shape, np.inf, 0.0, with_uphill=True)
    for lo, hi in [((0, 0, 0), phase.shape), ((3, 5, 7), (20, 19, 30))]:
        a = CPU.paint(d2, cand, spacing, lo, hi, method="table")
        for method, kw in [("bits", {}), ("bits", {"uphill": up})]:
            b = CPU.paint(d2, cand, spacing, lo, hi, method=method, **kw)
            np.testing.assert_array_equal(a[0], b[0])
            np.testing.assert_array_equal(a[1], b[1])


def test_bits_painter_slice_skip_on_porous_volume_equals_oracle():
    # Larger balls (R up to ~6) so that many discs are skipped; exact vs the brute force.
    phase = blobs((26, 22, 28), sigma=3.0, seed=3)
    for spacing in [(1, 1, 1), (1, 2, 1)]:
        got = T.local_thickness(phase, spacing=spacing)
        np.testing.assert_array_equal(got, oracle_local_thickness(phase, spacing))
