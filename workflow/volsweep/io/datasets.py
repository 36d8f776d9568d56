"""xarray datasets on disk: deterministic NetCDF writes, block merges, summaries."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import xarray as xr

from volsweep.io.atomic import atomic_file

ENGINE = "h5netcdf"


def write_netcdf(ds: xr.Dataset, path) -> None:
    """Write ``ds`` to NetCDF4 atomically (temporary name, then rename).

    Attributes that are not NetCDF types (tuples, bools, None) are converted
    first, so the file round-trips through :func:`xarray.open_dataset`.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    ds = ds.copy()
    ds.attrs = _netcdf_attrs(ds.attrs)
    for name in ds.variables:
        ds[name].attrs = _netcdf_attrs(ds[name].attrs)
    with atomic_file(path) as tmp:
        ds.to_netcdf(tmp, engine=ENGINE)


def _netcdf_attrs(attrs: dict) -> dict:
    out = {}
    for key, value in attrs.items():
        if value is None:
            value = "none"
        elif isinstance(value, bool | np.bool_):
            value = int(value)
        elif isinstance(value, tuple | list):
            value = np.asarray(value)
            if value.dtype.kind in "OU":
                value = ", ".join(map(str, value.tolist()))
        elif isinstance(value, dict):
            value = repr(value)
        out[str(key)] = value
    return out


def open_netcdf(path) -> xr.Dataset:
    """Open and load a NetCDF file fully (so the file handle is closed)."""
    with xr.open_dataset(path, engine=ENGINE) as ds:
        return ds.load()


def merge_sweep_blocks(paths) -> xr.Dataset:
    """Concatenate sweep blocks along ``theta`` in the order given (the block order)."""
    blocks = [open_netcdf(p) for p in paths]
    theta_vars = [v for v in blocks[0].data_vars if "theta" in blocks[0][v].dims]
    merged = xr.concat([b[theta_vars] for b in blocks], dim="theta")
    for name in blocks[0].data_vars:
        if name not in theta_vars:
            merged[name] = blocks[0][name]
    merged.attrs = {k: v for k, v in blocks[0].attrs.items() if k != "block"}
    merged.attrs["n_blocks"] = len(blocks)
    if not np.all(np.diff(merged["theta"].values) > 0):
        raise ValueError(f"sweep blocks are out of order or overlap: theta = {merged['theta'].values}")
    return merged


def stack_volumes(paths, names) -> xr.Dataset:
    """Stack per-volume datasets along a new ``volume`` dimension, in the order given."""
    parts = [open_netcdf(p) for p in paths]
    # A variable named like the new dimension would clash with it.
    parts = [p.rename({"volume": "volume_per_bin"}) if "volume" in p.variables else p for p in parts]
    stacked = xr.concat(parts, dim=xr.Variable("volume", list(names)), combine_attrs="drop_conflicts",
                        join="exact")
    for key in ("source_sha256", "device", "gpu"):
        vals = [str(p.attrs.get(key, "")) for p in parts]
        if any(vals):
            stacked.attrs[f"{key}_per_volume"] = ", ".join(vals)
    return stacked
