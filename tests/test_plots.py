"""The report's figures: labels and units, the isotropic ξ = 1 panel, the stereonet projection."""

import doctest
import math

import numpy as np
import pytest
import xarray as xr

from volsweep import plots
from volsweep.steps import figures
from volsweep.io.store import create_store
from volsweep.io import orientation as orientation_store
from volsweep.io.datasets import write_netcdf
from volsweep.engine.products import with_products
from volsweep.thickness import distribution_from_counts
from volsweep.engine.wavelet import axis_vector


def colourbar_labels(fig):
    return [ax.get_ylabel() for ax in fig.axes if ax.get_label() == "<colorbar>"]


def texts(fig):
    out = [t.get_text() for ax in fig.axes for t in ax.texts]
    return out + ([fig._suptitle.get_text()] if fig._suptitle is not None else [])


def sweep_dataset(xi=(0.5, 1.0, 2.0, 4.0), stats=("energy", "std"), truth=(1.0, 0.0, 0.0)):
    """A sweep-like Dataset: energy peaked at the axis ``truth``, flat up to rounding at ξ = 1."""
    theta = np.arange(8) * np.pi / 8
    phi = np.arange(8) * np.pi / 8
    t, p = np.meshgrid(theta, phi, indexing="ij")
    cos = np.abs(axis_vector(t, p) @ np.asarray(truth, float))
    rng = np.random.default_rng(0)
    maps = []
    for x in xi:
        if x == 1.0:  # the same kernel in every direction: only rounding differs
            maps.append(1e5 * (1 + 1e-13 * rng.standard_normal(t.shape)))
        else:
            maps.append(1e5 * (1 + 0.5 * cos ** (4 * x)))
    energy = np.stack(maps, axis=-1)
    data = {"wavelet_energy": ("xi", np.ones(len(xi)))}
    if "energy" in stats:
        data["energy"] = (("theta", "phi", "xi"), energy)
    if "std" in stats:
        data["std"] = (("theta", "phi", "xi"), np.sqrt(energy))
    ds = xr.Dataset(data, coords={"theta": theta, "phi": phi, "xi": list(xi)})
    return with_products(ds)


# ----------------------------------------------------------------------------- units and extent
def test_unit_labels():
    assert plots.axis_label("x", "micrometer") == "x (µm)"
    assert plots.axis_label("y", "nm") == "y (nm)"
    assert plots.axis_label("z", None, (1, 1, 1)) == "z (voxel units)"
    assert plots.axis_label("z", None, (0.5, 0.5, 2.0)) == "z (spacing units)"
    assert plots.axis_label("x", "furlong") == "x (furlong)"


def test_slice_extent_uses_the_spacing():
    # Voxel i centred at i*s: an axis of n voxels spans [-s/2, (n - 1/2) s].
    assert plots.slice_extent((10, 4), (0.65, 2.0)) == pytest.approx((-0.325, 6.175, -1.0, 7.0))


def test_thickness_slice_in_physical_units():
    v = np.zeros((10, 6, 4), np.float32)
    v[2:6, 1:4] = 1.0
    fig = plots.thickness_slice(v, 2.5 * v, axis=2, spacing=(0.65, 2.0, 3.0), unit="micrometer")
    ax = fig.axes[0]
    assert ax.get_xlabel() == "x (µm)" and ax.get_ylabel() == "y (µm)"
    for im in ax.images:
        assert im.get_extent() == pytest.approx([-0.325, 6.175, -1.0, 11.0])
    assert colourbar_labels(fig) == ["local thickness, diameter (µm)"]
    # the slice normal to x shows (y, z)
    fig = plots.thickness_slice(v, 2.5 * v, axis=0, spacing=(0.65, 2.0, 3.0), unit=None)
    assert fig.axes[0].get_xlabel() == "y (spacing units)"
    assert fig.axes[0].get_ylabel() == "z (spacing units)"
    assert fig.axes[0].images[0].get_extent() == pytest.approx([-1.0, 11.0, -1.5, 10.5])


def test_geometry_from_the_volume_attrs(tmp_path):
    arr = create_store(tmp_path / "v.zarr", (8, 6, 4), chunks=(4, 4, 4), shards=(8, 8, 4),
                       spacing=(0.5, 0.5, 2.0), attrs={"unit": "micrometer", "name": "v"})
    arr[...] = 0.0
    assert plots.geometry(arr) == ((0.5, 0.5, 2.0), "micrometer")


def test_thickness_histogram_labels():
    ds = distribution_from_counts(np.array([1.3, 2.6, 5.2]), np.array([10, 5, 1]), 100, bins=8,
                                  spacing=(0.65, 0.65, 0.65))
    fig = plots.thickness_histogram(ds, unit="um")
    ax = fig.axes[0]
    assert ax.get_xlabel() == "local thickness, diameter (µm)"
    assert ax.get_ylabel() == "fraction of the phase volume"
    assert ax.get_xlim() == pytest.approx((0.0, 5.2 * 1.05))  # bins in diameter, with a margin
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert legend[0].startswith("mean ") and legend[0].endswith(" µm")


def test_thickness_histogram_of_an_empty_phase():
    ds = distribution_from_counts(np.array([]), np.array([], np.int64), 10, bins=4)
    fig = plots.thickness_histogram(ds)
    assert any("empty" in t for t in texts(fig))


# ----------------------------------------------------------------------------- energy maps
def test_energy_maps_mark_xi_1_isotropic():
    ds = sweep_dataset()
    fig = plots.energy_maps(ds, title="demo")
    panels = {ax.get_title(): ax for ax in fig.axes if ax.get_title()}
    assert list(panels) == ["ξ = 0.5", "ξ = 1", "ξ = 2", "ξ = 4"]
    iso = panels["ξ = 1"]
    assert not iso.collections, "the ξ = 1 panel must not draw its rounding noise"
    assert any("isotropic" in t.get_text() and "no direction" in t.get_text() for t in iso.texts)
    for name in ("ξ = 0.5", "ξ = 2", "ξ = 4"):
        assert len(panels[name].collections) == 1
        assert not any("isotropic" in t.get_text() for t in panels[name].texts)
        assert panels[name].get_xlabel() == "φ (°)" and panels[name].get_ylabel() == "θ (°)"
    assert colourbar_labels(fig) == [plots.ENERGY_LABEL] * 3
    assert fig.get_layout_engine() is not None  # constrained: nothing clipped, no overlap


def test_energy_maps_are_in_degrees():
    fig = plots.energy_maps(sweep_dataset(xi=(2.0,)))
    ax = [a for a in fig.axes if a.get_title() == "ξ = 2"][0]
    assert ax.get_xlim() == pytest.approx((-11.25, 168.75))
    assert ax.get_ylim() == pytest.approx((-11.25, 168.75))


def test_energy_maps_without_energy_say_so():
    ds = sweep_dataset(stats=("std",))
    assert "energy" not in ds
    fig = plots.energy_maps(ds, title="v")
    assert "no energy in this sweep's stats: showing std" in fig._suptitle.get_text()
    drawn = [ax.get_title() for ax in fig.axes if ax.collections and ax.get_title()]
    assert drawn == ["ξ = 0.5", "ξ = 2", "ξ = 4"]  # std; ξ = 1 still flat
    fig = plots.energy_maps(xr.Dataset(coords={"theta": [0.0], "phi": [0.0], "xi": [2.0]}))
    assert any("no energy" in t for t in texts(fig))


# ----------------------------------------------------------------------------- stereonet
def test_equal_area_maps_u_and_minus_u_to_one_point():
    rng = np.random.default_rng(1)
    u = rng.standard_normal((500, 3))
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    u[:5, 2] = 0.0  # on the primitive circle
    u[:5] /= np.linalg.norm(u[:5], axis=1, keepdims=True)
    np.testing.assert_allclose(plots.equal_area(u), plots.equal_area(-u), atol=1e-12)
    xy = plots.equal_area(u)
    assert np.all(np.hypot(*xy.T) <= 1.0 + 1e-12)


def test_equal_area_known_points_and_inverse():
    np.testing.assert_allclose(plots.equal_area([0.0, 0.0, 1.0]), [0.0, 0.0])
    np.testing.assert_allclose(plots.equal_area([0.0, 0.0, -1.0]), [0.0, 0.0])
    np.testing.assert_allclose(plots.equal_area([1.0, 0.0, 0.0]), [1.0, 0.0])
    np.testing.assert_allclose(plots.equal_area([0.0, -1.0, 0.0]), [0.0, 1.0])
    # 60° from the z axis: radius sqrt(1 - cos 60°)
    u = [math.sin(math.radians(60)), 0.0, math.cos(math.radians(60))]
    assert np.hypot(*plots.equal_area(u)) == pytest.approx(math.sqrt(0.5))
    X, Y = np.meshgrid(np.linspace(-0.7, 0.7, 9), np.linspace(-0.7, 0.7, 9))
    u = plots.equal_area_inverse(X, Y)
    np.testing.assert_allclose(np.linalg.norm(u, axis=-1), 1.0)
    np.testing.assert_allclose(plots.equal_area(u), np.stack([X, Y], axis=-1), atol=1e-12)


def test_equal_area_keeps_areas():
    # Uniform axes fill the disc uniformly: the fraction within radius r is r².
    rng = np.random.default_rng(2)
    u = rng.standard_normal((200_000, 3))
    r = np.hypot(*plots.equal_area(u).T)
    for q in (0.3, 0.6, 0.9):
        assert np.mean(r <= q) == pytest.approx(q * q, abs=0.01)


def test_stereonet_panels_and_families():
    truth = np.array([0.0, -1.0, 1.0]) / math.sqrt(2)
    ds = sweep_dataset(truth=truth)
    assert int(ds["n_families"].sel(xi=4.0)) >= 1
    fig = plots.orientation_distribution(ds, title="demo")
    titles = [ax.get_title() for ax in fig.axes if ax.get_title()]
    assert titles == ["ξ = 2", "ξ = 4"]  # ξ > 1 only: never ξ = 1
    assert colourbar_labels(fig) == [plots.DENSITY_LABEL] * 2
    ax = [a for a in fig.axes if a.get_title() == "ξ = 4"][0]
    marks = [line for line in ax.lines if line.get_marker() == "o"]
    assert len(marks) == int(ds["n_families"].sel(xi=4.0))
    x, y = marks[0].get_xdata()[0], marks[0].get_ydata()[0]
    np.testing.assert_allclose([x, y], plots.equal_area(truth), atol=0.08)
    # the image is brightest near the family
    img = ax.images[0].get_array()
    n = img.shape[0]
    iy, ix = np.unravel_index(np.nanargmax(img), img.shape)
    peak = np.array([ix, iy]) / (n - 1) * 2 - 1
    assert min(np.linalg.norm(peak - plots.equal_area(truth)),
               np.linalg.norm(peak + plots.equal_area(truth))) < 0.15


def test_stereonet_without_energy_or_with_xi_1_only():
    fig = plots.orientation_distribution(sweep_dataset(stats=("std",)))
    assert any("no energy" in t for t in texts(fig))
    fig = plots.orientation_distribution(sweep_dataset(xi=(1.0,)))
    assert any("isotropic" in t for t in texts(fig))


# ----------------------------------------------------------------------------- orientation slice
def test_orientation_rgb_colours_weights_and_isotropic_voxels():
    theta, phi = [0.0, np.pi / 2], [0.0]
    grey = np.array([[0.0, 1.0, 0.0, 1.0]])
    resp = np.array([[4.0, 4.0, 0.0, 4.0]])
    it = np.array([[0, 1, 0, 0]])
    ip = np.zeros((1, 4), int)
    ix = np.array([[0, 0, 0, 1]])
    rgb = plots.orientation_rgb(grey, resp, it, ip, theta, phi, xi_index=ix, xi=[2.0, 1.0])
    np.testing.assert_allclose(rgb[0, 0], [1, 0, 0], atol=1e-12)   # along x: red
    np.testing.assert_allclose(rgb[0, 1], [0, 1, 0], atol=1e-12)   # θ = 90°: along −y, green
    np.testing.assert_allclose(rgb[0, 2], [0, 0, 0], atol=1e-12)   # no response: its grey
    np.testing.assert_allclose(rgb[0, 3], [1, 1, 1], atol=1e-12)   # won by ξ = 1: its grey


def test_grey_follows_the_volume_range_not_the_slice_noise():
    grey = np.array([[0.0, 0.1]])  # a slice of background noise only
    i = np.zeros((1, 2), int)
    stretched = plots.orientation_rgb(grey, 0 * grey, i, i, [0.0], [0.0])
    kept = plots.orientation_rgb(grey, 0 * grey, i, i, [0.0], [0.0], value_range=(0.0, 1.0))
    np.testing.assert_allclose(stretched[0, :, 0], [0.0, 1.0])
    np.testing.assert_allclose(kept[0, :, 0], [0.0, 0.1])


def test_orientation_slice_axes_and_key():
    v = np.random.default_rng(0).random((12, 8, 6)).astype(np.float32)
    idx = np.zeros(v.shape, np.uint16)
    fig = plots.orientation_slice(v, v, idx, idx, [0.0], [0.0], axis=2, title="demo",
                                  spacing=(2.0, 2.0, 5.0), unit="nm", xi_index=idx, xi=[2.0])
    images = [ax for ax in fig.axes if ax.images]
    assert len(images) == 3
    for ax in images[:2]:
        assert ax.get_xlabel() == "x (nm)" and ax.get_ylabel() == "y (nm)"
        assert ax.images[0].get_extent() == pytest.approx([-1.0, 23.0, -1.0, 15.0])
    key = images[2]
    assert key.get_title() == "colour key: axis u"
    labels = [t.get_text() for t in key.texts]
    assert labels[:2] == ["x", "y"] and "centre: z" in labels
    title = fig._suptitle.get_text()
    assert title.startswith("demo: ") and "z = 15 nm" in title


def test_direction_key_colours_follow_the_slice_frame():
    from matplotlib.figure import Figure

    ax = plots.direction_key(Figure().add_subplot(), axis=0)  # slice (y, z), centre x
    rgba = ax.images[0].get_array()
    n = rgba.shape[0]
    np.testing.assert_allclose(rgba[n // 2, n // 2, :3], [1, 0, 0], atol=1e-6)   # centre: x, red
    np.testing.assert_allclose(rgba[n // 2, -1, :3], [0, 1, 0], atol=1e-6)       # right: y, green
    np.testing.assert_allclose(rgba[-1, n // 2, :3], [0, 0, 1], atol=1e-6)       # top: z, blue
    assert rgba[0, 0, 3] == 0  # outside the disc: transparent


# ----------------------------------------------------------------------------- figure steps
@pytest.fixture
def results(tmp_path):
    """A volume, thickness and orientation store and the two NetCDFs, as the workflow writes them."""
    rng = np.random.default_rng(0)
    shape, spacing = (16, 12, 8), (0.5, 0.5, 1.0)
    vol = (rng.random(shape) > 0.7).astype(np.float32)
    kw = dict(chunks=(8, 8, 8), shards=(16, 16, 8), spacing=spacing)
    attrs = {"name": "v", "unit": "micrometer", "spacing": list(spacing)}
    create_store(tmp_path / "volume.zarr", shape, attrs=attrs, unit="micrometer", name="v", **kw)[...] = vol
    create_store(tmp_path / "thickness.zarr", shape, **kw)[...] = 1.5 * vol
    theta, phi, xi = [0.0, np.pi / 2], [0.0, np.pi / 2], [1.0, 2.0]
    arrays = {"response_max": rng.random(shape).astype(np.float32),
              "argmax_theta": rng.integers(0, 2, shape), "argmax_phi": rng.integers(0, 2, shape),
              "argmax_xi": rng.integers(0, 2, shape)}
    orientation_store.write(tmp_path / "orientation.zarr", arrays,
                            attrs={"theta": theta, "phi": phi, "xi": xi}, **kw)
    write_netcdf(sweep_dataset(), tmp_path / "sweep.nc")
    write_netcdf(distribution_from_counts(np.array([1.0, 1.5]), np.array([10, 20]), 100, bins=4,
                                          spacing=spacing), tmp_path / "thickness.nc")
    return tmp_path


def test_figure_steps_write_pngs(results):
    out = results / "plots"
    out.mkdir()
    z = lambda name: str(results / name / "zarr.json")  # noqa: E731  (the rules' store files)
    figures.plot_sweep(results / "sweep.nc", out / "energy_maps.png", name="v")
    figures.plot_orientation_distribution(results / "sweep.nc", out / "od.png", name="v")
    figures.plot_thickness(results / "thickness.nc", z("volume.zarr"), z("thickness.zarr"),
                           out / "hist.png", out / "slice.png", axis=2, name="v")
    figures.plot_orientation(z("volume.zarr"), z("orientation.zarr"), out / "orientation.png",
                             axis=1, name="v")
    for name in ("energy_maps", "od", "hist", "slice", "orientation"):
        data = (out / f"{name}.png").read_bytes()
        assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 5000, name


def test_figure_step_reads_the_unit_of_the_volume(results, monkeypatch):
    seen = {}

    def spy(*args, **kwargs):
        seen.update(kwargs)

    monkeypatch.setattr(plots, "thickness_slice", spy)
    z = lambda name: str(results / name / "zarr.json")  # noqa: E731
    figures.plot_thickness(results / "thickness.nc", z("volume.zarr"), z("thickness.zarr"),
                           results / "h.png", results / "s.png", axis=2, name="v")
    assert seen["unit"] == "micrometer" and seen["spacing"] == (0.5, 0.5, 1.0)


def test_docstring_examples():
    result = doctest.testmod(plots, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 10 and result.failed == 0


def test_panels_over_a_and_xi():
    one = sweep_dataset(xi=(1.0, 2.0))
    raw = xr.concat([one[["energy", "wavelet_energy"]]] * 2, dim=xr.DataArray([1.0, 2.0], dims="a", name="a"))
    ds = with_products(raw)
    titles = [ax.get_title() for ax in plots.energy_maps(ds).axes if ax.get_title()]
    assert titles == ["a = 1, ξ = 1", "a = 1, ξ = 2", "a = 2, ξ = 1", "a = 2, ξ = 2"]
    titles = [ax.get_title() for ax in plots.orientation_distribution(ds).axes if ax.get_title()]
    assert titles == ["a = 1, ξ = 2", "a = 2, ξ = 2"]
