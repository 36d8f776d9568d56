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
    "dominant_theta_refined": {"units": "radian", "long_name": "theta of the sub-grid axis of the largest normalised energy",
                               "comment": "quadratic fit on the sphere around the grid maximum; NaN at xi = 1"},
    "dominant_phi_refined": {"units": "radian", "long_name": "phi of the sub-grid axis of the largest normalised energy",
                             "comment": "quadratic fit on the sphere around the grid maximum; NaN at xi = 1"},
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
    "orientation_votes": {"units": "1", "long_name": "sum of local_energy_max over the voxels whose orientation is this grid point",
                          "comment": "of one sweep's grid; for a grid swept in blocks, recompute from the merged "
                                     "orientation map (volsweep.engine.orientation.votes_from_map)"},
    "vote_density": {"units": "sr-1", "long_name": "per-voxel orientation density on the sphere of axes (votes over all xi and a)"},
    "vote_family_theta": {"units": "radian", "long_name": "theta of a fibre family of the per-voxel orientations"},
    "vote_family_phi": {"units": "radian", "long_name": "phi of a fibre family of the per-voxel orientations"},
    "vote_family_weight": {"units": "1", "long_name": "fraction of the votes in the family's basin"},
    "vote_family_spread": {"units": "radian", "long_name": "root-mean-square angle of the family's votes to its axis"},
    "vote_n_families": {"units": "1", "long_name": "number of fibre families of the per-voxel orientations"},
    "vote_fabric_tensor": {"units": "1", "long_name": "fabric tensor of the per-voxel orientations, trace 1"},
    "vote_fabric_eigenvalues": {"units": "1", "long_name": "eigenvalues of the per-voxel fabric tensor, largest first"},
    "vote_fabric_eigenvectors": {"units": "1", "long_name": "unit eigenvectors (x, y, z) of the per-voxel fabric tensor"},
    "vote_degree_of_anisotropy": {"units": "1", "long_name": "degree of anisotropy of the per-voxel orientations, 1 - smallest / largest eigenvalue"},
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


def _maps(ds: xr.Dataset, var="energy"):
    """``var / wavelet_energy`` as ``(..., theta, phi)`` NumPy values and the leading dims."""
    norm = ds[var] / ds["wavelet_energy"]
    lead = [d for d in norm.dims if d not in ("theta", "phi")]
    norm = norm.transpose(*lead, "theta", "phi")
    return norm.values, lead


def dominant_orientation(ds: xr.Dataset) -> xr.Dataset:
    """Per ξ (and a), the (θ, φ) that maximises ``energy / wavelet_energy``, and its refinement.

    Ties go to the first (θ, φ) in C order, as :func:`numpy.argmax` does.
    ``dominant_theta_refined``/``dominant_phi_refined`` are the sub-grid axis of that maximum
    (:func:`volsweep.engine.orientation.refine_peak`).  At ξ = 1 the wavelet is isotropic: the
    directions are NaN and the indices −1.

    Examples
    --------
    >>> e = np.zeros((3, 2, 2)); e[2, 1, 0] = 1.0
    >>> ds = xr.Dataset({"energy": (("theta", "phi", "xi"), e), "wavelet_energy": (("xi",), [2.0, 2.0])},
    ...                 coords={"theta": [0.0, 1.0, 2.0], "phi": [0.0, 0.5], "xi": [2.0, 1.0]})
    >>> dominant_orientation(ds)["dominant_theta"].values
    array([ 2., nan])
    """
    vals, lead = _maps(ds)
    shape = vals.shape[:-2]
    flat = vals.reshape(shape + (-1,))
    best = np.argmax(flat, axis=-1)
    it, ip = np.unravel_index(best, (ds.sizes["theta"], ds.sizes["phi"]))
    iso = (ds["xi"] == 1.0).broadcast_like(xr.DataArray(np.zeros(shape), dims=lead)).transpose(*lead).values
    th = np.where(iso, np.nan, ds["theta"].values[it])
    ph = np.where(iso, np.nan, ds["phi"].values[ip])
    it, ip = np.where(iso, -1, it), np.where(iso, -1, ip)
    from . import orientation as _or

    sphere = _or.SphereGrid(ds["theta"].values, ds["phi"].values)
    rth, rph = np.full(shape, np.nan), np.full(shape, np.nan)
    for idx in np.ndindex(*shape):
        if not iso[idx]:
            rth[idx], rph[idx] = _or.angles_of_axis(_or.refine_peak(vals[idx], sphere))
    return annotate(xr.Dataset({
        "dominant_theta": (lead, th),
        "dominant_phi": (lead, ph),
        "dominant_theta_index": (lead, it.astype(np.int64)),
        "dominant_phi_index": (lead, ip.astype(np.int64)),
        "dominant_theta_refined": (lead, rth),
        "dominant_phi_refined": (lead, rph),
    }, coords={d: ds[d] for d in lead}))


def orientation_distribution(ds: xr.Dataset) -> xr.DataArray:
    """Σ over ξ ≠ 1 (and a) of energy/wavelet_energy over (θ, φ), normalised to sum 1.

    ξ = 1 adds the same value to every direction and is left out; with only ξ = 1 the
    distribution is uniform.
    """
    norm = ds["energy"] / ds["wavelet_energy"]
    aniso = norm.where(norm["xi"] != 1.0, 0.0)
    total = aniso.sum([d for d in norm.dims if d not in ("theta", "phi")])
    if not float(total.sum()) > 0:
        total = xr.ones_like(total)
    return total / total.sum()


def _families_of(maps, lead, xi_of, theta, phi, kw, F, baseline=True):
    from . import orientation as _or

    sphere = _or.SphereGrid(theta, phi)
    shape = maps.shape[:-2]
    dens = np.full(maps.shape, np.nan)
    fam = {k: np.full(shape + (F,), np.nan) for k in ("theta", "phi", "weight", "spread")}
    nfam = np.zeros(shape, np.int64)
    tens = np.full(shape + (3, 3), np.nan)
    eig = np.full(shape + (3,), np.nan)
    vec = np.full(shape + (3, 3), np.nan)
    da = np.full(shape, np.nan)
    for idx in np.ndindex(*shape):
        if xi_of is not None and xi_of[idx] == 1.0:
            continue
        m = maps[idx]
        dens[idx] = _or.density(m, sphere, baseline=baseline)
        axes, w, sp = _or.families(m, sphere, baseline=baseline, **kw)
        nfam[idx] = len(w)
        for k, (ax, wk, sk) in enumerate(zip(axes, w, sp)):
            fam["theta"][idx + (k,)], fam["phi"][idx + (k,)] = _or.angles_of_axis(ax)
            fam["weight"][idx + (k,)], fam["spread"][idx + (k,)] = wk, sk
        tens[idx], eig[idx], vec[idx], da[idx] = _or.fabric(m, sphere, baseline=baseline)
    lead = tuple(lead)
    return {
        "density": (lead + ("theta", "phi"), dens),
        **{f"family_{k}": (lead + ("family",), v) for k, v in fam.items()},
        "n_families": (lead, nfam),
        "fabric_tensor": (lead + ("i", "j"), tens),
        "fabric_eigenvalues": (lead + ("eigen",), eig),
        "fabric_eigenvectors": (lead + ("eigen", "i"), vec),
        "degree_of_anisotropy": (lead, da),
    }


def _family_kw(min_weight, max_families):
    from . import orientation as _or

    kw = {"max_families": int(_or.MAX_FAMILIES if max_families is None else max_families)}
    if min_weight is not None:
        kw["min_weight"] = float(min_weight)
    return kw


def orientation_families(ds: xr.Dataset, *, min_weight=None, max_families=None) -> xr.Dataset:
    """Fibre families and fabric tensor per ξ (and a), from ``energy / wavelet_energy``.

    Variables (``docs/definitions.md``, "Orientation"; NaN at ξ = 1, which is isotropic):

    * ``orientation_density`` ([a,] theta, phi, xi), sr⁻¹: the energy above its minimum
      over directions, normalised to integrate to 1 over the sphere of axes;
    * ``family_theta``, ``family_phi`` ([a,] xi, family), radians: the refined axis of each
      local maximum of the density (heaviest first; NaN where fewer families); ``family_weight``
      (its basin's share of the density), ``family_spread`` (RMS angle of its basin, radians);
      ``n_families`` ([a,] xi);
    * ``fabric_tensor`` ([a,] xi, i, j), ``fabric_eigenvalues`` ([a,] xi, eigen) largest
      first, ``fabric_eigenvectors`` ([a,] xi, eigen, i) and ``degree_of_anisotropy``
      ([a,] xi) = 1 − λ_min/λ_max, as BoneJ reports it.

    The volume's energy per direction is broad at ξ ≤ 3 (an elongated wavelet still
    matches the part of a tilted fibre's spectrum perpendicular to both axes), so two
    families close together may show as one maximum here; :func:`vote_families` separates
    them from the per-voxel orientations.

    Examples
    --------
    >>> th = np.arange(8) * np.pi / 8
    >>> e = 1.0 + np.exp(-((th[:, None] - th[3]) ** 2 + (th[None, :] - th[5]) ** 2) / 0.1)[..., None]
    >>> ds = xr.Dataset({"energy": (("theta", "phi", "xi"), e), "wavelet_energy": (("xi",), [1.0])},
    ...                 coords={"theta": th, "phi": th, "xi": [3.0]})
    >>> int(orientation_families(ds)["n_families"][0])
    1
    """
    kw = _family_kw(min_weight, max_families)
    vals, lead = _maps(ds)
    shape = vals.shape[:-2]
    xi_of = ds["xi"].broadcast_like(xr.DataArray(np.zeros(shape), dims=lead)).transpose(*lead).values
    v = _families_of(vals, lead, xi_of, ds["theta"].values, ds["phi"].values, kw, kw["max_families"])
    v["orientation_density"] = v.pop("density")
    coords = {d: ds[d] for d in lead}
    coords.update(theta=ds["theta"], phi=ds["phi"])
    out = xr.Dataset(v, coords=coords)
    out["orientation_density"] = out["orientation_density"].transpose(*ds["energy"].dims)
    return annotate(out)


def vote_families(ds: xr.Dataset, *, min_weight=None, max_families=None) -> xr.Dataset:
    """Fibre families and fabric tensor of the per-voxel orientations (``orientation_votes``).

    The votes are summed over ξ and a (each voxel voted once, for its best kernel) and
    taken as they are (no baseline removed): ``vote_density`` (theta, phi), ``vote_family_*``
    (family), ``vote_n_families``, ``vote_fabric_*`` and ``vote_degree_of_anisotropy``,
    defined as in :func:`orientation_families`.

    Examples
    --------
    >>> th = np.arange(12) * np.pi / 12
    >>> v = np.zeros((12, 12, 1)); v[1, 2, 0] = 5.0; v[8, 8, 0] = 3.0
    >>> ds = xr.Dataset({"orientation_votes": (("theta", "phi", "xi"), v)},
    ...                 coords={"theta": th, "phi": th, "xi": [3.0]})
    >>> vote_families(ds)["vote_family_weight"].values[:2]
    array([0.625, 0.375])
    """
    kw = _family_kw(min_weight, max_families)
    votes = ds["orientation_votes"].sum([d for d in ds["orientation_votes"].dims if d not in ("theta", "phi")])
    m = votes.transpose("theta", "phi").values[None]
    v = _families_of(m, ["_"], None, ds["theta"].values, ds["phi"].values, kw, kw["max_families"],
                     baseline=False)
    out = {}
    for name, (dims, arr) in v.items():
        out[f"vote_{name}"] = (dims[1:], arr[0])
    return annotate(xr.Dataset(out, coords={"theta": ds["theta"], "phi": ds["phi"]}))


def with_products(ds: xr.Dataset) -> xr.Dataset:
    """The sweep dataset with its derived products and CF attributes.

    ``energy_normalized``, the dominant orientation (:func:`dominant_orientation`), the
    ``orientation_distribution`` over (θ, φ) and the families and fabric tensor per ξ
    (:func:`orientation_families`), and with ``orientation_votes`` those of the per-voxel
    orientations (:func:`vote_families`).
    """
    ds = ds.copy()
    if "energy" in ds:
        ds["energy_normalized"] = ds["energy"] / ds["wavelet_energy"]
        ds = ds.merge(dominant_orientation(ds))
        ds["orientation_distribution"] = orientation_distribution(ds)
        ds = ds.merge(orientation_families(ds))
    if "orientation_votes" in ds:
        ds = ds.merge(vote_families(ds))
    if "energy" in ds:
        ds.attrs["isotropic_xi"] = ("xi = 1 is isotropic: every orientation is the same kernel, so its "
                                    "dominant direction, families and fabric are NaN")
    return annotate(ds)
