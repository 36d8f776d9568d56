"""A real single-node SLURM on this machine, for the tests: munge, slurmctld, slurmd.

Debian's ``slurm-wlm`` and ``munge`` are installed with apt when missing (root only).
Every file the cluster writes lives in one work directory (configs, state, spool,
logs); the clients find the config through ``SLURM_CONF``, so /etc/slurm is never
touched. The daemons run in the foreground (``-D``, ``munged -F``) as children of
the test process, so that they are stopped by their own PIDs.

The node is the machine itself, with what ``slurmd -C`` detects (RealMemory never
above it, or the node drains), ``select/cons_tres`` and one GPU GRES whose device
file is /dev/null: enough for ``sbatch --gpus=1`` to be scheduled, no GPU needed.
Without slurmdbd there is no accounting (``sacct`` fails), so job state must be
read with ``squeue``, which keeps finished jobs for ``MinJobAge`` seconds.
"""

from __future__ import annotations

import fcntl
import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

MIN_JOB_AGE = 300
APT_PACKAGES = ("slurm-wlm", "munge")
BINARIES = ("slurmctld", "slurmd", "munged", "sbatch", "squeue", "sinfo", "scontrol")
MUNGE_DIRS = {"/run/munge": 0o755, "/var/lib/munge": 0o711, "/var/log/munge": 0o700,
              "/etc/munge": 0o700}
MUNGE_KEY = Path("/etc/munge/munge.key")
# Stand-ins for /dev/nvidia0, 1, ...: slurmd needs one distinct device file per GPU.
FAKE_GPU_FILES = ("/dev/null", "/dev/zero", "/dev/full", "/dev/urandom")
# Where clients look for slurm.conf, in order: $SLURM_CONF, the compiled-in default, then
# the configless cache. The SLURM jobstep plugin strips every SLURM_* variable (SLURM_CONF
# too) before its nested `srun`, so inside a job only the two files can be found: the
# test cluster puts its config into the configless cache path, never into /etc.
SYSTEM_CONF = Path("/etc/slurm/slurm.conf")
CLIENT_CONF = Path("/run/slurm/conf/slurm.conf")


# One test cluster per machine at a time: two would share munged and CLIENT_CONF (and
# each would stop or overwrite the other's). A second test run waits on this lock.
MACHINE_LOCK = Path("/run/volsweep-slurm-test.lock")
CONF_HEADER = "# Written by tests/slurm/cluster.py: a one-node test cluster.\n"


class SlurmUnavailable(RuntimeError):
    """SLURM cannot be installed or started here (the test then skips, saying why)."""


def _which(name):
    return shutil.which(name) or next(
        (str(p) for p in (Path("/usr/sbin") / name, Path("/usr/bin") / name) if p.exists()), None)


def missing_binaries():
    return [b for b in BINARIES if _which(b) is None]


def ensure_installed(timeout=900):
    """Install Debian's slurm-wlm and munge with apt when they are missing.

    Raises SlurmUnavailable with the reason when that is impossible (not root,
    no apt, the packages cannot be fetched).
    """
    if not missing_binaries():
        return
    if os.geteuid() != 0:
        raise SlurmUnavailable(f"SLURM is not installed ({', '.join(missing_binaries())} missing) "
                               "and installing it needs root")
    apt = shutil.which("apt-get")
    if apt is None:
        raise SlurmUnavailable("SLURM is not installed and there is no apt-get to install it")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = [apt, "install", "-y", "-q", "--no-install-recommends", *APT_PACKAGES]
    out = subprocess.run(install, env=env, capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:  # stale or empty package lists: update once, then retry
        update = subprocess.run([apt, "update", "-q"], env=env, capture_output=True, text=True,
                                timeout=timeout)
        out = subprocess.run(install, env=env, capture_output=True, text=True, timeout=timeout)
        if out.returncode != 0:
            raise SlurmUnavailable("apt-get could not install slurm-wlm and munge: "
                                   + (update.stderr + out.stderr).strip()[-600:])
    if missing_binaries():
        raise SlurmUnavailable(f"after apt-get install, still missing: {missing_binaries()}")


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def detected_node():
    """``slurmd -C``: the node line that slurmd itself detects, as a dict."""
    out = subprocess.run([_which("slurmd"), "-C"], capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise SlurmUnavailable(f"slurmd -C failed: {out.stderr.strip()}")
    line = next((ln for ln in out.stdout.splitlines() if ln.startswith("NodeName=")), None)
    if line is None:
        raise SlurmUnavailable(f"slurmd -C printed no NodeName line: {out.stdout!r}")
    return dict(kv.split("=", 1) for kv in line.split())


def _stop(proc: subprocess.Popen, name: str, timeout: float = 15.0):
    """SIGTERM one process we started, by its PID; SIGKILL if it does not go."""
    if proc is None or proc.poll() is not None:
        return
    try:
        os.kill(proc.pid, signal.SIGTERM)
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=timeout)
    except ProcessLookupError:
        pass


class SlurmCluster:
    """Start with ``start()``, stop with ``stop()`` (idempotent; stops only what it started)."""

    def __init__(self, workdir, *, partitions=("main", "gpu"), gpus=1):
        self.workdir = Path(workdir)
        self.partitions = partitions
        self.gpus = gpus
        self.procs: dict[str, subprocess.Popen] = {}
        self.node: dict = {}
        self.env = dict(os.environ)

    # ---- munge -------------------------------------------------------------------------------
    def _munge_works(self):
        munge, unmunge = _which("munge"), _which("unmunge")
        if not (munge and unmunge):
            return False
        cred = subprocess.run([munge, "-n"], capture_output=True, timeout=10)
        if cred.returncode != 0:
            return False
        return subprocess.run([unmunge], input=cred.stdout, capture_output=True,
                              timeout=10).returncode == 0

    def _start_munge(self):
        """Reuse a working munged; otherwise start one as the munge user, on /run/munge."""
        if self._munge_works():
            return
        try:
            user = pwd.getpwnam("munge")
        except KeyError as exc:
            raise SlurmUnavailable("there is no munge user (the munge package makes it)") from exc
        for path, mode in MUNGE_DIRS.items():
            Path(path).mkdir(parents=True, exist_ok=True)
            os.chown(path, user.pw_uid, user.pw_gid)
            os.chmod(path, mode)
        if not MUNGE_KEY.exists() or MUNGE_KEY.stat().st_size < 32:
            MUNGE_KEY.write_bytes(os.urandom(1024))
        os.chown(MUNGE_KEY, user.pw_uid, user.pw_gid)
        os.chmod(MUNGE_KEY, 0o400)
        pidfile = Path("/run/munge/munged.pid")
        socket_path = Path("/run/munge/munge.socket.2")
        for stale in (pidfile, socket_path, Path(str(socket_path) + ".lock")):
            stale.unlink(missing_ok=True)  # left by a killed munged: it would refuse to start
        log = open(self.workdir / "munged.out", "w")
        self.procs["munged"] = subprocess.Popen(
            [_which("munged"), "-F"], user=user.pw_uid, group=user.pw_gid, extra_groups=[],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd="/")
        self._wait(self._munge_works, 30, "munged to answer", "munged")

    # ---- slurm -------------------------------------------------------------------------------
    def write_config(self):
        d = self.workdir
        for sub in ("state", "spool", "log"):
            (d / sub).mkdir(parents=True, exist_ok=True)
        detected = detected_node()
        name = detected["NodeName"]
        # slurmd must register under the name slurm.conf gives it: the short host name.
        real_memory = int(detected.get("RealMemory", "1000"))
        real_memory = max(500, int(real_memory * 0.9))  # never above what slurmd detects
        node_keys = ("CPUs", "Boards", "SocketsPerBoard", "CoresPerSocket", "ThreadsPerCore")
        node = " ".join(f"{k}={detected[k]}" for k in node_keys if k in detected)
        gres = f" Gres=gpu:{self.gpus}" if self.gpus else ""
        self.node = {"name": name, "cpus": int(detected.get("CPUs", "1")),
                     "real_memory": real_memory, "gpus": self.gpus}
        ctld_port, slurmd_port = _free_port(), _free_port()
        parts = "\n".join(
            f"PartitionName={p} Nodes={name} Default={'YES' if i == 0 else 'NO'} "
            "MaxTime=INFINITE State=UP OverSubscribe=NO"
            for i, p in enumerate(self.partitions))
        conf = CONF_HEADER + f"""\
ClusterName=volsweeptest
SlurmctldHost={name}(127.0.0.1)
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
StateSaveLocation={d / 'state'}
SlurmdSpoolDir={d / 'spool'}
SlurmctldPidFile={d / 'slurmctld.pid'}
SlurmdPidFile={d / 'slurmd.pid'}
SlurmctldLogFile={d / 'log' / 'slurmctld.log'}
SlurmdLogFile={d / 'log' / 'slurmd.log'}
PlugStackConfig={d / 'plugstack.conf'}
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
GresTypes=gpu
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
JobCompType=jobcomp/none
# squeue is the job-state source without slurmdbd: keep finished jobs visible for 5 min.
MinJobAge={MIN_JOB_AGE}
ReturnToService=2
InactiveLimit=0
KillWait=5
Waittime=0
SlurmdTimeout=60
NodeName={name} NodeAddr=127.0.0.1 {node} RealMemory={real_memory}{gres} State=UNKNOWN
{parts}
"""
        (d / "slurm.conf").write_text(conf)
        if self.gpus:
            if self.gpus > len(FAKE_GPU_FILES):
                raise ValueError(f"at most {len(FAKE_GPU_FILES)} fake GPUs")
            (d / "gres.conf").write_text(
                "# One schedulable GPU per line; character devices stand in for /dev/nvidiaN.\n"
                + "".join(f"NodeName={name} Name=gpu File={f}\n"
                          for f in FAKE_GPU_FILES[:self.gpus]))
        # plugstack: an empty one, so that the system's spank plugins are not loaded
        (d / "plugstack.conf").write_text("")
        conf_path = d / "slurm.conf"
        self.env = {**os.environ, "SLURM_CONF": str(conf_path)}
        self._install_client_config(conf_path)
        return conf_path

    def _install_client_config(self, conf_path):
        if SYSTEM_CONF.exists():
            raise SlurmUnavailable(
                f"{SYSTEM_CONF} exists: this machine has a SLURM of its own, and jobs of the "
                "test cluster would find that config instead of the test's (the jobstep plugin "
                "drops SLURM_CONF); the test does not overwrite it")
        if CLIENT_CONF.exists() or CLIENT_CONF.is_symlink():
            if not CLIENT_CONF.read_text(errors="replace").startswith(CONF_HEADER):
                raise SlurmUnavailable(f"{CLIENT_CONF} exists and was not written by this test")
        self._created_dirs = [p for p in (CLIENT_CONF.parent.parent, CLIENT_CONF.parent)
                              if not p.exists()]
        CLIENT_CONF.parent.mkdir(parents=True, exist_ok=True)
        CLIENT_CONF.write_text(conf_path.read_text())
        self._client_conf = CLIENT_CONF

    def _remove_client_config(self):
        conf = getattr(self, "_client_conf", None)
        if conf is not None:
            conf.unlink(missing_ok=True)
            for d in reversed(getattr(self, "_created_dirs", [])):
                try:
                    d.rmdir()
                except OSError:
                    pass
            self._client_conf = None

    def _wait(self, ok, timeout, what, proc_name=None):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if ok():
                return
            proc = self.procs.get(proc_name) if proc_name else None
            if proc is not None and proc.poll() is not None:
                raise SlurmUnavailable(f"{proc_name} exited ({proc.returncode}) while waiting for "
                                       f"{what}: {self.logs()}")
            time.sleep(0.3)
        raise SlurmUnavailable(f"timed out after {timeout} s waiting for {what}: {self.logs()}")

    def logs(self, tail=1500):
        out = []
        for path in [self.workdir / "munged.out", self.workdir / "slurmctld.out",
                     self.workdir / "slurmd.out", *sorted((self.workdir / "log").glob("*.log"))]:
            if path.is_file():
                out.append(f"--- {path.name}:\n{path.read_text(errors='replace')[-tail:]}")
        return "\n".join(out)

    def run(self, *cmd, check=True, timeout=60, **kw):
        out = subprocess.run([_which(cmd[0]) or cmd[0], *cmd[1:]], env=self.env,
                             capture_output=True, text=True, timeout=timeout, **kw)
        if check and out.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} failed ({out.returncode}): {out.stderr}")
        return out

    def node_state(self):
        out = self.run("sinfo", "-h", "-N", "-o", "%T", check=False, timeout=15)
        return out.stdout.strip().lower() if out.returncode == 0 else ""

    def start(self, timeout=90):
        """Install if needed, start munged (unless one works), slurmctld and slurmd; wait idle.

        On any failure, whatever was started is stopped again before the error propagates.
        """
        self.workdir.mkdir(parents=True, exist_ok=True)
        ensure_installed()
        self._lock_machine()
        try:
            return self._start(timeout)
        except BaseException:
            self.stop()
            raise

    def _lock_machine(self, timeout=1800):
        fd = os.open(MACHINE_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    os.close(fd)
                    raise SlurmUnavailable(f"another SLURM test cluster held {MACHINE_LOCK} "
                                           f"for {timeout} s") from None
                time.sleep(1)
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()} {self.workdir}\n".encode())
        self._lock_fd = fd

    def _unlock_machine(self):
        fd = getattr(self, "_lock_fd", None)
        if fd is not None:
            os.close(fd)  # releases the flock
            self._lock_fd = None

    def _start(self, timeout):
        self._start_munge()
        self.write_config()
        for name, args in (("slurmctld", ["-D", "-i"]), ("slurmd", ["-D"])):
            out = open(self.workdir / f"{name}.out", "w")
            self.procs[name] = subprocess.Popen(
                [_which(name), *args, "-f", str(self.workdir / "slurm.conf")], env=self.env,
                stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=self.workdir)
            if name == "slurmctld":
                self._wait(lambda: self.run("scontrol", "ping", check=False, timeout=10)
                           .stdout.count("is UP") > 0, timeout, "slurmctld to answer", name)

        def idle():
            state = self.node_state()
            if state.startswith(("drain", "down")):
                self.run("scontrol", "update", f"nodename={self.node['name']}", "state=resume",
                         check=False)
            return state.startswith("idle")

        self._wait(idle, timeout, "the node to become idle", "slurmd")
        return self

    def stop(self):
        """Cancel what is left in the queue, then stop the daemons started here, by PID."""
        if "slurmctld" in self.procs and self.procs["slurmctld"].poll() is None:
            self.run("scancel", "--full", "--user", pwd.getpwuid(os.geteuid()).pw_name,
                     check=False, timeout=15)
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline:
                queue = self.run("squeue", "-h", "-t", "PD,R,CG", "-o", "%i", check=False,
                                 timeout=15)
                if queue.returncode != 0 or not queue.stdout.strip():
                    break
                time.sleep(0.5)
        for name in ("slurmd", "slurmctld", "munged"):
            _stop(self.procs.pop(name, None), name)
        self._remove_client_config()
        self._unlock_machine()

    def wait_job(self, job_id, timeout=120):
        """Poll squeue until job ``job_id`` is finished; return its final state."""
        deadline = time.monotonic() + timeout
        state = ""
        while time.monotonic() < deadline:
            out = self.run("squeue", "-h", "-j", str(job_id), "-t", "all", "-o", "%T",
                           check=False, timeout=15)
            state = out.stdout.strip()
            if state and state not in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING"):
                return state
            time.sleep(0.5)
        raise TimeoutError(f"job {job_id} still {state!r} after {timeout} s: {self.logs()}")


def sbatch_id(stdout: str) -> str:
    """The job id from ``sbatch --parsable`` (``id`` or ``id;cluster``)."""
    m = re.match(r"\s*(\d+)", stdout)
    if not m:
        raise ValueError(f"no job id in sbatch output {stdout!r}")
    return m.group(1)
