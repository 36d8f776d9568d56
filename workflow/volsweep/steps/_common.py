"""What the rule steps share: store paths and the volume they read."""

from __future__ import annotations

from pathlib import Path

from volsweep.io.store import open_store

MB = 2**20


def store_root(path) -> Path:
    """The folder of a store given by its folder or by its root ``zarr.json``."""
    path = Path(path)
    return path.parent if path.name == "zarr.json" else path


def open_volume_store(volume_zarr):
    store = open_store(store_root(volume_zarr))
    return store, tuple(store.attrs["spacing"])


def job_device(device) -> str:
    """The device a job computes on: the config's ``device`` with ``auto`` resolved to a GPU
    when there is one (the library's ``auto`` follows the array, and a job's arrays start
    on the host)."""
    from volsweep.backend import resolve_device

    return resolve_device(device)


def uses_gpu(device) -> bool:
    return job_device(device) == "cuda"


def device_label(device) -> str:
    from volsweep.backend import device_name, resolve_device

    return device_name(resolve_device(device))
