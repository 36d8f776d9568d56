"""Provenance attrs of every output: config hash, input checksum, versions, device."""

from __future__ import annotations

import hashlib
import json

#: Distributions whose versions shape the numbers.
DISTRIBUTIONS = ("volsweep", "numpy", "scipy", "xarray", "zarr", "edt", "numba", "cupy-cuda12x",
                 "cupy-cuda13x", "snakemake")


def config_sha256(config: dict) -> str:
    """sha256 of the config as canonical JSON.

    Examples
    --------
    >>> config_sha256({"b": 1, "a": 2}) == config_sha256({"a": 2, "b": 1})
    True
    """
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()


def package_versions() -> dict:
    """``<name>_version`` of volsweep and the libraries that shape its numbers (the sweep's own names)."""
    from importlib.metadata import PackageNotFoundError, version

    from volsweep import __version__

    out = {"volsweep_version": __version__}  # also when run from a checkout, not installed
    for dist in DISTRIBUTIONS[1:]:
        try:
            out[f"{dist.split('-')[0]}_version"] = version(dist)
        except PackageNotFoundError:
            continue
    return out


def provenance(config: dict) -> dict:
    """Provenance attrs shared by every output: config hash and package versions."""
    return {"config_sha256": config_sha256(config), **package_versions()}
