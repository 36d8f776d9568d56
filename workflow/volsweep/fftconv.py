"""Memory-bounded FFT convolution (NumPy or CuPy), a drop-in for ``scipy.signal.fftconvolve``.

Two paths, chosen from a cost model of the bytes this call allocates:

* **whole**: both inputs zero-padded to one fast FFT shape, transformed (``rfftn``
  when both are real), multiplied in place and transformed back in place.  The
  padded shape is only as large as the requested ``mode`` needs: a circular
  convolution of length ``N`` is exact on the output indices ``[s, s + m)`` when
  ``N >= max(L - s, s + m)`` (``L`` the full length), so ``valid`` needs only
  the larger input's shape and ``same`` about ``n1 + n2 / 2``, not ``n1 + n2 - 1``.
  At most two padded buffers (counted in the complex work type) are alive at
  once, whatever the inputs.
* **blocked** (overlap-save), when ``memory_limit`` is below the whole path's
  cost: the output is split by :func:`volsweep.tiling.iter_tiles` (the tiles of
  :func:`~volsweep.tiling.plan_tiles`, made one at a time) into cores,
  each core's input block (core grown by the kernel's extent minus one *before*
  it, an asymmetric halo) is read with :func:`volsweep.tiling.read_block` in
  ``constant`` mode, and the core size comes from
  :func:`volsweep.tiling.tile_shape_for_budget` -- the same chunk plan as the
  sweep engine's spatial tiling.
"""

from __future__ import annotations

import math
import numbers
import operator

import numpy as np

from .backend import get_array_module, is_cupy_array
from .tiling import fast_shape, iter_tiles, next_fast_len, read_block, tile_shape_for_budget

__all__ = ["fftconvolve", "MemoryLimitError", "estimate_peak_bytes"]

MODES = ("full", "same", "valid")
_WORK_DTYPES = (np.float32, np.float64, np.complex64, np.complex128)
# Bytes for the plan, index arrays and Python objects of the blocked path.
_SLACK_BYTES = 64 * 1024
# Bytes of small arrays and Python objects of the one-shot path.
_SLACK_WHOLE = 16 * 1024


class MemoryLimitError(ValueError, MemoryError):
    """``memory_limit`` cannot hold the output plus one block of the smallest size."""


# --------------------------------------------------------------------------- backend


class _Fft:
    """In-place-where-possible FFTs of one backend (scipy.fft or cupyx.scipy.fft)."""

    def __init__(self, xp):
        self.is_numpy = xp is np
        if self.is_numpy:
            import scipy.fft as mod
        else:
            import cupyx.scipy.fft as mod
        self.mod = mod

    def fftn(self, x, axes):
        return self.mod.fftn(x, axes=axes, overwrite_x=True)

    def ifftn(self, x, axes):
        return self.mod.ifftn(x, axes=axes, overwrite_x=True)

    def rfftn(self, x, axes):
        return self.mod.rfftn(x, axes=axes, overwrite_x=True)

    def irfftn(self, x, n_last, axes):
        if self.is_numpy and len(axes) > 1:
            # pocketfft's n-D c2r allocates a hidden copy of the half spectrum
            # (invisible to tracemalloc); the c2c part in place, then 1-D c2r, does not.
            x = self.mod.ifftn(x, axes=axes[:-1], overwrite_x=True)
            return self.mod.irfft(x, n=n_last, axis=axes[-1], overwrite_x=True)
        s = [x.shape[a] for a in axes[:-1]] + [n_last]
        return self.mod.irfftn(x, s=s, axes=axes, overwrite_x=True)


# --------------------------------------------------------------------------- checks


def _check_mode(mode):
    if not isinstance(mode, str) or mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got mode={mode!r}")


def _check_axes(axes, ndim):
    if axes is None:
        return list(range(ndim))
    if isinstance(axes, numbers.Integral) and not isinstance(axes, bool):
        axes = [axes]
    try:
        axes = [operator.index(a) for a in axes]
    except TypeError:
        raise TypeError(f"axes must be None, an int or a sequence of ints, got axes={axes!r}") from None
    if not axes:
        raise ValueError(f"axes must not be empty, got axes={axes!r}")
    norm = []
    for a in axes:
        if not -ndim <= a < ndim:
            raise ValueError(f"axes entries must lie in [-{ndim}, {ndim}) for {ndim}-D inputs, "
                             f"got axes={axes!r}")
        norm.append(a % ndim)
    if len(set(norm)) != len(norm):
        raise ValueError(f"axes must not repeat an axis, got axes={axes!r}")
    return norm


def _check_memory_limit(memory_limit):
    if memory_limit is None:
        return None
    if isinstance(memory_limit, bool) or not isinstance(memory_limit, numbers.Real):
        raise TypeError(f"memory_limit must be a number of bytes or None, got "
                        f"memory_limit={memory_limit!r}")
    if not memory_limit > 0 or not math.isfinite(memory_limit):
        raise ValueError(f"memory_limit must be a positive finite number of bytes, got "
                         f"memory_limit={memory_limit!r}")
    return float(memory_limit)


def _work_dtype(dt1, dt2, dtype):
    """(real work dtype, output dtype) from the inputs' dtypes and ``dtype``."""
    for name, dt in (("in1", dt1), ("in2", dt2)):
        if dt.kind not in "biufc":
            raise TypeError(f"{name} must hold numbers, got {name}.dtype={dt}")
    complex_in = dt1.kind == "c" or dt2.kind == "c"
    if dtype is None:
        res = np.result_type(dt1, dt2)
        if res.kind in "biu":
            res = np.dtype(np.float64)
        elif res == np.float16:
            res = np.dtype(np.float32)
        if res not in [np.dtype(t) for t in _WORK_DTYPES]:
            raise TypeError(f"unsupported input precision {res}: in1.dtype={dt1}, in2.dtype={dt2}"
                            f" (pass dtype= one of float32, float64, complex64, complex128)")
    else:
        try:
            res = np.dtype(dtype)
        except TypeError:
            raise TypeError(f"dtype must be a NumPy dtype, got dtype={dtype!r}") from None
        if res not in [np.dtype(t) for t in _WORK_DTYPES]:
            raise TypeError("dtype must be one of float32, float64, complex64, complex128, "
                            f"got dtype={dtype!r}")
        if complex_in and res.kind != "c":
            raise TypeError(f"dtype={res} is real but the inputs are complex "
                            f"(in1.dtype={dt1}, in2.dtype={dt2})")
    real = np.dtype(np.float32) if res in (np.float32, np.complex64) else np.dtype(np.float64)
    return real, res


# --------------------------------------------------------------------------- geometry


class _Geometry:
    """Per-axis extents of one call, in scipy's semantics.

    Full-output coordinates equal input coordinates: the full convolution's
    index ``n`` gathers ``in1[n - k] * in2[k]``.  The requested mode keeps
    ``[start, start + length)`` of the full output on every axis.
    """

    def __init__(self, s1, s2, axes, mode):
        ndim = len(s1)
        # Axes where either input has length 1 need no FFT: broadcasting does it (as scipy).
        self.conv = [a for a in axes if s1[a] != 1 and s2[a] != 1]
        for a in range(ndim):
            if a not in self.conv and not (s1[a] == s2[a] or s1[a] == 1 or s2[a] == 1):
                raise ValueError(f"incompatible shapes for in1 and in2: in1.shape={tuple(s1)}, "
                                 f"in2.shape={tuple(s2)} (axis {a} is not convolved and does "
                                 "not broadcast)")
        if mode == "valid":
            ok1 = all(s1[a] >= s2[a] for a in self.conv)
            ok2 = all(s2[a] >= s1[a] for a in self.conv)
            if not (ok1 or ok2):
                raise ValueError("mode='valid' needs one input at least as large as the other "
                                 f"on every convolved axis, got in1.shape={tuple(s1)}, "
                                 f"in2.shape={tuple(s2)}")
        self.full, self.start, self.length = [], [], []
        for a in range(ndim):
            full = s1[a] + s2[a] - 1 if a in self.conv else max(s1[a], s2[a])
            if mode == "full":
                length = full
            elif mode == "same":
                length = s1[a]
            else:
                length = abs(s1[a] - s2[a]) + 1 if a in self.conv else full
            self.full.append(full)
            self.start.append((full - length) // 2)  # scipy's _centered
            self.length.append(length)
        # Broadcast extent on the axes that are not convolved.
        self.bcast = [max(s1[a], s2[a]) for a in range(ndim)]

    def whole_fft_len(self, a, s1, s2):
        """Shortest fast length whose circular convolution is exact on the kept range."""
        f, s, m = self.full[a], self.start[a], self.length[a]
        return next_fast_len(max(f - s, s + m, s1[a], s2[a]))


# --------------------------------------------------------------------------- cost model


def _half(shape, last_axis):
    shape = list(shape)
    shape[last_axis] = shape[last_axis] // 2 + 1
    return math.prod(shape)


def _whole_shapes(geo, s1, s2):
    buf_a = [geo.whole_fft_len(a, s1, s2) if a in geo.conv else geo.bcast[a]
             for a in range(len(s1))]
    buf_b = [geo.whole_fft_len(a, s1, s2) if a in geo.conv else s2[a] for a in range(len(s1))]
    return buf_a, buf_b


def _whole_cost(geo, s1, s2, real_dt, out_dt, real_path, gpu):
    """Peak bytes the whole path allocates (inputs not counted)."""
    r = real_dt.itemsize
    c = 2 * r
    out = math.prod(geo.length) * out_dt.itemsize
    buf_a, buf_b = _whole_shapes(geo, s1, s2)
    na, nb = math.prod(buf_a), math.prod(buf_b)
    ws = na * c if gpu else 0  # cuFFT work area, at most about one buffer
    if real_path:
        last = geo.conv[-1]
        ha, hb = _half(buf_a, last) * c, _half(buf_b, last) * c
        return max(na * r + ha, ha + nb * r + hb, ha + na * r, na * r + out) + ws
    return max(na * c + nb * c, na * c + out) + ws


def _block_cost(nfast, geo, sig_shape, ker_shape, src_item, real_dt, real_path, gpu):
    """Peak bytes of the blocked path's working set for one fast block shape (output excluded)."""
    r = real_dt.itemsize
    c = 2 * r
    ndim = len(geo.full)
    conv_index = {a: i for i, a in enumerate(geo.conv)}
    buf = [nfast[conv_index[a]] if a in conv_index else geo.bcast[a] for a in range(ndim)]
    kbuf = [nfast[conv_index[a]] if a in conv_index else ker_shape[a] for a in range(ndim)]
    blk = math.prod(nfast) * math.prod(sig_shape[a] for a in range(ndim) if a not in conv_index)
    blk *= src_item
    nb, nk = math.prod(buf), math.prod(kbuf)
    ws = nb * c if gpu else 0
    if real_path:
        last = geo.conv[-1]
        return _half(kbuf, last) * c + _half(buf, last) * c + nb * r + blk + ws
    return nk * c + nb * c + blk + ws


def estimate_peak_bytes(in1, in2, mode="full", *, axes=None, memory_limit=None, dtype=None):
    """Bytes that :func:`fftconvolve` plans to allocate for these inputs (not counting them).

    Returns ``(path, bytes)`` with ``path`` ``"whole"`` or ``"blocked"``; the
    arrays are only inspected for shape and dtype.

    Examples
    --------
    >>> import numpy as np
    >>> estimate_peak_bytes(np.ones(100), np.ones(9))
    ('whole', 19008)
    """
    plan = _plan(in1, in2, mode, axes, memory_limit, dtype)
    return plan["path"], plan["cost"]


# --------------------------------------------------------------------------- planning


def _plan(in1, in2, mode, axes, memory_limit, dtype):
    _check_mode(mode)
    for name, x in (("in1", in1), ("in2", in2)):
        if not hasattr(x, "shape") or not hasattr(x, "dtype"):
            raise TypeError(f"{name} must be an array, got {name} of type {type(x).__name__}")
    s1, s2 = tuple(in1.shape), tuple(in2.shape)
    if len(s1) != len(s2):
        raise ValueError(f"in1 and in2 must have the same number of dimensions, got "
                         f"in1.ndim={len(s1)}, in2.ndim={len(s2)}")
    if len(s1) == 0:
        raise ValueError("in1 and in2 must have at least one dimension, got 0-D inputs")
    for name, s in (("in1", s1), ("in2", s2)):
        if math.prod(s) == 0:
            raise ValueError(f"{name} must not be empty, got {name}.shape={s}")
    ax = _check_axes(axes, len(s1))
    limit = _check_memory_limit(memory_limit)
    real_dt, out_dt = _work_dtype(np.dtype(in1.dtype), np.dtype(in2.dtype), dtype)
    geo = _Geometry(s1, s2, ax, mode)
    real_path = in1.dtype.kind != "c" and in2.dtype.kind != "c"
    gpu = is_cupy_array(in1) or is_cupy_array(in2)
    plan = dict(geo=geo, s1=s1, s2=s2, real_dt=real_dt, out_dt=out_dt, real_path=real_path,
                limit=limit, gpu=gpu)
    out_bytes = math.prod(geo.length) * out_dt.itemsize
    if not geo.conv:  # every axis broadcasts: a plain product, then the mode's slice
        cost = math.prod(geo.bcast) * out_dt.itemsize + out_bytes + _SLACK_WHOLE
        if limit is not None and cost > limit:
            raise MemoryLimitError(f"memory_limit={memory_limit!r} bytes is too small for the "
                                   f"broadcast product of in1.shape={s1} and in2.shape={s2} "
                                   f"({cost} bytes)")
        plan.update(path="whole", cost=cost)
        return plan
    whole = _whole_cost(geo, s1, s2, real_dt, out_dt, real_path, gpu)
    whole += _SLACK_WHOLE
    if limit is None or whole <= limit:
        plan.update(path="whole", cost=whole)
        return plan

    # Blocked: the larger input (over the convolved axes) is the signal, the other the kernel.
    swap = math.prod(s2[a] for a in geo.conv) > math.prod(s1[a] for a in geo.conv)
    sig_shape, ker_shape = (s2, s1) if swap else (s1, s2)
    src_item = np.dtype((in2 if swap else in1).dtype).itemsize
    sub_shape = [geo.length[a] for a in geo.conv]
    halo = [(ker_shape[a] - 1, 0) for a in geo.conv]
    budget = limit - out_bytes - _SLACK_BYTES

    def cost(core):
        return _block_cost(fast_shape(core, halo), geo, sig_shape, ker_shape, src_item,
                           real_dt, real_path, gpu)

    smallest = cost([1] * len(sub_shape))
    if budget < smallest:
        raise MemoryLimitError(
            f"memory_limit={memory_limit!r} bytes is too small: the output alone takes "
            f"{out_bytes} bytes and the smallest block {smallest + _SLACK_BYTES} more "
            f"(at least {out_bytes + smallest + _SLACK_BYTES} bytes in all)")
    # tile_shape_for_budget prices a block as prod(fast shape) * bytes_per_voxel; find the
    # bytes per padded voxel that makes its price an upper bound of the exact cost.
    ratio = max(cost(sub_shape) / math.prod(fast_shape(sub_shape, halo)), 1e-9)
    for _ in range(20):
        try:
            core = tile_shape_for_budget(sub_shape, halo, ratio, budget)
        except MemoryError:
            core = [1] * len(sub_shape)
        exact = cost(core)
        if exact <= budget:
            break
        ratio *= exact / budget * 1.0001
    else:  # pragma: no cover - the loop converges in a few steps
        core = [1] * len(sub_shape)
        exact = cost(core)
    plan.update(path="blocked", cost=exact + out_bytes + _SLACK_BYTES, swap=swap,
                core=tuple(core), halo=halo, nfast=fast_shape(core, halo))
    return plan


# --------------------------------------------------------------------------- execution


def _padded(xp, x, shape, dtype, conv):
    """``x`` zero-padded on the axes in ``conv``, broadcast on the others."""
    buf = xp.zeros(tuple(shape), dtype=dtype)
    buf[tuple(slice(0, n) if ax in conv else slice(None) for ax, n in enumerate(x.shape))] = x
    return buf


def _whole(xp, fft, a, b, plan):
    geo = plan["geo"]
    conv = geo.conv
    buf_a, buf_b = _whole_shapes(geo, plan["s1"], plan["s2"])
    keep = tuple(slice(s, s + m) for s, m in zip(geo.start, geo.length))
    if plan["real_path"]:
        last = conv[-1]
        rdt = plan["real_dt"]
        pa = _padded(xp, a, buf_a, rdt, conv)
        spec = fft.rfftn(pa, conv)
        del pa
        pb = _padded(xp, b, buf_b, rdt, conv)
        spec_b = fft.rfftn(pb, conv)
        del pb
        spec *= spec_b
        del spec_b
        res = fft.irfftn(spec, buf_a[last], conv)
        del spec
    else:
        cdt = np.result_type(plan["real_dt"], np.complex64)
        res = fft.fftn(_padded(xp, a, buf_a, cdt, conv), conv)
        spec_b = fft.fftn(_padded(xp, b, buf_b, cdt, conv), conv)
        res *= spec_b
        del spec_b
        res = fft.ifftn(res, conv)
    out = res[keep]
    if out.shape == res.shape and out.dtype == plan["out_dt"]:
        return xp.ascontiguousarray(out)
    out = xp.array(out, dtype=plan["out_dt"], copy=True)
    return out


def _blocked(xp, fft, a, b, plan):
    geo = plan["geo"]
    conv = geo.conv
    ndim = len(geo.full)
    sig, ker = (b, a) if plan["swap"] else (a, b)
    nfast = plan["nfast"]
    ci = {ax: i for i, ax in enumerate(conv)}
    buf_shape = [nfast[ci[ax]] if ax in ci else geo.bcast[ax] for ax in range(ndim)]
    kbuf_shape = [nfast[ci[ax]] if ax in ci else ker.shape[ax] for ax in range(ndim)]
    real_path = plan["real_path"]
    rdt = plan["real_dt"]
    cdt = np.result_type(rdt, np.complex64)
    last = conv[-1]

    if real_path:
        kspec = fft.rfftn(_padded(xp, ker, kbuf_shape, rdt, conv), conv)
    else:
        kspec = fft.fftn(_padded(xp, ker, kbuf_shape, cdt, conv), conv)
    out = xp.empty(tuple(geo.length), dtype=plan["out_dt"])

    sub_shape = [geo.length[ax] for ax in conv]
    # iter_tiles: plan_tiles' tiles one at a time (a list of many tiles costs memory too).
    for tile in iter_tiles(sub_shape, plan["core"], plan["halo"]):
        start, stop = [], []
        for ax in range(ndim):
            if ax in ci:  # output coordinates -> signal (= full-output) coordinates
                start.append(tile.start[ci[ax]] + geo.start[ax])
                stop.append(tile.stop[ci[ax]] + geo.start[ax])
            else:
                start.append(0)
                stop.append(sig.shape[ax])
        blk = read_block(sig, start, stop, mode="constant", xp=xp)
        if real_path:
            buf = _padded(xp, blk, buf_shape, rdt, conv)
            del blk
            spec = fft.rfftn(buf, conv)
            del buf
            spec *= kspec
            res = fft.irfftn(spec, buf_shape[last], conv)
            del spec
        else:
            res = _padded(xp, blk, buf_shape, cdt, conv)
            del blk
            res = fft.fftn(res, conv)
            res *= kspec
            res = fft.ifftn(res, conv)
        src = tuple(tile.core_in_block[ci[ax]] if ax in ci
                    else slice(geo.start[ax], geo.start[ax] + geo.length[ax]) for ax in range(ndim))
        dst = tuple(tile.core[ci[ax]] if ax in ci else slice(None) for ax in range(ndim))
        out[dst] = res[src]
        del res
    return out


def fftconvolve(in1, in2, mode="full", *, axes=None, memory_limit=None, dtype=None):
    """Convolve two N-D arrays with FFTs, within a memory budget.

    Same results as :func:`scipy.signal.fftconvolve` (within the precision's
    rounding), on NumPy arrays through ``scipy.fft`` or on CuPy arrays through
    ``cupyx.scipy.fft``; the backend follows the arrays' type.

    Parameters
    ----------
    in1, in2 : ndarray (NumPy or CuPy)
        Inputs of the same number of dimensions, real or complex.  When either
        is a CuPy array the other is moved to the GPU.
    mode : {'full', 'same', 'valid'}, optional
        Output extent, as in scipy: ``'full'`` the whole linear convolution,
        ``'same'`` centred on ``in1``, ``'valid'`` only the points that need
        no zero padding (either input may be the larger one).
    axes : int or sequence of int, optional
        Axes to convolve over (default all).  Other axes must be equal or 1
        and broadcast, as in scipy.
    memory_limit : int or float, optional
        Bytes this call may allocate, the returned array included and the
        inputs not.  When the one-shot transform needs more, the output is
        computed in overlap-save blocks sized to fit.  ``None`` (default)
        means one shot, which never needs more than two padded buffers.
    dtype : {None, float32, float64, complex64, complex128}, optional
        Precision of the work and of the result.  Default: the inputs'
        (integers as float64).  ``complex64`` halves the memory of complex
        inputs; a real ``dtype`` with complex inputs is an error.

    Returns
    -------
    out : ndarray
        Same array type as the inputs; real when both inputs are real and
        ``dtype`` is not complex.

    Raises
    ------
    ValueError
        Unknown ``mode``, inputs of different ``ndim`` or empty, bad ``axes``,
        ``'valid'`` with neither input dominating, ``memory_limit <= 0``.
    MemoryLimitError
        (a ``ValueError`` and ``MemoryError``) when ``memory_limit`` cannot
        hold the output plus the smallest block.
    TypeError
        Non-numeric inputs, an unsupported or real-for-complex ``dtype``, a
        non-numeric ``memory_limit``.

    See Also
    --------
    scipy.signal.fftconvolve, volsweep.tiling.plan_tiles

    Examples
    --------
    >>> import numpy as np
    >>> from volsweep import fftconvolve
    >>> out = fftconvolve(np.array([1.0, 2.0, 3.0]), np.array([0.0, 1.0, 0.5]))
    >>> out.shape, bool(np.allclose(out, [0.0, 1.0, 2.5, 4.0, 1.5]))
    ((5,), True)
    >>> rng = np.random.default_rng(0)
    >>> vol, ker = rng.random((40, 30, 20)), rng.random((7, 5, 3))
    >>> small = fftconvolve(vol, ker, "same", memory_limit=1_000_000)
    >>> bool(np.allclose(small, fftconvolve(vol, ker, "same")))
    True
    """
    _check_mode(mode)
    xp = get_array_module(in1) if is_cupy_array(in1) else get_array_module(in2)
    a = xp.asarray(in1)
    b = xp.asarray(in2)
    plan = _plan(a, b, mode, axes, memory_limit, dtype)
    geo = plan["geo"]
    if not geo.conv:  # only broadcasting axes: a plain product
        prod = a.astype(plan["out_dt"], copy=False) * b.astype(plan["out_dt"], copy=False)
        keep = tuple(slice(s, s + m) for s, m in zip(geo.start, geo.length))
        return xp.ascontiguousarray(prod[keep])
    fft = _Fft(xp)
    if plan["path"] == "whole":
        return _whole(xp, fft, a, b, plan)
    return _blocked(xp, fft, a, b, plan)
