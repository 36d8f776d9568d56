"""volsweep: oriented-wavelet sweeps and exact local thickness of 3D volumes.

The public functions are imported lazily so that ``import volsweep`` stays
light (no Zarr, dask or CuPy until they are needed).
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_EXPORTS = {
    "sweep": "volsweep.engine",
    "local_thickness": "volsweep.thickness",
    "thickness_distribution": "volsweep.thickness",
    "fftconvolve": "volsweep.fftconv",
    "synthetic_volume": "volsweep.synthetic",
}

__all__ = sorted(_EXPORTS) + ["__version__"]


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module 'volsweep' has no attribute {name!r}")
