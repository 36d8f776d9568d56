"""One GPU per job: which CUDA device a workflow job may use.

Under SLURM the scheduler has already chosen: it sets ``CUDA_VISIBLE_DEVICES`` to
the job's allocation (``--gpus=1``), and :func:`claim_gpu` leaves it alone.

On a workstation (the local profile), Snakemake runs up to ``--resources gpu=N``
GPU jobs at once but does not say which device each should use. :func:`claim_gpu`
gives each running job its own device: it takes a non-blocking ``fcntl`` lock on one
lock file per device (``gpu-<id>.lock`` in a shared lock directory), sets
``CUDA_VISIBLE_DEVICES`` to that device for the job's process, and releases the
lock when the job ends (the kernel releases it too if the process dies). The
devices are those of ``CUDA_VISIBLE_DEVICES`` when the user set it, otherwise
``0 .. n-1`` with ``n`` from ``nvidia-smi -L`` (or ``VOLSWEEP_GPU_COUNT``).

It must run before CuPy touches the GPU: CUDA reads ``CUDA_VISIBLE_DEVICES`` once,
when the process first initialises the driver.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

log = logging.getLogger("volsweep")

ENV_COUNT = "VOLSWEEP_GPU_COUNT"
ENV_LOCK_DIR = "VOLSWEEP_GPU_LOCK_DIR"
DEVICES = ("auto", "cpu", "cuda")


def under_slurm(env=None) -> bool:
    """True inside a SLURM job (its GPUs, if any, are already chosen by SLURM)."""
    env = os.environ if env is None else env
    return "SLURM_JOB_ID" in env or "SLURM_JOBID" in env


def gpu_count(env=None) -> int:
    """GPUs on this machine: ``VOLSWEEP_GPU_COUNT``, else the lines of ``nvidia-smi -L``.

    0 when there is no ``nvidia-smi`` or it fails (no driver, no GPU).
    """
    env = os.environ if env is None else env
    if env.get(ENV_COUNT, "").strip():
        value = env[ENV_COUNT].strip()
        try:
            count = int(value)
        except ValueError:
            raise ValueError(f"{ENV_COUNT} = {value!r}: not an integer") from None
        if count < 0:
            raise ValueError(f"{ENV_COUNT} = {count}: must be >= 0")
        return count
    smi = shutil.which("nvidia-smi", path=env.get("PATH", os.defpath))
    if smi is None:
        return 0
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    if out.returncode != 0:
        return 0
    return sum(1 for line in out.stdout.splitlines() if line.startswith("GPU "))


def visible_devices(env=None) -> list[str]:
    """The device ids a local job may take: the user's CUDA_VISIBLE_DEVICES, else 0..n-1."""
    env = os.environ if env is None else env
    if "CUDA_VISIBLE_DEVICES" in env:
        ids = [d.strip() for d in env["CUDA_VISIBLE_DEVICES"].split(",")]
        # CUDA stops at the first invalid entry ("-1", ""): so do we.
        out = []
        for d in ids:
            if not d or d.startswith("-"):
                break
            out.append(d)
        return out
    return [str(i) for i in range(gpu_count(env))]


def lock_dir(env=None) -> Path:
    """Where the per-device lock files live: ``VOLSWEEP_GPU_LOCK_DIR`` or a machine-wide
    directory under the system temp dir (sticky and world-writable, like /tmp, so that
    every user's jobs see the same locks)."""
    env = os.environ if env is None else env
    if env.get(ENV_LOCK_DIR):
        path = Path(env[ENV_LOCK_DIR])
        path.mkdir(parents=True, exist_ok=True)
        return path
    path = Path(tempfile.gettempdir()) / "volsweep-gpu-locks"
    try:
        path.mkdir(mode=0o1777, exist_ok=False)
        os.chmod(path, 0o1777)
    except FileExistsError:
        pass
    return path


def _try_lock(path: Path):
    """An open fd holding an exclusive lock on ``path``, or None if another holds it."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    try:
        with contextlib.suppress(OSError):
            os.fchmod(fd, 0o666)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        os.close(fd)
        if exc.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
            return None
        raise
    return fd


def acquire_device(devices, directory, *, timeout=None, poll=0.5):
    """Lock one of ``devices`` (tried in order); wait while all are taken.

    Returns ``(device_id, fd)``; close ``fd`` to release. Raises TimeoutError after
    ``timeout`` seconds (None: wait for ever).
    """
    directory = Path(directory)
    deadline = None if timeout is None else time.monotonic() + timeout
    waited = False
    while True:
        for device in devices:
            fd = _try_lock(directory / f"gpu-{device}.lock")
            if fd is not None:
                os.ftruncate(fd, 0)
                os.write(fd, f"{os.getpid()}\n".encode())
                return device, fd
        if deadline is not None and time.monotonic() >= deadline:
            raise TimeoutError(f"all GPUs {', '.join(devices)} stayed taken for {timeout} s "
                               f"(locks in {directory})")
        if not waited:
            log.info("all GPUs (%s) are taken by other jobs; waiting", ", ".join(devices))
            waited = True
        time.sleep(poll)


@contextlib.contextmanager
def claim_gpu(device: str = "auto", *, timeout: float | None = None, env=None, shared=False):
    """Give this process one GPU for the duration of the ``with`` block.

    ``device`` is the config's ``device``: ``cpu`` claims nothing. Yields the device
    id the job uses (a string, as in CUDA_VISIBLE_DEVICES), or None when it uses none.
    Under SLURM, the job's ``CUDA_VISIBLE_DEVICES`` is left as SLURM set it. Locally,
    one free device is locked and ``CUDA_VISIBLE_DEVICES`` set to it; both are undone
    on exit. ``shared``: a short job that Snakemake does not count against
    ``--resources gpu`` (a whole-volume thickness) takes the first device without a
    lock, beside whatever runs there. With no GPU at all it yields None and changes
    nothing (``device: cuda`` then fails in the engine, with its own message).
    """
    if device not in DEVICES:
        raise ValueError(f"device = {device!r}: expected one of {', '.join(DEVICES)}")
    env = os.environ if env is None else env
    if device == "cpu":
        yield None
        return
    if under_slurm(env):
        visible = env.get("CUDA_VISIBLE_DEVICES")
        log.info("GPU: SLURM job %s, CUDA_VISIBLE_DEVICES=%s (set by SLURM)",
                 env.get("SLURM_JOB_ID", env.get("SLURM_JOBID")), visible)
        yield visible
        return
    devices = visible_devices(env)
    if not devices:
        yield None
        return
    if "cupy" in sys.modules:
        log.warning("claim_gpu: CuPy was imported before the GPU was chosen; if it has "
                    "already used the GPU, CUDA_VISIBLE_DEVICES will not take effect")
    if shared:
        previous = env.get("CUDA_VISIBLE_DEVICES")
        env["CUDA_VISIBLE_DEVICES"] = devices[0]
        log.info("GPU: device %s of %s, shared (no lock)", devices[0], ",".join(devices))
        try:
            yield devices[0]
        finally:
            _restore(env, previous)
        return
    chosen, fd = acquire_device(devices, lock_dir(env), timeout=timeout)
    previous = env.get("CUDA_VISIBLE_DEVICES")
    env["CUDA_VISIBLE_DEVICES"] = chosen
    log.info("GPU: device %s of %s (lock %s)", chosen, ",".join(devices), lock_dir(env))
    try:
        yield chosen
    finally:
        _restore(env, previous)
        os.close(fd)


def _restore(env, previous):
    if previous is None:
        env.pop("CUDA_VISIBLE_DEVICES", None)
    else:
        env["CUDA_VISIBLE_DEVICES"] = previous


def gpu_planned(device: str, env=None) -> bool:
    """Whether jobs with ``device`` will use a GPU, decided without importing CuPy.

    ``cuda`` always; ``auto`` when CuPy is installed and ``nvidia-smi`` lists a
    GPU (or ``VOLSWEEP_GPU_COUNT`` says so); ``cpu`` never.  The workflow's
    parse uses this to give GPU rules a ``gpu`` resource.

    Examples
    --------
    >>> gpu_planned("cpu")
    False
    """
    if device != "auto":
        return device == "cuda"
    import importlib.util

    return importlib.util.find_spec("cupy") is not None and gpu_count(env) > 0
