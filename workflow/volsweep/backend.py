"""Array backend selection: NumPy on the CPU, CuPy on a CUDA GPU.

The backend follows the array's type and an explicit ``device`` of
``"auto" | "cpu" | "cuda"``; nothing else threads a GPU flag through the code.
"""

from __future__ import annotations

import functools
import os
import types

import numpy as np

DEVICES = ("auto", "cpu", "cuda")


def cpu_threads() -> int:
    """Threads for CPU kernels: the CPUs this process may run on."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # pragma: no cover - not Linux
        return max(1, os.cpu_count() or 1)


@functools.cache
def _cupy():
    try:
        import cupy
    except Exception:  # ImportError, or a CUDA library that fails to load
        return None
    return cupy


@functools.cache
def cuda_available() -> bool:
    """True when CuPy imports and sees at least one CUDA device."""
    cp = _cupy()
    if cp is None:
        return False
    try:
        return cp.cuda.runtime.getDeviceCount() > 0
    except Exception:
        return False


def is_cupy_array(x) -> bool:
    cp = _cupy()
    return cp is not None and isinstance(x, cp.ndarray)


def get_array_module(x) -> types.ModuleType:
    """``cupy`` for a CuPy array, ``numpy`` otherwise."""
    return _cupy() if is_cupy_array(x) else np


def resolve_device(device: str = "auto", array=None) -> str:
    """Return ``"cpu"`` or ``"cuda"`` for a requested device.

    ``"auto"`` picks the array's device when an array is given, else CUDA when
    available.  Asking for ``"cuda"`` without a GPU is an error, never a
    silent fallback.

    Examples
    --------
    >>> resolve_device("cpu")
    'cpu'
    """
    if device not in DEVICES:
        raise ValueError(f"device must be one of {DEVICES}, got device={device!r}")
    if device == "auto":
        if array is not None and is_cupy_array(array):
            return "cuda"
        if array is not None:
            return "cpu"
        return "cuda" if cuda_available() else "cpu"
    if device == "cuda" and not cuda_available():
        raise RuntimeError("device='cuda' was requested but no CUDA GPU with CuPy is available")
    return device


def xp_for(device: str) -> types.ModuleType:
    """The array module of a resolved device."""
    return _cupy() if device == "cuda" else np


def to_device(x, device: str):
    """Move an array to ``device`` (``"cpu"`` or ``"cuda"``), without copying when it is there."""
    if device == "cuda":
        return _cupy().asarray(x)
    return to_numpy(x)


def to_numpy(x) -> np.ndarray:
    """A NumPy array of ``x``, copying from the GPU when needed."""
    if is_cupy_array(x):
        return x.get()
    return np.asarray(x)


def copy_to_host(src, dst) -> None:
    """``dst[...] = src``, straight from the GPU into ``dst`` when it is contiguous.

    Examples
    --------
    >>> dst = np.zeros(3)
    >>> copy_to_host(np.arange(3.0), dst); dst
    array([0., 1., 2.])
    """
    if is_cupy_array(src) and dst.flags.c_contiguous and dst.dtype == src.dtype:
        src.get(out=dst)
    else:
        dst[...] = to_numpy(src)


def when_done(fn, arrays):
    """``fn`` for another thread: on a GPU, it first waits for the work queued so far on the
    current stream, then runs on ``arrays``' device and a stream of its own, so that its
    copies and kernels overlap the work queued after.  On the CPU, ``fn`` itself.

    Examples
    --------
    >>> when_done(lambda: 7, [np.zeros(2)])()
    7
    """
    if not any(is_cupy_array(a) for a in arrays):
        return fn
    cp = _cupy()
    device = next(a.device for a in arrays if is_cupy_array(a))
    done = cp.cuda.Event(disable_timing=True)
    done.record()

    def run():
        done.synchronize()
        with device, cp.cuda.Stream(non_blocking=True) as stream:
            try:
                return fn()
            finally:
                stream.synchronize()

    return run


def device_name(device: str) -> str:
    """A human-readable name of the resolved device, for provenance attrs."""
    if device == "cuda":
        cp = _cupy()
        dev = cp.cuda.Device()
        props = cp.cuda.runtime.getDeviceProperties(dev.id)
        name = props["name"]
        return f"cuda:{dev.id} {name.decode() if isinstance(name, bytes) else name}"
    import platform

    return f"cpu {platform.processor() or platform.machine()}"
