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


#: Attrs that count work: the merged file holds their total over the blocks.
SUM_ATTRS = ("n_kernels", "n_unique_kernels")
#: Attrs of the volume's spatial tiling and FFTs: kept once where every block agrees, else
#: as ``<name>_per_parameter_block`` (a list, or a string of lists for list values).
PER_BLOCK_ATTRS = ("n_blocks", "halo", "fft_shape", "method", "device", "integration_scale")


def _same(values) -> bool:
    return all(np.array_equal(np.asarray(v), np.asarray(values[0])) for v in values[1:])


def with_provenance(ds: xr.Dataset, provenance=None) -> xr.Dataset:
    """``ds`` with the ``provenance`` attrs added, one set of versions: a ``version_<pkg>``
    entry is left out where the Dataset already has ``<pkg>_version`` (the sweep's own).

    Examples
    --------
    >>> ds = with_provenance(xr.Dataset(attrs={"numpy_version": "2"}), {"version_numpy": "2", "x": 1})
    >>> sorted(ds.attrs)
    ['numpy_version', 'x']
    """
    ds = ds.copy()
    for key, value in (provenance or {}).items():
        if key.startswith("version_") and f"{key[len('version_'):]}_version" in ds.attrs:
            continue
        ds.attrs[key] = value
    return ds


def merge_sweep_blocks(paths, *, unit=None, provenance=None) -> xr.Dataset:
    """Concatenate sweep blocks along ``theta`` in the order given (the block order).

    The attrs describe the whole grid: ``n_kernels`` and ``n_unique_kernels`` are totals
    over the blocks, ``n_parameter_blocks`` their number; the spatial plan (``n_blocks``,
    ``halo``, ``fft_shape``, ``method``, ``device``) is kept once where the blocks agree,
    else listed per block as ``<name>_per_parameter_block``.  ``unit`` (the physical unit
    of the spacing, e.g. ``'micrometer'``) is recorded; ``provenance`` attrs are added,
    except ``version_<pkg>`` entries that repeat the sweep's ``<pkg>_version``.

    Examples
    --------
    >>> merge_sweep_blocks.__name__
    'merge_sweep_blocks'
    """
    from volsweep.engine.products import annotate

    blocks = [open_netcdf(p) for p in paths]
    theta_vars = [v for v in blocks[0].data_vars if "theta" in blocks[0][v].dims]
    merged = xr.concat([b[theta_vars] for b in blocks], dim="theta")
    for name in blocks[0].data_vars:
        if name not in theta_vars:
            merged[name] = blocks[0][name]
    attrs = {k: v for k, v in blocks[0].attrs.items() if k != "block"}
    for key in SUM_ATTRS:
        if all(key in b.attrs for b in blocks):
            attrs[key] = int(sum(int(b.attrs[key]) for b in blocks))
    for key in PER_BLOCK_ATTRS:
        if not all(key in b.attrs for b in blocks):
            continue
        values = [b.attrs[key] for b in blocks]
        if _same(values):
            continue
        attrs.pop(key, None)
        if np.ndim(values[0]) == 0:
            attrs[f"{key}_per_parameter_block"] = [v.item() if hasattr(v, "item") else v for v in values]
        else:
            attrs[f"{key}_per_parameter_block"] = "; ".join(
                "[" + ", ".join(str(x) for x in np.asarray(v).tolist()) + "]" for v in values)
    attrs["n_parameter_blocks"] = len(blocks)
    if "n_blocks" in attrs:  # all blocks agree: also the total
        attrs["n_blocks_total"] = int(attrs["n_blocks"]) * len(blocks)
    if unit is not None:
        attrs["unit"] = str(unit)
    merged.attrs = attrs
    merged = with_provenance(merged, provenance)
    if not np.all(np.diff(merged["theta"].values) > 0):
        raise ValueError(f"sweep blocks are out of order or overlap: theta = {merged['theta'].values}")
    return annotate(merged)


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
