"""Rule ingest: any input format becomes ``results/{vol}/volume.zarr``."""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future

import numpy as np

from volsweep.io.readers import VolumeError, open_volume, source_sha256, volume_where
from volsweep.io.store import ingest
from volsweep.steps._common import MB, store_root

log = logging.getLogger("volsweep")


def ingest_volume(entry: dict, name: str, out, *, chunks, shards, buffer_mb: float,
                  phase: dict | None = None):
    """Rule ingest: any input format becomes ``results/{vol}/volume.zarr``.

    With ``phase`` (the config's ``thickness`` section, when thickness runs),
    the phase rule is resolved first (an ``otsu``/``li``/``yen`` threshold from
    a histogram streamed from the input), checked (an empty or full phase
    stops here, before any store is written; under 1% or over 95% warns), and
    recorded in the store's attrs as ``phase`` for the thickness jobs.
    """
    from volsweep.phase import check_phase, value_range

    # the file handles a TIFF or HDF5 input reads through are released at the end
    with open_volume(entry, name, memory_budget=buffer_mb * MB) as source:
        lo, hi = value_range(source)
        if lo == hi:
            raise VolumeError(f"{volume_where(entry, name)}: every voxel is {lo}: a constant volume "
                              "has no structure to sweep or measure")
        rule = None
        if phase is not None:
            rule = check_phase(source, name, threshold=phase["threshold"], label=phase["label"],
                               invert=phase["invert"])
            log.info("ingest %s: phase %s, %.4f of the volume", name, rule, rule["phase_fraction"])
        spacing = [float(s) for s in source.spacing]
        unit = source.unit or entry.get("unit")
        axes = source.axes
        attrs = {
            "name": name,
            "spacing": spacing,
            "shape": [int(n) for n in source.shape],
            "source": entry.get("path", "synthetic"),
            "format": entry.get("format", "synthetic"),
            "source_dtype": str(np.dtype(source.dtype)),
            "value_range": [lo, hi],
            "file_axes": axes,
            "axes_from_file": {c: axes.index(c) for c in "xyz"},
            **({"unit": unit} if unit else {}),
            **({"phase": rule} if rule else {}),
        }
        sha = _in_background(source_sha256, entry, source)  # hashed while the store is written
        ingest(source, store_root(out), chunks=chunks, shards=shards, memory_budget=buffer_mb * MB,
               attrs=attrs, name=name, spacing=spacing, unit=unit,
               where=volume_where(entry, name), late_attrs=lambda: {"source_sha256": sha.result()})


def _in_background(func, *args) -> Future:
    """``func(*args)`` in a daemon thread (a failed ingest does not wait for it)."""
    done = Future()

    def run():
        try:
            done.set_result(func(*args))
        except BaseException as exc:  # noqa: BLE001 - handed to whoever asks for the result
            done.set_exception(exc)

    threading.Thread(target=run, daemon=True).start()
    return done
