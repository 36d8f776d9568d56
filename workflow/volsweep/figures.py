"""The report's figure steps: one function per plotting rule, called by its thin script."""

from __future__ import annotations

from volsweep.io import datasets
from volsweep.io import orientation as orientation_store
from volsweep.io.store import open_store
from volsweep.pipeline import store_root


def plot_sweep(sweep_nc, out_png, *, name):
    """Rule plot_sweep: energy maps over (θ, φ) for each ξ."""
    from volsweep import plots

    plots.energy_maps(datasets.open_netcdf(sweep_nc), out_png, title=name)


def plot_thickness(thickness_nc, volume_zarr, thickness_zarr, hist_png, slice_png, *, axis, name):
    """Rule plot_thickness: the histogram, and a mid-slice with a thickness overlay."""
    from volsweep import plots

    plots.thickness_histogram(datasets.open_netcdf(thickness_nc), hist_png, title=name)
    plots.thickness_slice(open_store(store_root(volume_zarr)), open_store(store_root(thickness_zarr)),
                          slice_png, axis=axis, title=name)


def plot_orientation(volume_zarr, orientation_zarr, out_png, *, axis, name):
    """Rule plot_orientation: a mid-slice coloured by the strongest wavelet's axis."""
    from volsweep import plots

    g = orientation_store.open_group(store_root(orientation_zarr))
    plots.orientation_slice(open_store(store_root(volume_zarr)), g["0"], g["argmax_theta"],
                            g["argmax_phi"], g.attrs["theta"], g.attrs["phi"], out_png, axis=axis,
                            title=name)
