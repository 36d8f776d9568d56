"""Numba kernels of the CPU sweep engine (compiled once, cached on disk).

Per kernel the engine needs, over the rfft half spectrum ``(nx, ny, nz//2+1)``, the
sampled spectrum (the aliased sum of :mod:`volsweep.engine.wavelet`), multiplied into the
image spectrum, then statistics of the inverse FFT over the core voxels.

Speed (a 2-core CPU is the target machine; figures in docs/benchmarks/sweep.md):

* The spectrum is computed one rfft row ``(kx, ky, ·)`` at a time.  Pruning is exact
  (terms with ``p = ωᵀMω ≥ p_cut`` are dropped): the images of x are bounded by
  ``p_cut·(M⁻¹)_xx``, and for each (x, y) image pair ``p`` is a quadratic in ω_z, so
  the kz where an image of z matters form one interval.  The loop over that interval
  runs in whole blocks of ``LANES`` frequencies with unsigned indices and no branch,
  so LLVM vectorises it at full width: float32 throughout and a polynomial ``exp``
  (:func:`fexp`, Cephes' ``exp2f`` polynomial, 14 vector ops) because this numba has
  no SVML.  No array views inside the loops (each costs NRT refcount calls).
* ξ = 1 (isotropic) is separable: three 1D tables per axis and ~5 flops a point.
* The multiply writes the product into a preallocated complex64 buffer (viewed as
  float32 pairs), which ``scipy.fft.irfftn(..., overwrite_x=True)`` consumes.
* Statistics are one pass: float64 partials per x-plane of the core (max/min through
  ``llvm.maxnum``/``minnum`` so that they vectorise), merged in plane order, so the
  results are bit-identical run to run and for any number of threads (the split is
  by plane, not by thread).
* Parallelism: ``nogil`` kernels over ranges of x-planes, run by a small Python
  thread pool (idle threads sleep).  numba's own threading layers are avoided: the
  GNU OpenMP one spins between launches and, on a loaded 2-core machine or next to
  scipy.fft's workers, made a 0.6 ms statistics pass take 10 ms.
* Where the CPU has AVX-512, the kernels are compiled with 16-lane vectors and no
  interleave (LLVM prefers 256-bit vectors on Intel cores): spectra ~1.4–1.8× faster,
  measured.  The option is set only around these compilations (:func:`_compile_all`).
"""

from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor

import numba as nb
import numpy as np
from llvmlite import ir
from numba.extending import intrinsic

from . import _plan
from ._plan import A2, C, DWX, DWY, DWZ, GX, GY, GZ, NP, PCUT, PERX, PERY, PERZ, SCALE, UX, UY, UZ
from .stats import Partial
from volsweep.backend import cpu_threads
from volsweep.tiling import read_block

_F = np.float32
_I = np.int32
_LOG2E = _F(1.44269504088896341)
_HALF = _F(0.5)
_ONE = _F(1.0)
_ZERO = _F(0.0)
_YMIN = _F(-126.0)
_Q0 = _F(1.535336188319500e-4)
_Q1 = _F(1.339887440266574e-3)
_Q2 = _F(9.618437357674640e-3)
_Q3 = _F(5.550332471162809e-2)
_Q4 = _F(2.402264791363012e-1)
_Q5 = _F(6.931472028550421e-1)
_BIAS = _I(127)
#: Frequencies per vector block of :func:`spectrum_row` (16 float32 = one AVX-512 register).
LANES = 16
_SHIFT = _I(23)


def _binary_intrinsic(name):
    def impl(typingctx, a, b):
        def codegen(context, builder, signature, args):
            lt = context.get_value_type(signature.return_type)
            fn = builder.module.declare_intrinsic(name, [lt], ir.FunctionType(lt, [lt, lt]))
            return builder.call(fn, args)

        return a(a, b), codegen

    return intrinsic(impl)


#: ``llvm.maxnum``/``llvm.minnum``: unlike Python's max/min (a NaN branch) these
#: vectorise as reductions.  Inputs are finite (checked by the engine).
fmax = _binary_intrinsic("llvm.maxnum")
fmin = _binary_intrinsic("llvm.minnum")


@nb.njit(fastmath=True, cache=True, nogil=True)
def fexp(x):
    """exp(x) for float32 ``x ≤ 0`` (clamped below near −87), vectorisable: no branch, no call.

    ``2^y`` with ``y = x·log₂e``: ``2^{y−n}`` by Cephes' ``exp2f`` polynomial on
    [−½, ½], ``2^n`` through the exponent bits (14 vector ops).  Relative error
    ≤ 3e-7 for |x| ≤ 5, growing to ~2e-6 at x = −87 (the rounding of y; such terms are
    below 1e-30 of the peak).
    """
    y = max(x * _LOG2E, _YMIN)
    n = np.rint(y)
    f = y - n
    p = ((((_Q0 * f + _Q1) * f + _Q2) * f + _Q3) * f + _Q4) * f + _Q5
    p = p * f + _ONE
    e = _I(_I(n) + _BIAS) << _SHIFT
    return p * _I(e).view(np.float32)


@nb.njit(fastmath=True, cache=True, nogil=True)
def spectrum_row(fx, fy, nzh, P, acc, WZ):
    """``acc[kz] = Σ_g p·exp(−p/2)`` along the rfft row at signed indices (fx, fy), unscaled.

    ``P`` is one float32 row of :func:`volsweep.engine._plan.kernel_table`; ``acc`` is
    float32 of a length ``≥ nzh`` that is a multiple of ``LANES`` (entries past ``nzh``
    are scratch); ``WZ[iz + gz, kz]`` holds ω_z of image ``iz`` (same length,
    :func:`z_table`).  ξ = 1 has a faster, separable path (:func:`sep_table`).

    Pruning is exact: a term is needed only where ``p < p_cut``.  For fixed (ω_x, ω_y),
    p is a quadratic in ω_z, so that is one interval of kz per image of z.  Work is done
    in whole blocks of ``LANES`` frequencies, so that every term is a full-width vector
    operation (a segment of ~50 frequencies would otherwise run mostly in the scalar
    remainder loop); the few terms computed beyond the interval are below ``ALIAS_TOL``
    and only make the sum more complete.
    """
    w0x = fx * P[DWX]
    w0y = fy * P[DWY]
    dwz = np.float64(P[DWZ])
    perx, pery, perz = P[PERX], P[PERY], P[PERZ]
    ux, uy, uz, a2, c, pcut = P[UX], P[UY], P[UZ], P[A2], P[C], P[PCUT]
    gx, gy, gz = int(P[GX]), int(P[GY]), int(P[GZ])
    # p = ωᵀMω, M = a²I + c·uuᵀ: min over (ω_y, ω_z) at fixed ω_x is ω_x² / (M⁻¹)_xx.
    a2d, cd, uzd = np.float64(a2), np.float64(c), np.float64(uz)
    mxx = (1.0 - cd * np.float64(ux) ** 2 / (a2d + cd)) / a2d
    xlim = np.float64(pcut) * mxx
    alpha = a2d + cd * uzd * uzd  # p = alpha·ω_z² + 2·beta·ω_z + gamma
    inv_alpha = 1.0 / alpha
    inv_dwz = 1.0 / dwz  # (divisions in the loops below cost ~1 ms per 128³ spectrum)
    npad = acc.shape[0]
    for k in range(npad):
        acc[k] = _ZERO
    for ix in range(-gx, gx + 1):
        wx = w0x + _F(ix) * perx
        bx = wx * wx
        if np.float64(bx) >= xlim:
            continue
        for iy in range(-gy, gy + 1):
            wy = w0y + _F(iy) * pery
            bxy = bx + wy * wy
            txy = ux * wx + uy * wy
            tdd = np.float64(txy)
            beta = cd * tdd * uzd
            gamma = a2d * np.float64(bxy) + cd * tdd * tdd
            disc = beta * beta - alpha * (gamma - np.float64(pcut))
            if disc <= 0.0:
                continue
            wc = -beta * inv_alpha
            h = np.sqrt(disc) * inv_alpha
            for iz in range(-gz, gz + 1):
                off = np.float64(iz) * np.float64(perz)
                lo = np.ceil((wc - h - off) * inv_dwz)
                hi = np.floor((wc + h - off) * inv_dwz)
                if hi < 0 or lo >= nzh or hi < lo:
                    continue
                # whole LANES blocks; unsigned indices (no negative-index fix-up) vectorise
                k0 = np.uint64(0 if lo < 0 else (int(lo) // LANES) * LANES)
                k1 = np.uint64(npad if hi >= nzh - 1 else (int(hi) // LANES + 1) * LANES)
                izi = iz + gz
                # (no array views in here: each would cost NRT refcount calls)
                for k in range(k0, k1):
                    wz = WZ[izi, k]
                    b = bxy + wz * wz
                    t = txy + uz * wz
                    p = a2 * b + c * (t * t)
                    acc[k] += p * fexp(-_HALF * p)


@nb.njit(fastmath=True, cache=True, nogil=True)
def z_table(nzh, P):
    """ω_z per image of z and kz, padded to whole LANES blocks."""
    gz = int(P[GZ])
    WZ = np.empty((2 * gz + 1, -(-nzh // LANES) * LANES), np.float32)
    for i in range(2 * gz + 1):
        off = _F(i - gz) * P[PERZ]
        for k in range(WZ.shape[1]):
            WZ[i, k] = _F(k) * P[DWZ] + off
    return WZ


@nb.njit(cache=True, nogil=True)
def sep_table(n, half, dw, per, g, a2):
    """ξ = 1 (isotropic) factors along one axis: ``S[k] = Σ_g e^{−a²ω²/2}``, ``T[k] = Σ_g a²ω² e^{−a²ω²/2}``.

    Then ``K̂ = (T_x S_y + S_x T_y) S_z + S_x S_y T_z`` (every image of the G box: more
    complete than the pruned sum, by terms below ``ALIAS_TOL``).  float64 sums.
    """
    m = n // 2 + 1 if half else n
    S = np.zeros(m)
    T = np.zeros(m)
    for k in range(m):
        f = k - n if (not half and k >= (n + 1) // 2) else k
        for i in range(-g, g + 1):
            w = f * dw + i * per
            q = a2 * w * w
            e = np.exp(-0.5 * q)
            S[k] += e
            T[k] += q * e
    return S, T


@nb.njit(fastmath=True, cache=True, nogil=True)
def _iso_row(SX, TX, SY, TY, SZ, TZ, kx, ky, nzh, acc):
    sxy = SX[kx] * SY[ky]
    txy = TX[kx] * SY[ky] + SX[kx] * TY[ky]
    for kz in range(nzh):
        acc[kz] = _F(txy * SZ[kz] + sxy * TZ[kz])


def _signed(k, n):
    return k - n if k >= (n + 1) // 2 else k


_signed = nb.njit(cache=True, nogil=True)(_signed)


@nb.njit(fastmath=True, cache=True, nogil=True)
def mul_rows(vr, outr, nx, ny, P, kx0, kx1):
    """``out = V̂ · K̂`` on the planes ``kx0 ≤ kx < kx1``; complex64 arrays viewed as float32 pairs."""
    nzh = vr.shape[2] // 2
    scale = P[SCALE]
    acc = np.empty(-(-nzh // LANES) * LANES, np.float32)
    WZ = z_table(nzh, P)
    iso = P[C] == _ZERO
    a2 = np.float64(P[A2])
    SX, TX = sep_table(nx, False, np.float64(P[DWX]), np.float64(P[PERX]), int(P[GX]), a2)
    SY, TY = sep_table(ny, False, np.float64(P[DWY]), np.float64(P[PERY]), int(P[GY]), a2)
    SZ, TZ = sep_table(2 * (nzh - 1), True, np.float64(P[DWZ]), np.float64(P[PERZ]), int(P[GZ]), a2)
    for kx in range(kx0, kx1):
        fx = _F(_signed(kx, nx))
        for ky in range(vr.shape[1]):
            if iso:
                _iso_row(SX, TX, SY, TY, SZ, TZ, kx, ky, nzh, acc)
            else:
                spectrum_row(fx, _F(_signed(ky, ny)), nzh, P, acc, WZ)
            for kz in range(nzh):  # no row views: each costs two NRT refcount calls
                k = acc[kz] * scale
                outr[kx, ky, 2 * kz] = vr[kx, ky, 2 * kz] * k
                outr[kx, ky, 2 * kz + 1] = vr[kx, ky, 2 * kz + 1] * k


@nb.njit(fastmath=True, cache=True, nogil=True)
def parseval_rows(pw, nx, ny, P, kx0, kx1, out):
    """``out[kx] = Σ_{ky,kz} pw · K̂²`` (float64, unscaled) on the planes ``kx0 ≤ kx < kx1``."""
    nzh = pw.shape[2]
    acc = np.empty(-(-nzh // LANES) * LANES, np.float32)
    WZ = z_table(nzh, P)
    iso = P[C] == _ZERO
    a2 = np.float64(P[A2])
    SX, TX = sep_table(nx, False, np.float64(P[DWX]), np.float64(P[PERX]), int(P[GX]), a2)
    SY, TY = sep_table(ny, False, np.float64(P[DWY]), np.float64(P[PERY]), int(P[GY]), a2)
    SZ, TZ = sep_table(2 * (nzh - 1), True, np.float64(P[DWZ]), np.float64(P[PERZ]), int(P[GZ]), a2)
    for kx in range(kx0, kx1):
        fx = _F(_signed(kx, nx))
        s = 0.0
        for ky in range(pw.shape[1]):
            if iso:
                _iso_row(SX, TX, SY, TY, SZ, TZ, kx, ky, nzh, acc)
            else:
                spectrum_row(fx, _F(_signed(ky, ny)), nzh, P, acc, WZ)
            r = 0.0
            for kz in range(nzh):
                r += np.float64(pw[kx, ky, kz] * (acc[kz] * acc[kz]))
            s += r
        out[kx] = s


@nb.njit(fastmath=True, cache=True, nogil=True)
def stats_planes(g, ox, oy, oz, cy, cz, x0, x1, out):
    """``out[x] = (Σ G, Σ G², max G, min G)`` over the core plane x (float64), ``x0 ≤ x < x1``."""
    for x in range(x0, x1):
        s = 0.0
        s2 = 0.0
        mx = _F(-np.inf)
        mn = _F(np.inf)
        for y in range(cy):
            rs = 0.0
            rs2 = 0.0
            # vectorised (unsigned z: no negative-index fix-up, no row view); the order
            # is fixed by the compiled code
            for z in range(np.uint64(oz), np.uint64(oz + cz)):
                v = g[ox + x, oy + y, z]
                dv = np.float64(v)
                rs += dv
                rs2 += dv * dv
                mx = fmax(mx, v)
                mn = fmin(mn, v)
            s += rs
            s2 += rs2
        out[x, 0] = s
        out[x, 1] = s2
        out[x, 2] = np.float64(mx)
        out[x, 3] = np.float64(mn)


@nb.njit(cache=True, nogil=True)
def omap_planes(g, ox, oy, oz, resp, arg, kid, x0, x1):
    """Running per-voxel max of the responses and the kernel that reached it (first wins ties)."""
    cy, cz = resp.shape[1], resp.shape[2]
    for x in range(x0, x1):
        for y in range(cy):
            for z in range(cz):
                v = g[ox + x, oy + y, oz + z]
                if v > resp[x, y, z]:
                    resp[x, y, z] = v
                    arg[x, y, z] = kid


# ----------------------------------------------------------------------------- driver
_LOCK = threading.Lock()
_READY = False
_POOL = None


def n_threads() -> int:
    """Threads for the kernels: the CPUs this process may run on."""
    return cpu_threads()


def _has_avx512() -> bool:
    import llvmlite.binding as ll

    try:
        return "+avx512f" in ll.get_host_cpu_features().flatten().split(",")
    except Exception:  # pragma: no cover - feature query unsupported
        return False


class _quiet_remarks:
    """Drop LLVM's 'remark: loop not vectorized' lines (forced width on loops that cannot be
    vectorised) from the process's stderr during a compilation; other output is passed on."""

    def __enter__(self):
        import sys
        import tempfile

        try:
            sys.stderr.flush()
            self._tmp = tempfile.TemporaryFile()
            self._saved = os.dup(2)
            os.dup2(self._tmp.fileno(), 2)
        except (OSError, ValueError, AttributeError):  # no real fd 2: leave stderr alone
            self._tmp = None
        return self

    def __exit__(self, *exc):
        import sys

        if self._tmp is None:
            return False
        os.dup2(self._saved, 2)
        os.close(self._saved)
        self._tmp.seek(0)
        text = self._tmp.read().decode(errors="replace")
        self._tmp.close()
        rest = "".join(l for l in text.splitlines(True) if not l.startswith("remark: "))
        if rest:
            sys.stderr.write(rest)
        return False


def _compile_all():
    """Compile (or load from numba's disk cache) every kernel for the engine's argument types.

    A cache miss compiles with 16-lane vectors where the CPU has AVX-512, an LLVM option
    set only for these compilations, under numba's compiler lock.
    """
    global _READY
    with _LOCK:
        if _READY:
            return
        import llvmlite.binding as ll
        from numba.core.compiler_lock import global_compiler_lock

        f32, i32 = np.float32, np.int32
        v = np.zeros((2, 2, 4), f32)
        P = np.ones(NP, f32)
        wide = _has_avx512()
        with global_compiler_lock, _quiet_remarks():
            if wide:
                ll.set_option("volsweep", "-force-vector-width=16")
                ll.set_option("volsweep", "-force-vector-interleave=1")
            try:
                mul_rows(v, v.copy(), 2, 2, P, 0, 0)
                parseval_rows(v, 2, 2, P, 0, 0, np.zeros(2))
                stats_planes(v, 0, 0, 0, 2, 4, 0, 0, np.zeros((2, 4)))
                omap_planes(v, 0, 0, 0, v.copy(), np.zeros((2, 2, 4), i32), 0, 0, 0)
            finally:
                if wide:
                    ll.set_option("volsweep", "-force-vector-width=0")
                    ll.set_option("volsweep", "-force-vector-interleave=0")
        _READY = True


_POOL_PID = None


def _pool():
    """The process's thread pool (made anew in a forked child: the parent's threads are gone)."""
    global _POOL, _POOL_PID
    if _POOL is None or _POOL_PID != os.getpid():
        _POOL = ThreadPoolExecutor(max_workers=n_threads(), thread_name_prefix="volsweep")
        _POOL_PID = os.getpid()
    return _POOL


def _chunks(n: int):
    """Plane ranges: a few per thread (idle threads steal the rest); fixed by ``n`` and the pool."""
    t = n_threads()
    k = min(n, 4 * t) if t > 1 else 1
    bounds = [round(i * n / k) for i in range(k + 1)]
    return [(bounds[i], bounds[i + 1]) for i in range(k) if bounds[i + 1] > bounds[i]]


def _run(fn, n, *args):
    chunks = _chunks(n)
    if len(chunks) == 1:
        fn(*args, *chunks[0])
        return
    futs = [_pool().submit(fn, *args, lo, hi) for lo, hi in chunks]
    for f in futs:
        f.result()


class CpuKernels:
    """Thin parallel front-end to the kernels (what :class:`CpuEngine` calls)."""

    def __init__(self):
        from volsweep.progress import compile_notice

        compile_notice(__file__, "sweep CPU kernels", "5-10 s")
        _compile_all()

    @staticmethod
    def mul_spectrum(vr, outr, nx, ny, P):
        """``outr = vr · K̂`` (complex64 half spectra viewed as float32, ``P`` a float32 row)."""
        _run(lambda lo, hi: mul_rows(vr, outr, nx, ny, P, lo, hi), vr.shape[0])

    @staticmethod
    def parseval(pw, nx, ny, P) -> float:
        """``Σ pw · K̂²``: float64 per plane, summed in plane order (thread-count independent)."""
        rows = np.empty(pw.shape[0])
        _run(lambda lo, hi: parseval_rows(pw, nx, ny, P, lo, hi, rows), pw.shape[0])
        tot = 0.0
        for r in rows.tolist():  # fixed order
            tot += r
        scale = float(P[SCALE])
        return tot * scale * scale

    @staticmethod
    def core_stats(g, ox, oy, oz, cx, cy, cz) -> np.ndarray:
        """(Σ G, Σ G², max G, min G) over the core, float64, merged in plane order."""
        rows = np.empty((cx, 4))
        _run(lambda lo, hi: stats_planes(g, ox, oy, oz, cy, cz, lo, hi, rows), cx)
        out = np.array([0.0, 0.0, -np.inf, np.inf])
        for r in rows.tolist():  # fixed order
            out[0] += r[0]
            out[1] += r[1]
            out[2] = max(out[2], r[2])
            out[3] = min(out[3], r[3])
        return out

    @staticmethod
    def update_omap(g, ox, oy, oz, resp, arg, kid):
        _run(lambda lo, hi: omap_planes(g, ox, oy, oz, resp, arg, kid, lo, hi), resp.shape[0])


_KERNELS = None


def kernels() -> CpuKernels:
    """The compiled kernels (compiled once per process, cached on disk)."""
    global _KERNELS
    if _KERNELS is None:
        _KERNELS = CpuKernels()
    return _KERNELS


class CpuEngine:
    """NumPy/scipy.fft (float32, all workers) with numba-fused spectrum and statistics.

    The interface shared with :class:`volsweep.engine._gpu.GpuEngine`: ``name``,
    ``sync()``, ``default_budget()`` and ``run_block(volume, block, job, progress)`` →
    ``(Partial, orientation)`` where ``orientation`` is None or a dict of core-shaped
    arrays: ``response_max``, ``arg`` (unique-kernel index) and, for the local-energy
    rule, ``local_energy_max``.
    """

    name = "cpu"

    def sync(self):
        pass

    @staticmethod
    def default_budget():
        return None

    def run_block(self, volume, block, job, progress):
        import scipy.fft as sfft
        import scipy.ndimage as ndi

        N = block.fft_shape
        data = read_block(volume, block.start, tuple(s + n for s, n in zip(block.start, N)),
                          job.mode, xp=np, dtype=np.float32)
        vhat = sfft.rfftn(data, workers=-1)
        del data
        K = job.n_kernels
        cx, cy, cz = block.core_shape
        ncore = cx * cy * cz
        kern = kernels()
        table = _plan.kernel_table(job.ks, job.spacing, N, 1.0)  # scipy's irfftn applies the 1/N
        prm32 = table.astype(np.float32)
        if job.parseval:
            pw = _plan.parseval_weights(vhat, N, np)
            dc = _plan.dc_spectrum(table) * float(vhat[0, 0, 0].real)
            del vhat
            sumsq = np.empty(K)
            for j in range(K):
                sumsq[j] = kern.parseval(pw, N[0], N[1], prm32[j])
                progress.step()
            nanv = np.full(K, np.nan)
            return Partial(ncore, dc, sumsq, nanv, nanv.copy()), None
        res = np.empty((K, 4))
        omap = None
        if job.omap is not None:
            omap = {"response_max": np.full(block.core_shape, -np.inf, np.float32),
                    "arg": np.zeros(block.core_shape, np.int32)}
            if job.omap == "local_energy":
                omap["local_energy_max"] = np.full(block.core_shape, -np.inf, np.float32)
        prod = np.empty_like(vhat)  # complex64 product, consumed in place by irfftn
        vr, pr = vhat.view(np.float32), prod.view(np.float32)
        ox, oy, oz = block.core_offset
        for j in range(K):
            kern.mul_spectrum(vr, pr, N[0], N[1], prm32[j])
            g = sfft.irfftn(prod, s=N, workers=-1, overwrite_x=True)
            res[j] = kern.core_stats(g, ox, oy, oz, cx, cy, cz)
            if job.omap == "response":
                kern.update_omap(g, ox, oy, oz, omap["response_max"], omap["arg"], j)
            elif job.omap == "local_energy":
                core = g[ox:ox + cx, oy:oy + cy, oz:oz + cz]
                np.maximum(omap["response_max"], core, out=omap["response_max"])
                if job.directional[j]:
                    e = _plan.local_energy(g, block, job.taps[j], job.inv_energy[j], np, ndi)
                    better = e > omap["local_energy_max"]
                    omap["local_energy_max"][better] = e[better]
                    omap["arg"][better] = j
            del g
            progress.step()
        return Partial.from_array(ncore, res), omap
