"""Report figures (matplotlib, PNG): energy maps, stereonets, thickness, overlaid slices.

Every function builds a :class:`matplotlib.figure.Figure` (constrained layout, no pyplot
state), writes it to ``path`` when one is given and returns it, so its labels can be
inspected.  Images are drawn in physical units: voxel ``i`` of an axis with spacing ``s``
is centred at ``i·s``; axis labels name the axis and the unit (the volume's ``unit``
attribute, else "voxel units" for a unit spacing, else "spacing units").

Directions are axes: u and −u are one orientation.  Stereonets are equal-area (Lambert)
projections of the lower hemisphere (z ≤ 0) seen from +z, x to the right and y up, so
the primitive circle holds the axes in the x–y plane and the centre the z axis.
"""

from __future__ import annotations

import math

import matplotlib

matplotlib.use("Agg")

import numpy as np  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from volsweep.engine.wavelet import axis_vector  # noqa: E402

DPI = 110
AXES = ("x", "y", "z")
#: Unit names as written in metadata, and the symbol on an axis label.
UNIT_SYMBOLS = {
    "micrometer": "µm", "micrometre": "µm", "micron": "µm", "um": "µm", "µm": "µm", "μm": "µm",
    "nanometer": "nm", "nanometre": "nm", "nm": "nm", "millimeter": "mm", "millimetre": "mm",
    "mm": "mm", "centimeter": "cm", "centimetre": "cm", "cm": "cm", "meter": "m", "metre": "m",
    "m": "m", "angstrom": "Å", "ångström": "Å", "a": "Å", "å": "Å", "picometer": "pm", "pm": "pm",
}
ENERGY_LABEL = "energy / wavelet energy"
DENSITY_LABEL = "orientation density (sr⁻¹)"
ISOTROPIC_TEXT = "ξ = 1: isotropic,\nno direction"
#: Display smoothing of a stereonet: Gaussian σ, in cell widths of the (θ, φ) grid.
STEREONET_SIGMA_WIDTHS = 0.5
#: Pixels across a stereonet or a colour key.
DISC_PIXELS = 241
#: A panel whose values vary by less than this (relative) is flat: rounding, not structure.
FLAT_RTOL = 1e-9


def _figure(width, height):
    return Figure(figsize=(width, height), dpi=DPI, layout="constrained")


def _save(fig, path):
    if path is not None:
        # No timestamps in the PNG, so a rerun writes identical bytes.
        fig.savefig(path, dpi=DPI, metadata={"Software": None})
    return fig


def _title(fig, title, what):
    fig.suptitle(f"{title}: {what}" if title else what, fontsize="large")


# ----------------------------------------------------------------------------- units and geometry
def unit_label(unit=None, spacing=None) -> str:
    """The unit shown on an axis: the unit's symbol, else "voxel units" or "spacing units".

    Examples
    --------
    >>> unit_label("micrometer"), unit_label(None, (1, 1, 1)), unit_label(None, (0.5, 0.5, 2))
    ('µm', 'voxel units', 'spacing units')
    """
    if unit:
        return UNIT_SYMBOLS.get(str(unit).strip().lower(), str(unit))
    if spacing is None or all(float(s) == 1.0 for s in spacing):
        return "voxel units"
    return "spacing units"


def axis_label(name, unit=None, spacing=None) -> str:
    """``"x (µm)"``: an axis name and its unit.

    Examples
    --------
    >>> axis_label("x", "um")
    'x (µm)'
    """
    return f"{name} ({unit_label(unit, spacing)})"


def geometry(volume, spacing=None, unit=None):
    """``(spacing, unit)`` of a volume array: given values, else its ``spacing``/``unit`` attrs.

    Examples
    --------
    >>> geometry(np.zeros((2, 2, 2)), None, None)
    ((1.0, 1.0, 1.0), None)
    """
    attrs = dict(getattr(volume, "attrs", None) or {})
    if spacing is None:
        spacing = attrs.get("spacing", (1.0, 1.0, 1.0))
    if unit is None:
        unit = attrs.get("unit")
    return tuple(float(s) for s in spacing), unit


def slice_extent(shape, spacing):
    """``imshow`` extent (left, right, bottom, top) of a 2D slice shown with its first axis
    horizontal: voxel ``i`` centred at ``i·s``.

    Examples
    --------
    >>> slice_extent((4, 2), (0.5, 2.0))
    (-0.25, 1.75, -1.0, 3.0)
    """
    (nh, nv), (sh, sv) = shape, spacing
    return (-0.5 * sh, (nh - 0.5) * sh, -0.5 * sv, (nv - 0.5) * sv)


def mid_slice(volume, axis=2):
    """The middle slice normal to ``axis`` (float32) and its index tuple; only it is read.

    Examples
    --------
    >>> s, index = mid_slice(np.arange(24).reshape(2, 3, 4), axis=2)
    >>> s.shape, index
    ((2, 3), (slice(None, None, None), slice(None, None, None), 2))
    """
    index = [slice(None)] * 3
    index[axis] = volume.shape[axis] // 2
    return np.asarray(volume[tuple(index)], dtype=np.float32), tuple(index)


def _slice_axes(ax, axis, shape2, spacing, unit):
    """Label ``ax`` for a mid-slice normal to ``axis``; its extent."""
    h, v = (a for a in range(3) if a != axis)
    ax.set_xlabel(axis_label(AXES[h], unit, spacing))
    ax.set_ylabel(axis_label(AXES[v], unit, spacing))
    return slice_extent(shape2, (spacing[h], spacing[v]))


def _grey(values, value_range=None):
    """Values scaled to [0, 1] between the volume's ``value_range``, else the slice's extremes.

    Not percentiles: a sparse phase would fall above the 99th and the background noise
    would be stretched over the whole grey range.
    """
    v = np.asarray(values, np.float64)
    finite = v[np.isfinite(v)]
    if finite.size == 0:
        return np.zeros(v.shape)
    if value_range is not None and float(value_range[1]) > float(value_range[0]):
        lo, hi = float(value_range[0]), float(value_range[1])
    else:
        lo, hi = float(finite.min()), float(finite.max())
    if not hi > lo:
        return np.full(v.shape, 0.5)
    return np.clip((np.nan_to_num(v, nan=lo) - lo) / (hi - lo), 0.0, 1.0)


def _value_range(volume):
    """The whole volume's (min, max) when its store records it (``value_range`` attr)."""
    r = dict(getattr(volume, "attrs", None) or {}).get("value_range")
    return None if r is None or len(r) != 2 else (float(r[0]), float(r[1]))


def _slice_name(axis, volume, spacing, unit):
    k = volume.shape[axis] // 2
    return f"mid-slice {AXES[axis]} = {k * spacing[axis]:g} {unit_label(unit, spacing)}"


# ----------------------------------------------------------------------------- projections
def equal_area(u):
    """Lower-hemisphere equal-area projection of axes ``u`` (..., 3) onto the unit disc.

    ``u`` and ``−u`` are one axis and map to one point: each axis is taken with z ≤ 0
    (in the x–y plane, with x > 0, or y > 0 where x = 0), then
    ``(X, Y) = (x, y) / sqrt(1 − z)``: the z axis at the centre, the x–y plane on the
    unit circle, x to the right, y up.  Lambert's projection keeps areas.

    Examples
    --------
    >>> u = np.array([0.3, -0.4, 0.866])
    >>> np.allclose(equal_area(u), equal_area(-u))
    True
    >>> equal_area(np.array([0.0, 0.0, 1.0])), equal_area(np.array([-1.0, 0.0, 0.0]))
    (array([0., 0.]), array([1., 0.]))
    """
    u = np.asarray(u, np.float64)
    u = u / np.linalg.norm(u, axis=-1, keepdims=True)
    x, y, z = u[..., 0], u[..., 1], u[..., 2]
    eps = 1e-12
    flip = (z > eps) | ((np.abs(z) <= eps) & ((x < -eps) | ((np.abs(x) <= eps) & (y < 0))))
    u = np.where(flip[..., None], -u, u)
    x, y, z = u[..., 0], u[..., 1], np.minimum(u[..., 2], 0.0)
    r = 1.0 / np.sqrt(1.0 - z)
    return np.stack([x * r, y * r], axis=-1) + 0.0


def equal_area_inverse(X, Y):
    """The lower-hemisphere axis (z ≤ 0) at disc point (X, Y), shape (..., 3); NaN outside.

    Examples
    --------
    >>> u = equal_area_inverse(0.6, 0.0)
    >>> np.allclose(equal_area(u), [0.6, 0.0])
    True
    """
    X, Y = np.broadcast_arrays(np.asarray(X, np.float64), np.asarray(Y, np.float64))
    r2 = X * X + Y * Y
    with np.errstate(invalid="ignore"):
        s = np.sqrt(2.0 - r2)
    u = np.stack([X * s, Y * s, r2 - 1.0], axis=-1)
    return np.where((r2 <= 1.0)[..., None], u, np.nan)


def _disc_grid(n=DISC_PIXELS):
    t = np.linspace(-1.0, 1.0, n)
    X, Y = np.meshgrid(t, t, indexing="xy")  # rows go up in Y with origin="lower"
    return X, Y, equal_area_inverse(X, Y)


def direction_colours(u):
    """RGB of axes ``u`` (..., 3): ``(|u_x|, |u_y|, |u_z|)``, the same for u and −u.

    Examples
    --------
    >>> direction_colours(np.array([0.0, -1.0, 0.0]))
    array([0., 1., 0.])
    """
    return np.clip(np.abs(np.asarray(u, np.float64)), 0.0, 1.0)


def _disc_frame(ax, labels=("x", "y", "z")):
    """Primitive circle, rings at 30° and 60° from the centre axis, and the axis names."""
    t = np.linspace(0, 2 * np.pi, 361)
    ax.plot(np.cos(t), np.sin(t), color="black", lw=0.8)
    for deg in (30, 60):
        r = math.sqrt(1.0 - math.cos(math.radians(deg)))  # equal-area radius of that polar angle
        ax.plot(r * np.cos(t), r * np.sin(t), color="0.5", lw=0.4, ls=":")
    ax.plot([-1, 1], [0, 0], color="0.5", lw=0.4, ls=":")
    ax.plot([0, 0], [-1, 1], color="0.5", lw=0.4, ls=":")
    h, v, n = labels
    kw = dict(fontsize="small", ha="center", va="center")
    ax.text(1.13, 0.0, h, **kw)
    ax.text(0.0, 1.12, v, **kw)
    ax.text(-1.22, -1.12, f"centre: {n}", fontsize="x-small", ha="left", va="center", color="0.25")
    ax.set_xlim(-1.25, 1.25)
    ax.set_ylim(-1.22, 1.22)
    ax.set_aspect("equal")
    ax.axis("off")


def direction_key(ax, axis=2):
    """Colour key of :func:`direction_colours` on ``ax``: axes of a lower hemisphere seen
    along ``axis``, the slice's horizontal axis to the right and its vertical axis up.

    Examples
    --------
    >>> fig = Figure(); ax = fig.add_subplot()
    >>> direction_key(ax, axis=2).get_title()
    'colour key: axis u'
    """
    h, v = (a for a in range(3) if a != axis)
    X, Y, w = _disc_grid(121)
    u = np.empty_like(w)
    u[..., h], u[..., v], u[..., axis] = w[..., 0], w[..., 1], w[..., 2]
    rgba = np.ones(u.shape[:-1] + (4,))
    rgba[..., :3] = np.nan_to_num(direction_colours(u), nan=1.0)
    rgba[..., 3] = np.isfinite(w[..., 0])
    ax.imshow(rgba, origin="lower", extent=(-1, 1, -1, 1), interpolation="bilinear")
    _disc_frame(ax, (AXES[h], AXES[v], AXES[axis]))
    ax.set_title("colour key: axis u", fontsize="small")
    return ax


# ----------------------------------------------------------------------------- energy maps
def _normalised(ds):
    """(values, label, note): what the energy panels show, from what the Dataset has."""
    if "energy_normalized" in ds:
        return ds["energy_normalized"], ENERGY_LABEL, None
    if "energy" in ds and "wavelet_energy" in ds:
        return ds["energy"] / ds["wavelet_energy"], ENERGY_LABEL, None
    for name in ("std", "max", "mean", "min"):
        if name in ds and {"theta", "phi"} <= set(ds[name].dims):
            long = ds[name].attrs.get("long_name", name)
            return ds[name], long, f"no energy in this sweep's stats: showing {name}"
    return None, None, "no energy (nor any other statistic over θ, φ) in this sweep"


def _panels(da):
    """[(labels, {dim: index}), ...] over the dims of ``da`` other than θ and φ."""
    lead = [d for d in da.dims if d not in ("theta", "phi")]
    out = []
    for idx in np.ndindex(*[da.sizes[d] for d in lead]):
        sel = dict(zip(lead, idx))
        parts = []
        for d, i in sel.items():
            value = float(da[d].values[i]) if d in da.coords else i
            parts.append(f"{'ξ' if d == 'xi' else d} = {value:g}")
        out.append((", ".join(parts), sel))
    return out


def _is_isotropic(da, sel):
    return "xi" in sel and "xi" in da.coords and bool(np.isclose(float(da["xi"].values[sel["xi"]]), 1.0))


def _degree_ticks(ax, theta, phi):
    from matplotlib.ticker import MultipleLocator

    for values, axis in ((phi, ax.xaxis), (theta, ax.yaxis)):
        span = float(np.ptp(values)) if len(values) > 1 else 0.0
        if span >= 90:
            axis.set_major_locator(MultipleLocator(45))
        elif span >= 30:
            axis.set_major_locator(MultipleLocator(15))


def _cell_edges(deg):
    deg = np.asarray(deg, np.float64)
    if deg.size == 1:
        return np.array([deg[0] - 0.5, deg[0] + 0.5])
    mid = 0.5 * (deg[1:] + deg[:-1])
    return np.concatenate([[2 * deg[0] - mid[0]], mid, [2 * deg[-1] - mid[-1]]])


def energy_maps(ds, path=None, *, title=""):
    """One panel per ξ (and a): ``energy / wavelet_energy`` over (φ, θ) in degrees.

    The ξ = 1 panel is drawn flat and marked isotropic (every direction is the same
    kernel, so its differences are rounding).  The grid cell of the dominant orientation
    (``dominant_theta``/``dominant_phi``) is ringed in white.  Without ``energy`` the
    panels show the first statistic the sweep has, and say so.

    Parameters
    ----------
    ds : xarray.Dataset
        A sweep Dataset (``sweep.nc``).
    path : str or Path, optional
        Where to write the PNG.
    title : str
        The volume's name, shown in the figure's title.

    Returns
    -------
    matplotlib.figure.Figure

    Examples
    --------
    >>> import xarray as xr
    >>> e = np.ones((4, 3, 2)); e[1, 2, 1] = 3.0
    >>> ds = xr.Dataset({"energy": (("theta", "phi", "xi"), e), "wavelet_energy": ("xi", [1.0, 1.0])},
    ...                 coords={"theta": np.arange(4) * np.pi / 4, "phi": np.arange(3) * np.pi / 3,
    ...                         "xi": [1.0, 2.0]})
    >>> [ax.get_title() for ax in energy_maps(ds).axes if ax.get_title()]
    ['ξ = 1', 'ξ = 2']
    """
    norm, label, note = _normalised(ds)
    if norm is None:
        fig = _figure(5, 3)
        ax = fig.add_subplot()
        ax.text(0.5, 0.5, note, ha="center", va="center", wrap=True, transform=ax.transAxes)
        ax.set_axis_off()
        _title(fig, title, "energy over (θ, φ)")
        return _save(fig, path)
    panels = _panels(norm)
    n = len(panels)
    cols = min(n, 4)
    rows = -(-n // cols)
    fig = _figure(3.3 * cols + 0.3, 3.0 * rows + 0.5)
    theta, phi = np.degrees(ds["theta"].values), np.degrees(ds["phi"].values)
    te, pe = _cell_edges(theta), _cell_edges(phi)
    dom = "dominant_theta" in ds and "dominant_phi" in ds
    for k, (name, sel) in enumerate(panels):
        ax = fig.add_subplot(rows, cols, k + 1)
        m = norm.isel(sel).transpose("theta", "phi").values.astype(np.float64)
        ax.set_title(name)
        ax.set_xlabel("φ (°)")
        ax.set_ylabel("θ (°)")
        ax.set_xlim(pe[0], pe[-1])
        ax.set_ylim(te[0], te[-1])
        _degree_ticks(ax, theta, phi)
        finite = m[np.isfinite(m)]
        scale = float(np.max(np.abs(finite))) if finite.size else 0.0
        flat = finite.size == 0 or float(np.ptp(finite)) <= FLAT_RTOL * scale
        if _is_isotropic(norm, sel) or flat:
            ax.set_facecolor("0.88")
            text = ISOTROPIC_TEXT if _is_isotropic(norm, sel) else "flat: no direction"
            if finite.size:
                text += f"\n\n{label}\n= {float(np.mean(finite)):.4g} everywhere"
            ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes,
                    fontsize="small")
            continue
        im = ax.pcolormesh(pe, te, m, cmap="viridis", shading="flat")
        cb = fig.colorbar(im, ax=ax, shrink=0.9)
        cb.set_label(label)
        cb.formatter.set_powerlimits((-3, 4))
        if dom and "theta" not in ds["dominant_theta"].dims:
            dsel = {d: i for d, i in sel.items() if d in ds["dominant_theta"].dims}
            dt, dp = float(ds["dominant_theta"].isel(dsel)), float(ds["dominant_phi"].isel(dsel))
            if math.isfinite(dt) and math.isfinite(dp):
                ax.plot(math.degrees(dp), math.degrees(dt), "o", mfc="none", mec="white", ms=11, mew=1.5)
    what = label if note is None else f"{label} ({note})"
    _title(fig, title, f"{what} over the wavelet axis u(θ, φ)")
    return _save(fig, path)


# ----------------------------------------------------------------------------- stereonets
def _stereonet_image(values, theta, phi, n=DISC_PIXELS):
    """A (θ, φ) map drawn on the equal-area disc: Gaussian-weighted mean of the grid axes
    within a few cells (σ = :data:`STEREONET_SIGMA_WIDTHS` cell widths); NaN outside."""
    t, p = np.meshgrid(np.asarray(theta, float), np.asarray(phi, float), indexing="ij")
    uk = axis_vector(t.ravel(), p.ravel())
    vk = np.asarray(values, float).ravel()
    ok = np.isfinite(vk)
    uk, vk = uk[ok], vk[ok]
    distinct = len(np.unique(np.round(np.abs(uk) * np.sign(uk[:, [2]] + 1e-15), 6), axis=0))
    width = math.sqrt(2 * math.pi / max(distinct, 1))
    sigma = STEREONET_SIGMA_WIDTHS * width
    X, Y, u = _disc_grid(n)
    inside = np.isfinite(u[..., 0])
    ang = np.arccos(np.clip(np.abs(u[inside] @ uk.T), 0.0, 1.0))
    w = np.exp(-0.5 * (ang / sigma) ** 2) + 1e-300
    img = np.full(X.shape, np.nan)
    img[inside] = (w @ vk) / w.sum(axis=1)
    return img


def _density_panels(ds):
    """[(title, (θ, φ) map, families [(θ, φ, weight)], kind)] of a sweep Dataset, and a note."""
    if "orientation_density" in ds:
        dens = ds["orientation_density"]
    elif "energy" in ds and "wavelet_energy" in ds:
        from volsweep.engine.products import orientation_families

        fam = orientation_families(ds)
        dens = fam["orientation_density"]
        ds = ds.merge(fam, compat="override")
    else:
        dens = None
    out = []
    note = None
    if dens is not None:
        panels = [(name, sel) for name, sel in _panels(dens) if not _is_isotropic(dens, sel)]
        above = [(name, sel) for name, sel in panels
                 if "xi" not in sel or float(dens["xi"].values[sel["xi"]]) > 1.0]
        if above:
            panels = above
        else:
            note = "no ξ > 1 in this sweep: showing ξ < 1"
        for name, sel in panels:
            m = dens.isel(sel).transpose("theta", "phi").values
            out.append((name, m, _families(ds, "family_", sel), "energy"))
        if not panels:
            note = "only ξ = 1 (isotropic) in this sweep: no orientation distribution"
    else:
        note = "no energy in this sweep's stats: no orientation distribution"
    if "vote_density" in ds:
        m = ds["vote_density"].transpose("theta", "phi").values
        out.append(("per-voxel orientations", m, _families(ds, "vote_family_", {}), "votes"))
    return out, note


def _families(ds, prefix, sel):
    if f"{prefix}theta" not in ds:
        return []
    dims = ds[f"{prefix}theta"].dims
    s = {d: i for d, i in sel.items() if d in dims}
    th = np.atleast_1d(ds[f"{prefix}theta"].isel(s).values)
    ph = np.atleast_1d(ds[f"{prefix}phi"].isel(s).values)
    w = np.atleast_1d(ds[f"{prefix}weight"].isel(s).values) if f"{prefix}weight" in ds else np.full(th.shape, np.nan)
    return [(float(a), float(b), float(c)) for a, b, c in zip(th, ph, w) if np.isfinite(a) and np.isfinite(b)]


def orientation_distribution(ds, path=None, *, title=""):
    """Stereonets of the orientation density per ξ > 1, with the fibre families marked.

    Equal-area, lower hemisphere (:func:`equal_area`; u and −u are one point), x to the
    right, y up, z at the centre.  Each panel is ``orientation_density`` at one ξ
    (sr⁻¹; uniform is 1/2π ≈ 0.16), smoothed for display over half a grid cell; the
    families (``family_theta``/``family_phi``) are numbered by weight.  With
    ``vote_density`` a last panel shows the per-voxel orientations and their families.
    ξ < 1 panels appear only when the sweep has no ξ > 1.

    Parameters
    ----------
    ds : xarray.Dataset
        A sweep Dataset (``sweep.nc``); without ``orientation_density`` the density is
        computed from ``energy``.
    path : str or Path, optional
        Where to write the PNG.
    title : str
        The volume's name.

    Returns
    -------
    matplotlib.figure.Figure

    Examples
    --------
    >>> import xarray as xr
    >>> th = np.arange(6) * np.pi / 6
    >>> e = 1.0 + np.cos(th)[:, None, None] ** 8 * np.ones((1, 6, 2))
    >>> ds = xr.Dataset({"energy": (("theta", "phi", "xi"), e), "wavelet_energy": ("xi", [1.0, 1.0])},
    ...                 coords={"theta": th, "phi": th, "xi": [1.0, 3.0]})
    >>> [ax.get_title() for ax in orientation_distribution(ds).axes if ax.get_title()]
    ['ξ = 3']
    """
    panels, note = _density_panels(ds)
    n = max(len(panels), 1)
    cols = min(n, 4)
    rows = -(-n // cols)
    fig = _figure(3.5 * cols + 0.2, 2.9 * rows + (0.8 if note else 0.5))
    theta, phi = ds["theta"].values, ds["phi"].values
    if not panels:
        ax = fig.add_subplot()
        ax.text(0.5, 0.5, note, ha="center", va="center", transform=ax.transAxes)
        ax.set_axis_off()
    for k, (name, m, fams, kind) in enumerate(panels):
        ax = fig.add_subplot(rows, cols, k + 1)
        img = _stereonet_image(m, theta, phi)
        vmax = float(np.nanmax(img)) if np.isfinite(img).any() else 1.0
        im = ax.imshow(img, origin="lower", extent=(-1, 1, -1, 1), cmap="magma_r",
                       vmin=0.0, vmax=vmax if vmax > 0 else 1.0, interpolation="bilinear")
        _disc_frame(ax)
        for j, (ft, fp, fw) in enumerate(fams):
            X, Y = equal_area(axis_vector(ft, fp))
            ax.plot(X, Y, marker="o", ms=10, mfc="white", mec="tab:cyan", mew=1.5, ls="none", alpha=0.9)
            ax.annotate(f"{j + 1}", (X, Y), xytext=(0, 0), textcoords="offset points",
                        fontsize=6.5, color="black", fontweight="bold", ha="center", va="center")
        if fams:
            weights = ", ".join(f"{j + 1}: {100 * fw:.0f}%" for j, (_, _, fw) in enumerate(fams)
                                if math.isfinite(fw))
            ax.text(0.0, -1.3, f"families (weight) {weights}" if weights else "families marked",
                    ha="center", va="top", fontsize="x-small")
            ax.set_ylim(-1.45, 1.22)
        ax.set_title(name)
        cb = fig.colorbar(im, ax=ax, shrink=0.75)
        cb.set_label(DENSITY_LABEL if kind == "energy" else "per-voxel density (sr⁻¹)")
    what = "orientation distribution, equal-area lower hemisphere"
    _title(fig, title, what)
    if note and panels:
        fig.supxlabel(note, fontsize="small")
    return _save(fig, path)


# ----------------------------------------------------------------------------- thickness
def thickness_histogram(ds, path=None, *, title="", unit=None, spacing=None):
    """Volume-weighted local-thickness histogram: fraction of the phase per diameter bin.

    Parameters
    ----------
    ds : xarray.Dataset
        From :func:`volsweep.thickness.distribution_from_counts` (``thickness.nc``).
    path : str or Path, optional
        Where to write the PNG.
    title : str
        The volume's name.
    unit : str, optional
        The spacing's unit (the volume's ``unit`` attribute).
    spacing : sequence of float, optional
        The voxel size (default: ``ds.attrs["spacing"]``); only chooses the axis label.

    Returns
    -------
    matplotlib.figure.Figure

    Examples
    --------
    >>> from volsweep.thickness import distribution_from_counts
    >>> ds = distribution_from_counts(np.array([2.0, 4.0]), np.array([3, 1]), 10, bins=4)
    >>> thickness_histogram(ds, unit="um").axes[0].get_xlabel()
    'local thickness, diameter (µm)'
    """
    spacing = spacing if spacing is not None else ds.attrs.get("spacing")
    u = unit_label(unit, spacing)
    fig = _figure(5.6, 3.8)
    ax = fig.add_subplot()
    lower, upper = ds["diameter_lower"].values, ds["diameter_upper"].values
    ax.bar(lower, ds["volume_fraction_of_phase"].values, width=upper - lower, align="edge",
           color="C0", edgecolor="black", linewidth=0.3)
    mean, median = float(ds["mean"]), float(ds["median"])
    if math.isfinite(mean):
        ax.axvline(mean, color="C1", lw=1.5, zorder=3, label=f"mean {mean:.3g} {u}")
        ax.axvline(median, color="C2", lw=1.5, ls="--", zorder=3, label=f"median {median:.3g} {u}")
        ax.legend(frameon=False)
    else:
        ax.text(0.5, 0.5, "the phase is empty: no thickness", ha="center", va="center",
                transform=ax.transAxes)
    span = float(upper[-1] - lower[0])
    ax.set_xlim(float(lower[0]), float(upper[-1]) + 0.05 * span)  # a last bin clear of the frame
    ax.set_xlabel(f"local thickness, diameter ({u})")
    ax.set_ylabel("fraction of the phase volume")
    if "volume_fraction" in ds:
        ax.set_title(f"phase volume fraction {float(ds['volume_fraction']):.3g}", fontsize="medium")
    _title(fig, title, "local thickness distribution")
    return _save(fig, path)


def thickness_slice(volume, thickness, path=None, *, axis=2, title="", spacing=None, unit=None):
    """Mid-slice of the volume in grey, the local thickness (diameter) in colour over the phase.

    Parameters
    ----------
    volume, thickness : 3D arrays (NumPy or Zarr; only the slice is read)
        The volume and its local-thickness map (0 outside the phase).
    path : str or Path, optional
        Where to write the PNG.
    axis : int
        The axis normal to the slice.
    title : str
        The volume's name.
    spacing, unit : optional
        The voxel size and its unit (default: the volume's ``spacing``/``unit`` attrs).

    Returns
    -------
    matplotlib.figure.Figure

    Examples
    --------
    >>> v = np.zeros((8, 6, 4)); v[2:5] = 1.0
    >>> fig = thickness_slice(v, 3.0 * v, spacing=(2.0, 2.0, 2.0), unit="um")
    >>> fig.axes[0].get_xlabel(), fig.axes[0].images[0].get_extent()
    ('x (µm)', [-1.0, 15.0, -1.0, 11.0])
    """
    spacing, unit = geometry(volume, spacing, unit)
    grey, index = mid_slice(volume, axis)
    lt = np.asarray(thickness[index], dtype=np.float32)
    h, v = (a for a in range(3) if a != axis)
    width = 5.6
    aspect = (grey.shape[1] * spacing[v]) / max(grey.shape[0] * spacing[h], 1e-30)
    fig = _figure(width, min(max(2.6, 0.75 * width * aspect + 1.0), 9.0))
    ax = fig.add_subplot()
    extent = _slice_axes(ax, axis, grey.shape, spacing, unit)
    ax.imshow(_grey(grey, _value_range(volume)).T, cmap="gray", origin="lower", extent=extent,
              vmin=0, vmax=1, interpolation="nearest")
    phase = lt > 0
    im = ax.imshow(np.ma.masked_where(~phase, lt).T, cmap="viridis", origin="lower",
                   extent=extent, interpolation="nearest", vmin=0,
                   vmax=float(lt.max()) if phase.any() else 1.0)
    cb = fig.colorbar(im, ax=ax, shrink=0.9)
    cb.set_label(f"local thickness, diameter ({unit_label(unit, spacing)})")
    ax.set_title(_slice_name(axis, volume, spacing, unit), fontsize="medium")
    _title(fig, title, "local thickness")
    return _save(fig, path)


# ----------------------------------------------------------------------------- orientation slice
def orientation_rgb(grey, response, theta_index, phi_index, theta, phi, *, xi_index=None, xi=None,
                    value_range=None):
    """RGB of a slice: the grey volume, blended towards the orientation colour by the response.

    The colour is :func:`direction_colours` of the axis u(θ, φ) of the voxel's strongest
    wavelet; its weight is the positive response over its 99th percentile (clipped to 1).
    Voxels with no valid index, or whose best wavelet is the isotropic ξ = 1, stay grey.
    The grey spans ``value_range`` (the volume's (min, max)), else the slice's extremes.

    Examples
    --------
    >>> rgb = orientation_rgb(np.zeros((1, 2)), np.array([[0.0, 1.0]]), np.zeros((1, 2), int),
    ...                       np.zeros((1, 2), int), [0.0], [0.0])
    >>> rgb[0, 1].tolist()
    [1.0, 0.0, 0.0]
    """
    theta, phi = np.asarray(theta, float), np.asarray(phi, float)
    it, ip = np.asarray(theta_index, np.int64), np.asarray(phi_index, np.int64)
    valid = (it >= 0) & (it < theta.size) & (ip >= 0) & (ip < phi.size)
    if xi_index is not None and xi is not None:
        xi = np.asarray(xi, float)
        ix = np.asarray(xi_index, np.int64)
        ok = (ix >= 0) & (ix < xi.size)
        valid &= ok & ~np.isclose(xi[np.where(ok, ix, 0)], 1.0)
    resp = np.clip(np.nan_to_num(np.asarray(response, np.float64)), 0.0, None)
    ref = np.percentile(resp[valid], 99) if valid.any() else 0.0
    weight = np.clip(resp / ref, 0.0, 1.0) if ref > 0 else np.zeros(resp.shape)
    weight[~valid] = 0.0
    u = axis_vector(theta[np.where(valid, it, 0)], phi[np.where(valid, ip, 0)])
    g = _grey(grey, value_range)[..., None]
    return (1.0 - weight[..., None]) * g + weight[..., None] * direction_colours(u)


def orientation_slice(volume, response_max, theta_index, phi_index, theta, phi, path=None, axis=2,
                      title="", *, xi_index=None, xi=None, spacing=None, unit=None):
    """Mid-slice: the volume in grey, and coloured by the axis of the strongest wavelet.

    Left: the volume.  Middle: :func:`orientation_rgb` (RGB = ``|u_x|, |u_y|, |u_z|``,
    weighted by the response).  Right: the colour key (:func:`direction_key`).

    Parameters
    ----------
    volume, response_max, theta_index, phi_index : 3D arrays (NumPy or Zarr)
        The volume, the maximum response and its θ and φ grid indices (the orientation
        store's ``0``, ``argmax_theta``, ``argmax_phi``).
    theta, phi : 1D sequences
        The grid, radians.
    path : str or Path, optional
        Where to write the PNG.
    axis : int
        The axis normal to the slice.
    title : str
        The volume's name.
    xi_index, xi : optional
        ``argmax_xi`` and the ξ grid: voxels won by ξ = 1 stay grey.
    spacing, unit : optional
        The voxel size and its unit (default: the volume's attrs).

    Returns
    -------
    matplotlib.figure.Figure

    Examples
    --------
    >>> v = np.random.default_rng(0).random((6, 5, 4)); i = np.zeros(v.shape, int)
    >>> fig = orientation_slice(v, v, i, i, [0.0], [0.0], spacing=(1.0, 1.0, 1.0))
    >>> fig.axes[1].get_ylabel()
    'y (voxel units)'
    """
    spacing, unit = geometry(volume, spacing, unit)
    grey, index = mid_slice(volume, axis)
    rgb = orientation_rgb(grey, response_max[index], theta_index[index], phi_index[index], theta, phi,
                          xi_index=None if xi_index is None else xi_index[index], xi=xi,
                          value_range=_value_range(volume))
    h, v = (a for a in range(3) if a != axis)
    aspect = (grey.shape[1] * spacing[v]) / max(grey.shape[0] * spacing[h], 1e-30)
    panel = 3.6
    fig = _figure(2 * panel + 1.9, min(max(2.8, panel * aspect + 0.9), 9.0))
    gs = fig.add_gridspec(1, 3, width_ratios=[1, 1, 0.5])
    ax0 = fig.add_subplot(gs[0])
    extent = _slice_axes(ax0, axis, grey.shape, spacing, unit)
    ax0.imshow(_grey(grey, _value_range(volume)).T, cmap="gray", origin="lower", extent=extent,
               vmin=0, vmax=1, interpolation="nearest")
    ax0.set_title("volume", fontsize="medium")
    ax1 = fig.add_subplot(gs[1])
    _slice_axes(ax1, axis, grey.shape, spacing, unit)
    ax1.imshow(np.transpose(rgb, (1, 0, 2)), origin="lower", extent=extent, interpolation="nearest")
    ax1.set_title("orientation, weighted by response", fontsize="medium")
    direction_key(fig.add_subplot(gs[2]), axis)
    _title(fig, title, f"orientation of the strongest wavelet, {_slice_name(axis, volume, spacing, unit)}")
    return _save(fig, path)
