"""Shared test set-up: GPU tests skip cleanly where there is no CUDA GPU."""

import pytest

from volsweep.backend import cuda_available


def pytest_collection_modifyitems(config, items):
    if cuda_available():
        return
    skip = pytest.mark.skip(reason="no CUDA GPU with CuPy on this machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def pytest_configure(config):
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).parent))  # tests_data and the oracles


@pytest.fixture
def far_pruning_of_small_solids(monkeypatch):
    """Far pruning from radius 8 on: the test solids are a few tens of voxels across, most
    of their radii below the default ``FAR_MIN_RADIUS``."""
    from volsweep.thickness import _tables

    monkeypatch.setattr(_tables, "FAR_MIN_RADIUS", 8)
