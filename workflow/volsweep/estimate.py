"""Up-front estimate of a run: jobs, kernel support, compute and memory per volume.

Called when the config is validated, before any job starts.  What exceeds a
ceiling of the config's ``limits`` block, or cannot run at all, is refused
with one line naming the key; the rest is logged, one line per volume.

The model (docs/definitions.md for the wavelet and its halo):

- the sweep's halo per axis is :func:`volsweep.engine.wavelet.halo_for` of ``a``,
  ``xi``, ``truncate`` and the spacing, and a job's memory is
  :func:`volsweep.engine.memory_needs` (the untiled need, and the smallest
  tile's: one voxel plus its halo, below which no tiling helps) plus the
  float32 volume the job reads;
- the spectrum of a kernel narrower than a voxel sums aliased images: their
  count per frequency is ``Π_d (2 G_d + 1)`` with ``G_d`` from
  :func:`volsweep.engine.wavelet.image_counts` (computed here in closed form);
- compute is counted in voxel-kernels: kernels × voxels of the padded FFT shape;
- thickness jobs hold up to eight float32 copies of the volume (the rules' own
  memory request), and there is one per ``thickness.chunk``.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass

import numpy as np

log = logging.getLogger("volsweep")

MB = 2**20
#: Defaults of the config's ``limits`` block (see the schema).
DEFAULT_LIMITS = {"max_jobs": 10_000, "max_job_memory_mb": 256 * 1024, "max_alias_terms": 1_000_000,
                  "max_voxel_kernels": 1e15}
#: Above this many (θ, φ, ξ) points the halo is bounded by a·max(ξ, 1) instead of the grid's maximum.
_EXACT_HALO_POINTS = 1_000_000


@dataclass
class VolumeEstimate:
    """The planned cost of one volume; sizes in bytes, compute in voxel-kernels."""

    name: str
    shape: tuple
    sweep_jobs: int = 0
    kernels: int = 0
    halo: tuple = (0, 0, 0)
    fft_voxels: int = 0
    alias_terms: int = 1
    voxel_kernels: float = 0.0
    sweep_memory: int = 0
    sweep_min_memory: int = 0
    thickness_jobs: int = 0
    thickness_memory: int = 0

    @property
    def voxels(self) -> int:
        return math.prod(self.shape)

    def line(self) -> str:
        """One log line, e.g. ``estimate demo: 64x56x48 voxels, sweep 2 jobs of ...``."""
        parts = [f"estimate {self.name}: {'x'.join(map(str, self.shape))} voxels"]
        if self.sweep_jobs:
            parts.append(f"sweep {self.sweep_jobs} job(s), {self.kernels} kernels, halo {list(self.halo)}, "
                         f"{self.voxel_kernels:.3g} voxel-kernels, {_size(self.sweep_memory)} per job untiled "
                         f"({_size(self.sweep_min_memory)} at the smallest tile)")
        if self.thickness_jobs:
            parts.append(f"thickness {self.thickness_jobs} job(s) of up to {_size(self.thickness_memory)}")
        return "; ".join(parts)


def _size(nbytes: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        if nbytes < 1024 or unit == "EiB":
            return f"{nbytes:.3g} {unit}"
        nbytes /= 1024
    return f"{nbytes:.3g} EiB"


def alias_images(a: float, xi: float, spacing) -> tuple[int, int, int]:
    """Largest aliased image index per axis, as :func:`volsweep.engine.wavelet.image_counts`, in O(1).

    Examples
    --------
    >>> alias_images(1.0, 0.5, (1, 1, 1))
    (2, 2, 2)
    """
    from volsweep.engine.wavelet import P_CUT

    a_eff = a * min(float(xi), 1.0)
    out = []
    for s in spacing:
        x = math.sqrt(P_CUT) * s / (a_eff * math.pi)
        out.append(int(max(0, math.ceil((x + 1) / 2) - 1)) if math.isfinite(x) else 2**62)
    return tuple(out)


def _fast_len_bound(n: int) -> int:
    from volsweep.tiling import next_fast_len

    return next_fast_len(n) if n < 2**40 else n


def estimate_volume(name: str, shape, spacing, config: dict) -> VolumeEstimate:
    """The cost of one volume under a validated config (no voxels read).

    Examples
    --------
    >>> cfg = {"sweep": {"enabled": True, "a": 2.0, "theta": {"num": 8}, "phi": {"num": 8},
    ...        "xi": [1.0], "mode": "reflect", "truncate": None, "stats": ["energy"],
    ...        "block_size": 4, "job_minutes": 30, "min_jobs": 1, "orientation_map": False},
    ...        "thickness": {"enabled": False}}
    >>> est = estimate_volume("demo", (64, 56, 48), (1, 1, 1), cfg)
    >>> est.sweep_jobs, est.kernels
    (2, 64)
    """
    from volsweep.engine.wavelet import angle_values
    from volsweep.engine.wavelet import DEFAULT_TRUNCATE

    shape = tuple(int(n) for n in shape)
    est = VolumeEstimate(name=name, shape=shape)
    sweep = config["sweep"]
    voxels = math.prod(shape)
    if sweep["enabled"]:
        theta, phi = angle_values(sweep["theta"]), angle_values(sweep["phi"])
        xi = np.asarray(sweep["xi"], dtype=np.float64)
        # a: auto is known only once the thickness has run: estimated at two scales of 1.
        scales = (np.ones(2) if sweep["a"] == "auto"
                  else np.atleast_1d(np.asarray(sweep["a"], dtype=np.float64)))
        truncate = DEFAULT_TRUNCATE if sweep.get("truncate") is None else float(sweep["truncate"])
        est.kernels = len(theta) * len(phi) * len(xi) * len(scales)
        if est.kernels <= _EXACT_HALO_POINTS:
            from volsweep.engine.wavelet import halo_for

            halo = np.max([halo_for(float(a), xi, theta, phi, spacing, truncate) for a in scales], axis=0)
        else:  # the bound over every direction: a·max(ξ, 1) along each axis
            reach = truncate * float(scales.max()) * max(float(xi.max()), 1.0)
            halo = [int(math.ceil(reach / s)) for s in spacing]
        est.halo = tuple(int(h) for h in halo)
        padded = [_fast_len_bound(n + 2 * h) for n, h in zip(shape, est.halo)]
        smallest = [_fast_len_bound(1 + 2 * h) for h in est.halo]
        est.fft_voxels = math.prod(padded)
        est.alias_terms = max(math.prod(2 * g + 1 for g in alias_images(float(a), float(x), spacing))
                              for a in scales for x in xi)
        est.voxel_kernels = float(est.kernels) * float(est.fft_voxels)
        bpv = _bytes_per_voxel(sweep.get("orientation_map", False))
        est.sweep_memory = est.fft_voxels * bpv + 4 * voxels
        est.sweep_min_memory = math.prod(smallest) * bpv + 4 * voxels
        est.sweep_jobs = _sweep_jobs(len(theta), est, shape, spacing, config)
    th = config["thickness"]
    if th["enabled"]:
        from volsweep.jobs import thickness_plan
        from volsweep.thickness import thickness_memory_bytes

        try:
            chunk = thickness_plan(shape, spacing, config)
        except MemoryError:
            chunk = tuple(config["storage"]["shards"])
        if chunk is None:
            est.thickness_jobs, est.thickness_memory = 1, thickness_memory_bytes(shape, spacing=spacing)
        else:
            est.thickness_jobs = math.prod(-(-n // c) for n, c in zip(shape, chunk))
            block = [min(n, 2 * c) for n, c in zip(shape, chunk)]
            est.thickness_memory = thickness_memory_bytes(block, spacing=spacing)
    return est


def _bytes_per_voxel(orientation_map: bool) -> int:
    """The engine's working bytes per padded voxel (its own constants when it has them)."""
    from volsweep import engine

    base = getattr(engine, "BYTES_PER_PADDED_VOXEL", 16)
    extra = getattr(engine, "BYTES_PER_LOCAL_ENERGY_VOXEL", getattr(engine, "BYTES_PER_OMAP_VOXEL", 8))
    return base + (extra if orientation_map else 0)


def _sweep_jobs(n_theta: int, est: VolumeEstimate, shape, spacing, config: dict) -> int:
    """Sweep jobs of one volume, as the workflow plans them (:func:`volsweep.jobs.sweep_plan`).

    A volume the limits refuse anyway (kernels far below a voxel, or too many
    kernel-voxels) is counted at one job per θ, without asking the cost model.
    """
    from volsweep.jobs import sweep_plan

    limits = {**DEFAULT_LIMITS, **{k: v for k, v in (config.get("limits") or {}).items() if v is not None}}
    if (not math.isfinite(est.voxel_kernels) or est.voxel_kernels > limits["max_voxel_kernels"]
            or est.alias_terms > limits["max_alias_terms"]):
        return n_theta
    return len(sweep_plan(shape, spacing, config, gpu=False))


def check_estimates(estimates, config: dict, configfile: str) -> list[str]:
    """One line per ceiling of ``config['limits']`` that a volume (or the run) exceeds.

    Examples
    --------
    >>> e = VolumeEstimate("v", (8, 8, 8), sweep_jobs=25_000)
    >>> check_estimates([e], {"limits": {}, "sweep": {"theta": {"num": 100000}, "block_size": 4},
    ...                       "device": "cpu"}, "my.yaml")[0]
    "my.yaml: sweep.theta = {'num': 100000} with sweep.block_size = 4: the run plans 25000 jobs, more than limits.max_jobs = 10000"
    """
    limits = {**DEFAULT_LIMITS, **{k: v for k, v in (config.get("limits") or {}).items() if v is not None}}
    sweep = config.get("sweep", {})
    errors = []
    total = sum(e.sweep_jobs + e.thickness_jobs for e in estimates)
    if total > limits["max_jobs"]:
        worst = max(estimates, key=lambda e: e.sweep_jobs + e.thickness_jobs)
        what = (f"sweep.theta = {sweep.get('theta')} with sweep.block_size = {sweep.get('block_size')}"
                if worst.sweep_jobs >= worst.thickness_jobs else
                f"thickness.chunk = {config['thickness']['chunk']} on {'x'.join(map(str, worst.shape))} voxels")
        errors.append(f"{configfile}: {what}: the run plans {total} jobs, more than limits.max_jobs = "
                      f"{limits['max_jobs']}")
    budget = limits["max_job_memory_mb"] * MB
    for e in estimates:
        where = f"{configfile}: volumes.{e.name}"
        if e.sweep_jobs:
            grid = f"sweep.a = {sweep.get('a')}, sweep.xi = {sweep.get('xi')}"
            if e.alias_terms > limits["max_alias_terms"]:
                errors.append(f"{where}: {grid}, spacing: the kernel's narrow axis a·min(ξ, 1) is far "
                              f"below a voxel; its spectrum would sum {e.alias_terms:.3g} aliased terms "
                              f"per frequency, more than limits.max_alias_terms = {limits['max_alias_terms']:g}")
            elif e.sweep_min_memory > budget:
                errors.append(f"{where}: {grid}, sweep.truncate = {sweep.get('truncate')}: the kernel "
                              f"support (halo {list(e.halo)} voxels) needs {_size(e.sweep_min_memory)} even "
                              f"for a 1-voxel tile, more than limits.max_job_memory_mb = "
                              f"{limits['max_job_memory_mb']:g}")
            elif (e.sweep_memory > budget and config.get("device_memory_mb") is None
                  and config.get("device") == "cpu"):
                errors.append(f"{where}: a sweep job needs {_size(e.sweep_memory)} untiled, more than "
                              f"limits.max_job_memory_mb = {limits['max_job_memory_mb']:g}; set "
                              "device_memory_mb to tile space")
            elif e.voxel_kernels > limits["max_voxel_kernels"]:
                errors.append(f"{where}: {e.kernels} kernels over an FFT of {e.fft_voxels} voxels = "
                              f"{e.voxel_kernels:.3g} voxel-kernels, more than limits.max_voxel_kernels = "
                              f"{limits['max_voxel_kernels']:g}")
        if e.thickness_jobs and e.thickness_memory > budget:
            errors.append(f"{where}: local thickness of {'x'.join(map(str, e.shape))} voxels needs "
                          f"{_size(e.thickness_memory)} per job, more than limits.max_job_memory_mb = "
                          f"{limits['max_job_memory_mb']:g}")
    return errors


def log_estimates(estimates) -> None:
    """Log one line per volume on the ``volsweep`` logger."""
    for e in estimates:
        log.info("%s", e.line())
