"""Atomic outputs: write under a temporary sibling name, rename when complete.

A killed job leaves at most a temporary (``.<name>.tmp-<pid>``), never a
half-written output; the next attempt at the same path removes it.  One job
writes a given path at a time (Snakemake's guarantee), so stale temporaries
of that path are safe to remove.
"""

from __future__ import annotations

import os
import shutil
from contextlib import contextmanager
from pathlib import Path


def _temp_sibling(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    for stale in path.parent.glob(f".{path.name}.tmp-*"):  # a killed attempt's
        if stale.is_dir():
            shutil.rmtree(stale, ignore_errors=True)
        else:
            stale.unlink(missing_ok=True)
    return path.with_name(f".{path.name}.tmp-{os.getpid()}")


@contextmanager
def atomic_file(path):
    """Yield a temporary path; it replaces ``path`` only if the block succeeds."""
    path = Path(path)
    tmp = _temp_sibling(path)
    try:
        yield tmp
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


@contextmanager
def atomic_dir(path):
    """Yield a temporary folder; it replaces the folder ``path`` only if the block succeeds."""
    path = Path(path)
    tmp = _temp_sibling(path)
    try:
        yield tmp
        if path.exists():
            shutil.rmtree(path)
        os.replace(tmp, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
