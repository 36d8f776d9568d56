"""The sampled kernel's spectrum, halos and wavelet energy."""

import math

import numpy as np
import pytest

from sweep_oracle import fold_kernel
from volsweep.engine import wavelet as wv


@pytest.mark.parametrize("a, xi, spacing, shape", [
    (1.0, 1.0, (1, 1, 1), (24, 20, 18)),       # a = s: aliased
    (1.0, 0.5, (1, 0.7, 1.3), (25, 21, 17)),   # odd, anisotropic, ξ < 1
    (1.5, 4.0, (1, 0.7, 1.3), (30, 31, 17)),   # kernel longer than the grid: folded
    (3.0, 0.5, (1, 1, 1), (12, 13, 14)),
])
def test_sampled_spectrum_is_dft_of_folded_kernel(a, xi, spacing, shape):
    th, ph = 0.4, 1.1
    hw = wv.reference_halfwidth(a, xi, spacing)
    ref = np.fft.rfftn(fold_kernel(wv.sample_kernel(a, th, ph, xi, spacing, hw), shape))
    s = wv.sampled_spectrum(shape, a, th, ph, xi, spacing)
    assert np.abs(ref.imag).max() < 1e-12 * np.abs(ref).max()  # ψ is even
    assert np.abs(s - ref.real).max() < 1e-6 * np.abs(ref).max()


def test_closed_form_spectrum_alone_is_wrong_at_a_equal_s():
    # At a = 1 voxel the continuous Ψ misses the aliased images: the error is not small.
    shape, a, xi = (24, 24, 24), 1.0, 1.0
    u = wv.axis_vector(0.2, 0.3)
    w = np.stack(np.meshgrid(*[2 * np.pi * np.fft.fftfreq(n) for n in shape[:2]],
                             2 * np.pi * np.arange(shape[2] // 2 + 1) / shape[2], indexing="ij"), -1)
    closed = wv.continuous_spectrum(w, a, u, xi)
    sampled = wv.sampled_spectrum(shape, a, 0.2, 0.3, xi)
    assert np.abs(closed - sampled).max() > 1e-2 * np.abs(sampled).max()
    # ... and at a = 4 voxels it is right (aliasing negligible).
    closed4 = wv.continuous_spectrum(w, 4.0, u, xi)
    sampled4 = wv.sampled_spectrum(shape, 4.0, 0.2, 0.3, xi)
    assert np.abs(closed4 - sampled4).max() < 1e-6 * np.abs(sampled4).max()


def test_halo_bounds_the_kernel():
    a, xi, sp, T = 1.3, 2.5, (1.0, 0.6, 1.7), 5.0
    th, ph = [0.1, 0.9], [0.3]
    h = wv.halo_for(a, [xi], th, ph, sp, T)
    for t in th:
        u = wv.axis_vector(t, ph[0])
        big = wv.reference_halfwidth(a, xi, sp)
        x, y, z = (np.arange(-b, b + 1) * s for b, s in zip(big, sp))
        X, Y, Z = np.meshgrid(x, y, z, indexing="ij")
        tt = u[0] * X + u[1] * Y + u[2] * Z
        q = (X**2 + Y**2 + Z**2 - tt**2) / a**2 + tt**2 / (a * xi) ** 2
        outside = (np.abs(X) > h[0] * sp[0]) | (np.abs(Y) > h[1] * sp[1]) | (np.abs(Z) > h[2] * sp[2])
        assert q[outside].min() >= T * T * (1 - 1e-9)
    # derived from the parameters: grows with a and ξ, shrinks with spacing
    assert wv.halo_for(2 * a, [xi], th, ph, sp, T)[0] > h[0]
    assert wv.halo_for(a, [xi], th, ph, (2, 2, 2), T)[0] < wv.halo_for(a, [xi], th, ph, (1, 1, 1), T)[0]


def test_wavelet_energy_and_weight():
    a, sp = 1.5, (1.0, 0.8, 1.2)
    e = wv.wavelet_energy(a, [0.5, 2.0], sp)
    for x, val in zip([0.5, 2.0], e):
        k = wv.sample_kernel(a, 0.0, 0.0, x, sp)  # full reference box
        assert val == pytest.approx(float(np.sum(k * k)), rel=1e-12)
    np.testing.assert_allclose(wv.energy_weight(a, [1.0, 3.0]), 1 / np.sqrt(np.array([1.0, 9.0]) + 2 * a * a))


def test_kernel_definition():
    # ψ at the centre is 3; along u at distance a·ξ·sqrt(3) it crosses zero.
    a, xi = 1.2, 2.0
    assert wv.sample_kernel(a, 0.3, 0.2, xi, halfwidth=(1, 1, 1))[1, 1, 1] == 3.0
    u = wv.axis_vector(0.0, 0.0)
    assert np.allclose(u, [1, 0, 0])
    r = a * xi * math.sqrt(3)
    assert wv.sample_kernel(a, 0.0, 0.0, xi, spacing=(r, 1, 1), halfwidth=(1, 0, 0))[2, 0, 0] == pytest.approx(0, abs=1e-12)


def test_bad_parameters():
    with pytest.raises(ValueError, match="spacing"):
        wv.check_spacing((1, 0, 1))
    with pytest.raises(TypeError, match="spacing"):
        wv.check_spacing(1.0)
    with pytest.raises(TypeError, match="spacing='abc'"):
        wv.check_spacing("abc")
    with pytest.raises(ValueError, match="xi"):
        wv.check_positive("xi", [1.0, 0.0])
