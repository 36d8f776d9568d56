"""Rule summary: per-volume datasets stacked along a ``volume`` dimension."""

from __future__ import annotations

from volsweep.io import datasets


def summarize(paths, names, out_nc):
    """Rule summary: per-volume datasets stacked along a ``volume`` dimension."""
    datasets.write_netcdf(datasets.stack_volumes(paths, names), out_nc)
