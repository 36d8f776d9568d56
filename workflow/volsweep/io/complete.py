"""Completeness checks of merged outputs: every part there, every shard written."""

from __future__ import annotations

from pathlib import Path

import numpy as np


class IncompleteError(RuntimeError):
    """Parts of a merge are missing or unwritten; the message names them."""


def require_complete(paths, what: str) -> None:
    """Raise :class:`IncompleteError` naming every one of ``paths`` that is not there."""
    missing = [str(p) for p in paths if not Path(p).exists()]
    if missing:
        raise IncompleteError(f"{len(missing)} of {len(paths)} {what}(s) missing, rerun them: "
                              f"{', '.join(missing)}")


def missing_shards(array, root: Path) -> list[str]:
    """Keys of the shards (or chunks) of ``array`` with no file under ``root``."""
    grid = [-(-n // s) for n, s in zip(array.shape, array.shards or array.chunks)]
    keys = (array.metadata.encode_chunk_key(c) for c in np.ndindex(*grid))
    return [k for k in keys if not (Path(root) / k).is_file()]


def check_written(array, root, cores, names) -> None:
    """Every shard of a NaN-filled ``array`` exists and no core holds NaN (a never-written voxel)."""
    missing = missing_shards(array, Path(root))
    if missing:
        raise IncompleteError(f"{Path(root).parent}: {len(missing)} shard(s) never written: "
                              f"{', '.join(missing[:3])}")
    for core, name in zip(cores, names):
        if np.isnan(array[core]).any():
            raise IncompleteError(f"{Path(root).parent}: unwritten (NaN) voxels in the core of "
                                  f"{name}; delete that file and rerun")


#: Intermediates a later rule reads, by pattern under a volume's results folder.
INTERMEDIATES = ("sweep/*.nc", "thickness/chunks/*.npz", "thickness/rmax.json", "*.nc")


def readable(path) -> bool:
    """Whether a NetCDF, ``.npz`` or JSON file opens and its index is whole (no data read)."""
    import zipfile

    path = Path(path)
    try:
        if path.suffix == ".nc":
            import h5py

            with h5py.File(path, "r"):
                return True
        if path.suffix == ".npz":
            with zipfile.ZipFile(path) as z:
                return bool(z.namelist())
        if path.suffix == ".json":
            import json

            json.loads(path.read_text())
            return True
    except (OSError, ValueError, zipfile.BadZipFile):
        return False
    return True


def unreadable_intermediates(volume_dirs) -> list[Path]:
    """The existing intermediates and results under ``volume_dirs`` that do not open.

    Examples
    --------
    >>> unreadable_intermediates(["results/no-such-volume"])
    []
    """
    return [p for d in volume_dirs for pattern in INTERMEDIATES
            for p in sorted(Path(d).glob(pattern)) if not readable(p)]
