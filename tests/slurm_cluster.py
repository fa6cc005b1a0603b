"""A real one-node Slurm cluster for tests (Debian's slurm-wlm 22.05 + munge; ../shared/notes/SLURM_LOCAL.md).

`LocalSlurm` installs the packages when missing (apt-get, as root), makes sure munge authenticates, writes a
private slurm.conf (its own ports, spool and state folders under a temp dir; SLURM_CONF points every Slurm
command at it, so no /etc/slurm file is touched), starts slurmctld and slurmd, and stops exactly the daemons
it started (by their pid files) on close. `unavailable_reason()` says why a cluster cannot be had here.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

PACKAGES = ("slurm-wlm", "munge")
MUNGE_KEY = Path("/etc/munge/munge.key")
MUNGE_DIRS = ("/etc/munge", "/var/log/munge", "/run/munge", "/var/lib/munge")


class SlurmUnavailable(RuntimeError):
    """Slurm cannot be installed on this machine (no root, no apt-get): the reason is the message."""


class SlurmStartError(RuntimeError):
    """Slurm is installed but the one-node cluster did not come up (a real failure, not a skip)."""


def _run(command: list[str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(command, capture_output=True, text=True, **kwargs)


def install_packages() -> None:
    """apt-get install slurm-wlm munge when slurmctld is missing (about 10-15 s)."""
    if shutil.which("slurmctld") and shutil.which("munged"):
        return
    if os.geteuid() != 0 or not shutil.which("apt-get"):
        raise SlurmUnavailable("Slurm is not installed and apt-get as root is not available to install it")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    for command in (["apt-get", "update", "-qq"], ["apt-get", "install", "-y", "-qq", *PACKAGES]):
        result = _run(command, env=env, timeout=600)
        if result.returncode != 0:
            raise SlurmUnavailable(f"{' '.join(command)} failed: {result.stderr.strip()[-500:]}")


def munge_works() -> bool:
    encoded = _run(["munge", "-n"])
    if encoded.returncode != 0:
        return False
    decoded = _run(["unmunge"], input=encoded.stdout).stdout
    return any(line.split()[:2] == ["STATUS:", "Success"] for line in decoded.splitlines())


def start_munge() -> bool:
    """Make munge authenticate; returns True when this call started munged (so close() stops it)."""
    if munge_works():
        return False
    for folder in MUNGE_DIRS:
        os.makedirs(folder, exist_ok=True)
        shutil.chown(folder, "munge", "munge")
    if not MUNGE_KEY.exists():
        MUNGE_KEY.write_bytes(os.urandom(1024))
    shutil.chown(MUNGE_KEY, "munge", "munge")
    MUNGE_KEY.chmod(0o400)
    result = _run(["su", "-s", "/bin/sh", "munge", "-c", "/usr/sbin/munged"])
    if result.returncode != 0 or not _wait(munge_works, 10):
        raise SlurmStartError(f"munged did not start: {result.stderr.strip()}")
    return True


def _wait(predicate, timeout: float, interval: float = 0.5) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(interval)
    return False


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("", 0))
        return probe.getsockname()[1]


def _memory_mb() -> int:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemTotal:"):
            return int(line.split()[1]) // 1024
    raise SlurmStartError("cannot read MemTotal from /proc/meminfo")


def slurm_conf(folder: Path, host: str, cpus: int, memory_mb: int) -> str:
    """The one-node configuration of SLURM_LOCAL.md, with private ports and folders."""
    return "\n".join([
        "ClusterName=daratest",
        f"SlurmctldHost={host}",
        f"SlurmctldPort={_free_port()}",
        f"SlurmdPort={_free_port()}",
        "AuthType=auth/munge",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core",
        "ReturnToService=2",
        "SlurmUser=root",
        "SlurmdUser=root",
        "JobRequeue=1",
        "KillWait=10",
        "MpiDefault=none",
        "SchedulerType=sched/backfill",
        f"StateSaveLocation={folder}/slurmctld",
        f"SlurmdSpoolDir={folder}/slurmd",
        f"SlurmctldPidFile={folder}/slurmctld.pid",
        f"SlurmdPidFile={folder}/slurmd.pid",
        f"SlurmctldLogFile={folder}/slurmctld.log",
        f"SlurmdLogFile={folder}/slurmd.log",
        f"NodeName={host} CPUs={cpus} RealMemory={memory_mb} State=UNKNOWN",
        f"PartitionName=debug Nodes={host} Default=YES MaxTime=INFINITE State=UP",
        "",
    ])


class LocalSlurm:
    """A one-node Slurm cluster for the lifetime of the object (`with LocalSlurm(folder) as slurm: ...`)."""

    def __init__(self, folder: str | os.PathLike):
        self.folder = Path(folder)
        self.conf = self.folder / "slurm.conf"
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}
        self._started_munge = False
        self._pid_files: list[Path] = []

    def __enter__(self) -> LocalSlurm:
        if os.geteuid() != 0:
            raise SlurmUnavailable("the local Slurm cluster needs root (its daemons run as root)")
        install_packages()
        self._started_munge = start_munge()
        for sub in ("slurmctld", "slurmd"):
            (self.folder / sub).mkdir(parents=True, exist_ok=True)
        host = socket.gethostname().split(".")[0]
        memory = max(1000, int(_memory_mb() * 0.8))
        self.conf.write_text(slurm_conf(self.folder, host, os.cpu_count() or 1, memory))
        try:
            self._start("/usr/sbin/slurmctld", self.folder / "slurmctld.pid")
            self._start("/usr/sbin/slurmd", self.folder / "slurmd.pid")
            if not _wait(self._node_idle, 30):
                raise SlurmStartError(f"the node did not come up idle: {self.command(['sinfo']).stdout}")
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _start(self, daemon: str, pid_file: Path) -> None:
        result = _run([daemon, "-f", str(self.conf)], env=self.env)
        if result.returncode != 0:
            raise SlurmStartError(f"{daemon} failed to start: {result.stderr.strip()}")
        self._pid_files.append(pid_file)
        if not _wait(pid_file.exists, 10):
            raise SlurmStartError(f"{daemon} wrote no pid file; log: {self.log(Path(daemon).name)}")

    def _node_idle(self) -> bool:
        out = self.command(["sinfo", "-h", "-o", "%t"]).stdout.split()
        return bool(out) and all(state == "idle" for state in out)

    def command(self, command: list[str], **kwargs) -> subprocess.CompletedProcess:
        """A Slurm client command against this cluster."""
        return _run(command, env=self.env, **kwargs)

    def log(self, daemon: str) -> str:
        path = self.folder / f"{daemon}.log"
        return path.read_text()[-3000:] if path.exists() else ""

    def job_state(self, job_id: str) -> str:
        """The job's state (PENDING, RUNNING, COMPLETED, ...), or "" once it left the controller."""
        result = self.command(["scontrol", "show", "job", job_id])
        for field in result.stdout.split():
            if field.startswith("JobState="):
                return field.split("=", 1)[1]
        return ""

    def job_field(self, job_id: str, name: str) -> str:
        result = self.command(["scontrol", "show", "job", job_id])
        for field in result.stdout.split():
            if field.startswith(f"{name}="):
                return field.split("=", 1)[1]
        return ""

    def wait_state(self, job_id: str, states: set[str], timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            state = self.job_state(job_id)
            if state in states:
                return state
            time.sleep(1)
        raise TimeoutError(f"job {job_id} not in {sorted(states)} after {timeout:.0f}s (state {self.job_state(job_id)})")

    def close(self) -> None:
        """Stop the daemons this object started (by their pid files), and munged if it started it."""
        pid_files = list(reversed(self._pid_files))
        if self._started_munge:
            pid_files.append(Path("/run/munge/munged.pid"))
        for pid_file in pid_files:
            _stop_by_pid_file(pid_file)
        self._pid_files.clear()
        self._started_munge = False


def _stop_by_pid_file(pid_file: Path, timeout: float = 15.0) -> None:
    """SIGTERM the process a pid file names and wait until it is gone."""
    try:
        pid = int(pid_file.read_text().strip())
    except (FileNotFoundError, ValueError):
        return
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return

    def gone() -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        return Path(f"/proc/{pid}/status").exists() and "State:\tZ" in Path(f"/proc/{pid}/status").read_text()

    _wait(gone, timeout, 0.2)
