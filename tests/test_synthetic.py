"""The demo volume: deterministic, with fibres and pores where the config says."""

import numpy as np
import pytest

from volsweep.synthetic import fibre_direction, synthetic_volume


def test_direction_convention():
    np.testing.assert_allclose(fibre_direction(0, 0), [1, 0, 0], atol=1e-15)
    np.testing.assert_allclose(fibre_direction(np.pi / 2, 0), [0, -1, 0], atol=1e-15)
    np.testing.assert_allclose(fibre_direction(0, np.pi / 2), [0, 0, 1], atol=1e-15)


def test_fibre_is_a_cylinder_along_its_axis():
    shape, r = (31, 24, 17), 2.5
    v = synthetic_volume(shape, fibres=[{"theta": np.pi / 2, "phi": 0.0, "radius": r}], noise=0, seed=4)
    phase = v > 0.5
    # Along y: every y-slice holds the same disc, of area close to pi r^2.
    assert all(np.array_equal(phase[:, 0, :], phase[:, j, :]) for j in range(shape[1]))
    assert abs(phase[:, 0, :].sum() - np.pi * r * r) < 2 * np.pi * r


def test_pores_are_balls_of_the_given_radius_and_deterministic():
    from scipy import ndimage

    kw = dict(pores=[{"radius": 3.0, "count": 3}], noise=0.1, seed=11)
    a, b = synthetic_volume((40, 33, 29), **kw), synthetic_volume((40, 33, 29), **kw)
    np.testing.assert_array_equal(a, b)
    labels, n = ndimage.label(a > 0.5)
    assert n == 3
    sizes = np.bincount(labels.ravel())[1:]
    assert np.all(np.abs(sizes - 4 / 3 * np.pi * 27) < 0.15 * 4 / 3 * np.pi * 27)


def test_no_room_is_an_error():
    with pytest.raises(ValueError, match="no room for a pore of radius=9"):
        synthetic_volume((10, 10, 10), pores=[{"radius": 9}])


def _brute_force_fibre(shape, spacing, c, u, r):
    x, y, z = (np.arange(n, dtype=np.float64).reshape([-1 if k == a else 1 for k in range(3)]) * s
               for a, (n, s) in enumerate(zip(shape, spacing)))
    dx, dy, dz = x - c[0], y - c[1], z - c[2]
    along = dx * u[0] + dy * u[1] + dz * u[2]
    return dx * dx + dy * dy + dz * dz - along * along < r * r


@pytest.mark.parametrize("trial", range(12))
def test_windowed_fibres_equal_the_whole_volume_formula(trial):
    from volsweep.synthetic import _draw_fibre

    rng = np.random.default_rng(trial)
    shape = tuple(int(n) for n in rng.integers(7, 29, 3))
    spacing = rng.uniform(0.4, 2.5, 3)
    u = fibre_direction(rng.uniform(0, np.pi), rng.uniform(0, np.pi))
    c = np.array(shape) * spacing * rng.uniform(0.2, 0.8, 3)
    r = float(rng.uniform(0.7, 4.0))
    phase = np.zeros(shape, dtype=bool)
    _draw_fibre(phase, spacing, c, u, r)
    expected = _brute_force_fibre(shape, spacing, c, u, r)
    assert expected.any()
    np.testing.assert_array_equal(phase, expected)


def test_noise_does_not_depend_on_the_threads_that_draw_it(monkeypatch):
    from volsweep import synthetic

    kw = dict(fibres=[{"theta": 0.3, "phi": 0.4, "radius": 1.5, "count": 2}],
              pores=[{"radius": 1.5, "count": 2}], noise=0.2, seed=5)
    shape = (23, 17, 11)
    monkeypatch.setattr(synthetic, "NOISE_SLAB_VOXELS", 3 * 17 * 11)  # 8 slabs, the last short
    assert len(synthetic._noise_slabs(shape)) == 8
    runs = []
    for threads in (1, 3):
        monkeypatch.setattr(synthetic, "cpu_threads", lambda n=threads: n)
        runs.append(synthetic_volume(shape, **kw))
    np.testing.assert_array_equal(runs[0], runs[1])
    # Each slab its own stream: no two slabs repeat each other's draws.
    background = runs[0][runs[0] < 0.5]
    assert len(np.unique(background)) == background.size
    assert abs(background.std() - 0.2) < 0.02 and abs(background.mean()) < 0.02


def test_threaded_shapes_equal_the_shapes_drawn_one_by_one():
    from volsweep.synthetic import _draw_ball, _draw_fibre

    shape, spacing = (29, 22, 15), (1.0, 0.7, 1.6)
    fibres = [{"theta": 0.2, "phi": 1.1, "radius": 1.8, "count": 4},
              {"theta": 1.3, "phi": 0.1, "radius": 1.2, "count": 3}]
    pores = [{"radius": 2.5, "count": 2}]
    phase = synthetic_volume(shape, fibres=fibres, pores=pores, noise=0, seed=9, spacing=spacing) > 0.5
    # The same draws of the seeded stream, in the generator's order, painted serially.
    rng, sp = np.random.default_rng(9), np.asarray(spacing)
    extent, serial, axes = np.array(shape) * sp, np.zeros(shape, dtype=bool), []
    for spec in fibres:
        u = fibre_direction(spec["theta"], spec["phi"])
        for _ in range(spec["count"]):
            c = extent * (0.25 + 0.5 * rng.random(3))
            _draw_fibre(serial, sp, c, u, spec["radius"])
            axes.append((c, u, spec["radius"]))
    spheres = []
    for _ in range(2):
        while True:
            c = 3.5 + rng.random(3) * np.maximum(extent - 7.0, 0)
            if (all(np.linalg.norm(np.cross(c - p, u)) > 3.5 + fr for p, u, fr in axes)
                    and all(np.linalg.norm(c - q) > 6.0 for q in spheres)):
                break
        spheres.append(c)
        _draw_ball(serial, sp, c, 2.5)
    assert serial.sum() > 100
    np.testing.assert_array_equal(phase, serial)
