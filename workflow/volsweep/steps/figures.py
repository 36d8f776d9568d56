"""The report's figure steps: one function per plotting rule, called by its thin script.

Physical units come from the volume store: its ``spacing`` and, when the volume has one,
its ``unit`` attribute.
"""

from __future__ import annotations

from volsweep.io import datasets
from volsweep.io import orientation as orientation_store
from volsweep.io.store import open_store
from volsweep.steps._common import store_root


def _volume(volume_zarr):
    """The volume array, its spacing and its unit (None when the volume has none)."""
    volume = open_store(store_root(volume_zarr))
    return volume, tuple(float(s) for s in volume.attrs["spacing"]), volume.attrs.get("unit")


def plot_sweep(sweep_nc, out_png, *, name):
    """Rule plot_sweep: energy maps over (θ, φ) for each ξ.

    Examples
    --------
    >>> plot_sweep("results/demo/sweep.nc", "energy_maps.png", name="demo")  # doctest: +SKIP
    """
    from volsweep import plots

    plots.energy_maps(datasets.open_netcdf(sweep_nc), out_png, title=name)


def plot_orientation_distribution(sweep_nc, out_png, *, name):
    """Rule plot_orientation_distribution: stereonets per ξ > 1 with the fibre families.

    Examples
    --------
    >>> plot_orientation_distribution("results/demo/sweep.nc", "od.png", name="demo")  # doctest: +SKIP
    """
    from volsweep import plots

    plots.orientation_distribution(datasets.open_netcdf(sweep_nc), out_png, title=name)


def plot_thickness(thickness_nc, volume_zarr, thickness_zarr, hist_png, slice_png, *, axis, name):
    """Rule plot_thickness: the histogram, and a mid-slice with a thickness overlay.

    Examples
    --------
    >>> plot_thickness("results/demo/thickness.nc", "results/demo/volume.zarr",
    ...                "results/demo/thickness.zarr", "h.png", "s.png", axis=2, name="demo")  # doctest: +SKIP
    """
    from volsweep import plots

    volume, spacing, unit = _volume(volume_zarr)
    plots.thickness_histogram(datasets.open_netcdf(thickness_nc), hist_png, title=name, unit=unit,
                              spacing=spacing)
    plots.thickness_slice(volume, open_store(store_root(thickness_zarr)), slice_png, axis=axis,
                          title=name, spacing=spacing, unit=unit)


def plot_orientation(volume_zarr, orientation_zarr, out_png, *, axis, name):
    """Rule plot_orientation: a mid-slice coloured by the strongest wavelet's axis.

    Examples
    --------
    >>> plot_orientation("results/demo/volume.zarr", "results/demo/orientation.zarr", "o.png",
    ...                  axis=2, name="demo")  # doctest: +SKIP
    """
    from volsweep import plots

    volume, spacing, unit = _volume(volume_zarr)
    g = orientation_store.open_group(store_root(orientation_zarr))
    has_xi = "argmax_xi" in g and "xi" in g.attrs
    plots.orientation_slice(volume, g["0"], g["argmax_theta"], g["argmax_phi"], g.attrs["theta"],
                            g.attrs["phi"], out_png, axis=axis, title=name,
                            xi_index=g["argmax_xi"] if has_xi else None,
                            xi=g.attrs["xi"] if has_xi else None, spacing=spacing, unit=unit)
