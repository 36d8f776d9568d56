"""Small deterministic test volumes."""

import numpy as np
from scipy import ndimage


def blobs(shape=(17, 21, 13), seed=5, sigma=1.6, porosity=0.45):
    """Smoothed-noise blobs: a float volume whose `> 0.5` phase is porous and irregular."""
    rng = np.random.default_rng(seed)
    field = ndimage.gaussian_filter(rng.normal(size=shape), sigma)
    cut = np.quantile(field, porosity)
    return (field > cut).astype(np.float32)


def solid_with_pores(shape, count, seed):
    """A solid with a few isolated pore voxels: large balls everywhere, most hidden."""
    x = np.ones(shape, bool)
    rng = np.random.default_rng(seed)
    x[tuple(rng.integers(0, n, count) for n in shape)] = False
    return x
