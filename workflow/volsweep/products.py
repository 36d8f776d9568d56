"""Derived products of a sweep dataset: CF attributes, dominant orientations, distributions."""

from __future__ import annotations

import numpy as np
import xarray as xr

COORD_ATTRS = {
    "theta": {"units": "radian", "long_name": "polar angle of the wavelet axis u(theta, phi)"},
    "phi": {"units": "radian", "long_name": "azimuthal angle of the wavelet axis u(theta, phi)"},
    "xi": {"units": "1", "long_name": "elongation of the wavelet along its axis"},
}
VAR_ATTRS = {
    "energy": {"units": "1", "long_name": "response energy, sum of G^2 over the volume's voxels"},
    "std": {"units": "1", "long_name": "population standard deviation of the response G"},
    "max": {"units": "1", "long_name": "maximum of the response G"},
    "mean": {"units": "1", "long_name": "mean of the response G"},
    "min": {"units": "1", "long_name": "minimum of the response G"},
    "energy_weight": {"units": "1", "long_name": "energy weight 1/sqrt(xi^2 + 2 a^2)"},
    "wavelet_energy": {"units": "1", "long_name": "sum of psi^2 of the sampled kernel at theta = phi = 0"},
    "energy_normalized": {"units": "1", "long_name": "energy / wavelet_energy"},
    "dominant_theta": {"units": "radian", "long_name": "theta of the largest normalised energy"},
    "dominant_phi": {"units": "radian", "long_name": "phi of the largest normalised energy"},
    "orientation_distribution": {
        "units": "1", "long_name": "orientation distribution over (theta, phi)",
        "definition": "sum over xi of energy / wavelet_energy, normalised to sum 1"},
}


def annotate(ds: xr.Dataset) -> xr.Dataset:
    """Add CF ``units``/``long_name`` to the coordinates and known variables (existing kept)."""
    ds = ds.copy()
    for name, attrs in {**COORD_ATTRS, **VAR_ATTRS}.items():
        if name in ds.variables:
            ds[name].attrs = {**attrs, **ds[name].attrs}
    return ds


def dominant_orientation(ds: xr.Dataset) -> xr.Dataset:
    """Per ξ, the (θ, φ) that maximises ``energy / wavelet_energy``.

    Ties go to the first (θ, φ) in C order, as :func:`numpy.argmax` does.

    Examples
    --------
    >>> e = np.zeros((3, 2, 1)); e[2, 1, 0] = 1.0
    >>> ds = xr.Dataset({"energy": (("theta", "phi", "xi"), e), "wavelet_energy": (("xi",), [2.0])},
    ...                 coords={"theta": [0.0, 1.0, 2.0], "phi": [0.0, 0.5], "xi": [1.0]})
    >>> float(dominant_orientation(ds)["dominant_theta"][0])
    2.0
    """
    norm = ds["energy"] / ds["wavelet_energy"]
    flat = norm.transpose("xi", "theta", "phi").values.reshape(norm.sizes["xi"], -1)
    best = np.argmax(flat, axis=1)
    it, ip = np.unravel_index(best, (ds.sizes["theta"], ds.sizes["phi"]))
    return xr.Dataset({
        "dominant_theta": ("xi", ds["theta"].values[it]),
        "dominant_phi": ("xi", ds["phi"].values[ip]),
        "dominant_theta_index": ("xi", it.astype(np.int64)),
        "dominant_phi_index": ("xi", ip.astype(np.int64)),
    }, coords={"xi": ds["xi"]})


def orientation_distribution(ds: xr.Dataset) -> xr.DataArray:
    """Σ_ξ energy/wavelet_energy over (θ, φ), normalised to sum 1."""
    total = (ds["energy"] / ds["wavelet_energy"]).sum("xi")
    return total / total.sum()


def with_products(ds: xr.Dataset) -> xr.Dataset:
    """The sweep dataset with its derived products and CF attributes."""
    ds = ds.copy()
    if "energy" in ds:
        ds["energy_normalized"] = ds["energy"] / ds["wavelet_energy"]
        ds = ds.merge(dominant_orientation(ds))
        ds["orientation_distribution"] = orientation_distribution(ds)
    return annotate(ds)
