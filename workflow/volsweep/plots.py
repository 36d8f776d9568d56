"""Report figures (matplotlib, PNG): energy maps, thickness histogram, overlaid slices."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from volsweep.synthetic import fibre_direction  # noqa: E402

DPI = 110


def _save(fig, path):
    # No timestamps in the PNG, so a rerun writes identical bytes.
    fig.savefig(path, dpi=DPI, metadata={"Software": None})
    plt.close(fig)


def energy_maps(ds, path, title=""):
    """One panel per ξ: ``energy / wavelet_energy`` over (φ, θ), in degrees."""
    norm = (ds["energy"] / ds["wavelet_energy"]).transpose("xi", "theta", "phi")
    n = norm.sizes["xi"]
    cols = min(n, 4)
    rows = -(-n // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.8 * rows), squeeze=False,
                             constrained_layout=True)
    theta, phi = np.degrees(ds["theta"].values), np.degrees(ds["phi"].values)
    for k, ax in enumerate(axes.flat):
        if k >= n:
            ax.axis("off")
            continue
        im = ax.pcolormesh(phi, theta, norm.values[k], shading="nearest", cmap="viridis")
        ax.set_title(f"ξ = {float(ds['xi'][k]):g}")
        ax.set_xlabel("φ (°)")
        ax.set_ylabel("θ (°)")
        fig.colorbar(im, ax=ax, shrink=0.8)
    fig.suptitle(f"{title} energy / wavelet energy".strip())
    _save(fig, path)


def thickness_histogram(ds, path, title=""):
    """Volume-weighted thickness histogram (fraction of the phase per bin)."""
    fig, ax = plt.subplots(figsize=(5, 3.4), constrained_layout=True)
    lower, upper = ds["diameter_lower"].values, ds["diameter_upper"].values
    ax.bar(lower, ds["volume_fraction_of_phase"].values, width=upper - lower, align="edge",
           edgecolor="black", linewidth=0.3)
    ax.axvline(float(ds["mean"]), color="C1", label=f"mean {float(ds['mean']):.3g}")
    ax.axvline(float(ds["median"]), color="C2", ls="--", label=f"median {float(ds['median']):.3g}")
    ax.set_xlabel("local thickness (diameter)")
    ax.set_ylabel("fraction of the phase")
    ax.set_title(f"{title} local thickness".strip())
    ax.legend()
    _save(fig, path)


def _mid_slice(volume, axis=2):
    index = [slice(None)] * 3
    index[axis] = volume.shape[axis] // 2
    return np.asarray(volume[tuple(index)], dtype=np.float32), tuple(index)


def thickness_slice(volume, thickness, path, axis=2, title=""):
    """Mid-slice of the volume in grey, the local thickness in colour over the phase."""
    grey, index = _mid_slice(volume, axis)
    lt = np.asarray(thickness[index], dtype=np.float32)
    fig, ax = plt.subplots(figsize=(5, 4.4), constrained_layout=True)
    ax.imshow(grey.T, cmap="gray", origin="lower")
    im = ax.imshow(np.ma.masked_where(~(lt > 0), lt).T, cmap="magma", origin="lower", alpha=0.85)
    fig.colorbar(im, ax=ax, label="local thickness (diameter)", shrink=0.8)
    ax.set_title(f"{title} mid-slice, axis {axis}".strip())
    _save(fig, path)


def orientation_slice(volume, response_max, theta_index, phi_index, theta, phi, path, axis=2,
                      title=""):
    """Mid-slice coloured by the orientation of the strongest wavelet: RGB = |u_x|, |u_y|, |u_z|.

    Brightness follows the positive part of the maximum response.
    """
    grey, index = _mid_slice(volume, axis)
    resp = np.clip(np.asarray(response_max[index], dtype=np.float64), 0, None)
    it, ip = np.asarray(theta_index[index]), np.asarray(phi_index[index])
    u = np.abs(fibre_direction(np.asarray(theta)[it], np.asarray(phi)[ip]))  # (3, ny, nz)
    weight = resp / resp.max() if resp.max() > 0 else resp
    rgb = np.moveaxis(u, 0, -1) * weight[..., None]
    fig, axes = plt.subplots(1, 2, figsize=(9, 4.2), constrained_layout=True)
    axes[0].imshow(grey.T, cmap="gray", origin="lower")
    axes[0].set_title("volume")
    axes[1].imshow(np.transpose(rgb, (1, 0, 2)), origin="lower")
    axes[1].set_title("orientation: RGB = |u_x|, |u_y|, |u_z|")
    fig.suptitle(f"{title} mid-slice, axis {axis}".strip())
    _save(fig, path)
