"""Derived products of a sweep dataset: CF attributes, dominant orientations, distributions."""

from __future__ import annotations

import numpy as np
import xarray as xr

COORD_ATTRS = {
    "theta": {"units": "radian", "long_name": "polar angle of the wavelet axis u(theta, phi)"},
    "phi": {"units": "radian", "long_name": "azimuthal angle of the wavelet axis u(theta, phi)"},
    "xi": {"units": "1", "long_name": "elongation of the wavelet along its axis"},
    "a": {"units": "1", "long_name": "scale of the wavelet"},
    "family": {"units": "1", "long_name": "fibre family rank (by weight, largest first)"},
    "eigen": {"units": "1", "long_name": "fabric tensor eigenvalue rank (largest first)"},
}
_INDEX = {"units": "1", "comment": "0-based index into the coordinate named by 'coordinate'"}
VAR_ATTRS = {
    "energy": {"units": "1", "long_name": "response energy, sum of G^2 over the volume's voxels"},
    "std": {"units": "1", "long_name": "population standard deviation of the response G"},
    "max": {"units": "1", "long_name": "maximum of the response G"},
    "mean": {"units": "1", "long_name": "mean of the response G"},
    "min": {"units": "1", "long_name": "minimum of the response G"},
    "energy_weight": {"units": "1", "long_name": "energy weight 1/sqrt(xi^2 + 2 a^2)"},
    "wavelet_energy": {"units": "1", "long_name": "sum of psi^2 of the sampled kernel at theta = phi = 0"},
    "energy_normalized": {"units": "1", "long_name": "response energy over wavelet energy, energy / wavelet_energy"},
    "dominant_theta": {"units": "radian", "long_name": "theta of the largest normalised energy",
                       "comment": "NaN at xi = 1: the isotropic wavelet has no direction"},
    "dominant_phi": {"units": "radian", "long_name": "phi of the largest normalised energy",
                     "comment": "NaN at xi = 1: the isotropic wavelet has no direction"},
    "dominant_theta_index": {**_INDEX, "long_name": "theta index of the largest normalised energy",
                             "coordinate": "theta", "comment": "-1 at xi = 1 (isotropic)"},
    "dominant_phi_index": {**_INDEX, "long_name": "phi index of the largest normalised energy",
                           "coordinate": "phi", "comment": "-1 at xi = 1 (isotropic)"},
    "orientation_distribution": {
        "units": "1", "long_name": "orientation distribution over (theta, phi)",
        "definition": "sum over xi != 1 of energy / wavelet_energy, normalised to sum 1"},
    "orientation_density": {
        "units": "sr-1", "long_name": "anisotropic orientation density on the sphere of axes, per xi",
        "definition": "energy / wavelet_energy minus its minimum over directions, normalised to "
                      "integrate to 1 over the sphere of axes (docs/definitions.md, Orientation)"},
    "family_theta": {"units": "radian", "long_name": "theta of a fibre family (local maximum of the orientation density, refined)"},
    "family_phi": {"units": "radian", "long_name": "phi of a fibre family (local maximum of the orientation density, refined)"},
    "family_weight": {"units": "1", "long_name": "fraction of the orientation density in the family's basin"},
    "family_spread": {"units": "radian", "long_name": "root-mean-square angle of the family's basin to its axis"},
    "n_families": {"units": "1", "long_name": "number of fibre families found"},
    "fabric_tensor": {"units": "1", "long_name": "fabric tensor: second moment of the orientation density, trace 1"},
    "fabric_eigenvalues": {"units": "1", "long_name": "eigenvalues of the fabric tensor, largest first"},
    "fabric_eigenvectors": {"units": "1", "long_name": "unit eigenvectors (x, y, z) of the fabric tensor"},
    "degree_of_anisotropy": {"units": "1", "long_name": "degree of anisotropy 1 - smallest / largest fabric eigenvalue (BoneJ)"},
    "response_max": {"units": "1", "long_name": "largest response G over every kernel at the voxel"},
    "local_energy_max": {"units": "1", "long_name": "largest local energy of the normalised responses at the voxel",
                         "definition": "max over kernels with xi != 1 of gaussian(integration_scale) * G^2 / "
                                       "wavelet_energy (docs/definitions.md, Orientation)"},
    "argmax_theta": {**_INDEX, "long_name": "theta index of the voxel's orientation", "coordinate": "theta"},
    "argmax_phi": {**_INDEX, "long_name": "phi index of the voxel's orientation", "coordinate": "phi"},
    "argmax_xi": {**_INDEX, "long_name": "xi index of the voxel's best elongation", "coordinate": "xi"},
    "argmax_a": {**_INDEX, "long_name": "a index of the voxel's best scale", "coordinate": "a"},
}


def annotate(ds: xr.Dataset) -> xr.Dataset:
    """Add CF ``units``/``long_name`` to the coordinates and known variables (existing kept).

    With a ``unit`` attr on the Dataset (the physical unit of the spacing), ``a`` is in it.
    """
    ds = ds.copy()
    for name, attrs in {**COORD_ATTRS, **VAR_ATTRS}.items():
        if name in ds.variables:
            ds[name].attrs = {**attrs, **ds[name].attrs}
    if "a" in ds.coords and ds.attrs.get("unit"):
        ds["a"].attrs["units"] = ds.attrs["unit"]
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
