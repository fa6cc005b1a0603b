"""Real Slurm clusters for tests (Debian's slurm-wlm 22.05 + munge; docs/experiments.md, "The local Slurm the tests start").

`LocalSlurm` installs the packages when missing (apt-get, as root), makes sure munge authenticates, writes a
private slurm.conf (its own ports, spool and state folders under a temp dir; SLURM_CONF points every Slurm
command at it, so no /etc/slurm file is touched), starts slurmctld and slurmd, and stops exactly the daemons
it started (by their pid files) on close.

`TwoNodeSlurm` is the same with two nodes on this one machine: a bridge the test creates with the controller's
address, and per node a network namespace joined to it by a veth pair (private 10.231.<n>.0/24 addresses, used
only on that bridge), one slurmd per namespace (`nsenter --net`, not `ip netns exec`: that remounts /sys).
Nodes share the file system as cluster nodes share a network file system. close() also cancels the cluster's
jobs, stops every process left inside its namespaces (by PID) and deletes the namespaces and the bridge.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

PACKAGES = ("slurm-wlm", "munge", "iproute2")
MUNGE_KEY = Path("/etc/munge/munge.key")
MUNGE_DIRS = ("/etc/munge", "/var/log/munge", "/run/munge", "/var/lib/munge")


class SlurmUnavailable(RuntimeError):
    """Slurm cannot be installed on this machine (no root, no apt-get): the reason is the message."""


class SlurmStartError(RuntimeError):
    """Slurm is installed but the one-node cluster did not come up (a real failure, not a skip)."""


def _run(command: list[str], **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run(command, capture_output=True, text=True, **kwargs)


def install_packages() -> None:
    """apt-get install slurm-wlm munge iproute2 when one is missing (about 10-15 s)."""
    if shutil.which("slurmctld") and shutil.which("munged") and shutil.which("ip"):
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


def slurm_conf(folder: Path, host: str, cpus: int, memory_mb: int, nodes: dict[str, str] | None = None,
               controller_address: str | None = None) -> str:
    """The configuration of SLURM_LOCAL.md, with private ports and folders.

    One node named `host` by default; `nodes` (name -> address) gives one node per entry, each slurmd with its
    own spool, pid and log file (`%n`), and the controller reachable at `controller_address`.
    """
    suffix = ".%n" if nodes else ""
    node_lines = ([f"NodeName={name} NodeAddr={address} NodeHostname={name} CPUs={cpus} RealMemory={memory_mb} "
                   "State=UNKNOWN" for name, address in nodes.items()] if nodes else
                  [f"NodeName={host} CPUs={cpus} RealMemory={memory_mb} State=UNKNOWN"])
    node_names = ",".join(nodes) if nodes else host
    return "\n".join([
        "ClusterName=daratest",
        f"SlurmctldHost={host}({controller_address})" if controller_address else f"SlurmctldHost={host}",
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
        f"SlurmdSpoolDir={folder}/slurmd{suffix}",
        f"SlurmctldPidFile={folder}/slurmctld.pid",
        f"SlurmdPidFile={folder}/slurmd{suffix}.pid",
        f"SlurmctldLogFile={folder}/slurmctld.log",
        f"SlurmdLogFile={folder}/slurmd{suffix}.log",
        *node_lines,
        f"PartitionName=debug Nodes={node_names} Default=YES MaxTime=INFINITE State=UP",
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
        try:
            self._write_conf(socket.gethostname().split(".")[0], max(1000, int(_memory_mb() * 0.8)))
            self._start(["/usr/sbin/slurmctld"], self.folder / "slurmctld.pid", "slurmctld")
            self._start_nodes()
            if not _wait(self._node_idle, 30):
                raise SlurmStartError(f"the nodes did not come up idle: {self.command(['sinfo']).stdout}")
        except BaseException:
            self.close()
            raise
        return self

    def _write_conf(self, host: str, memory_mb: int) -> None:
        for sub in ("slurmctld", "slurmd"):
            (self.folder / sub).mkdir(parents=True, exist_ok=True)
        self.conf.write_text(slurm_conf(self.folder, host, os.cpu_count() or 1, memory_mb))

    def _start_nodes(self) -> None:
        self._start(["/usr/sbin/slurmd"], self.folder / "slurmd.pid", "slurmd")

    def __exit__(self, *exc) -> None:
        self.close()

    def _start(self, command: list[str], pid_file: Path, log_name: str) -> None:
        """Start a daemon (`command`: the daemon and its own flags) and remember its pid file."""
        result = _run([*command, "-f", str(self.conf)], env=self.env)
        if result.returncode != 0:
            raise SlurmStartError(f"{' '.join(command)} failed to start: {result.stderr.strip()}")
        self._pid_files.append(pid_file)
        if not _wait(pid_file.exists, 10):
            raise SlurmStartError(f"{log_name} wrote no pid file; log: {self.log(log_name)}")

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
        return self.job_field(job_id, "JobState")

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
        """Cancel the cluster's jobs (their steps end with them), then stop the daemons this object started (by
        their pid files), and munged if it started it."""
        if self._pid_files:
            self.command(["scancel", "--full", "--partition=debug"])
            _wait(lambda: not self.command(["squeue", "-h"]).stdout.strip(), 60)
        for pid_file in reversed(self._pid_files):
            _stop_by_pid_file(pid_file)
        # munged is shared by every Slurm on the machine: another test session's cluster may have come to rely on
        # the munged this one started, so it is left running while any other Slurm daemon is
        if self._started_munge and not _run(["pgrep", "-x", "slurmctld|slurmd"]).stdout.strip():
            _stop_by_pid_file(Path("/run/munge/munged.pid"))
        self._pid_files.clear()
        self._started_munge = False


class TwoNodeSlurm(LocalSlurm):
    """Two Slurm nodes `n1`, `n2` on this machine, each in its own network namespace on a private bridge.

    Addresses: the controller 10.231.<net>.1 on the bridge, node k 10.231.<net>.1k on the interface `dara0` in
    its namespace (the same interface name on every node, as on a cluster whose nodes share an interface name:
    GLOO_SOCKET_IFNAME=dara0 binds every rank to it). `net` comes from this process id, so two test sessions do
    not share a bridge. Nothing outside the bridge and the namespaces is addressed.
    """

    INTERFACE = "dara0"
    NODE_NAMES = ("n1", "n2")

    def __init__(self, folder: str | os.PathLike, cpus_per_node: int = 2):
        super().__init__(folder)
        self.net = 20 + os.getpid() % 200
        self.bridge = f"darabr{self.net}"
        self.controller_address = f"10.231.{self.net}.1"
        self.cpus_per_node = cpus_per_node
        self.namespaces = {name: f"dara{self.net}{name}" for name in self.NODE_NAMES}
        self.addresses = {name: f"10.231.{self.net}.1{k}" for k, name in enumerate(self.NODE_NAMES, start=1)}
        self._links: list[str] = []

    def _write_conf(self, host: str, memory_mb: int) -> None:
        self._make_network()
        (self.folder / "slurmctld").mkdir(parents=True, exist_ok=True)
        for name in self.NODE_NAMES:
            (self.folder / f"slurmd.{name}").mkdir(parents=True, exist_ok=True)
        per_node = max(1000, memory_mb // len(self.NODE_NAMES))
        self.conf.write_text(slurm_conf(self.folder, host, self.cpus_per_node, per_node, nodes=self.addresses,
                                        controller_address=self.controller_address))

    def _start_nodes(self) -> None:
        for name, namespace in self.namespaces.items():
            self._start(["nsenter", f"--net=/var/run/netns/{namespace}", "/usr/sbin/slurmd", "-N", name],
                        self.folder / f"slurmd.{name}.pid", f"slurmd.{name}")

    def _ip(self, *args: str) -> None:
        result = _run(["ip", *args])
        if result.returncode != 0:
            raise SlurmStartError(f"ip {' '.join(args)} failed: {result.stderr.strip()}")

    def _make_network(self) -> None:
        self._links.append(self.bridge)
        self._ip("link", "add", self.bridge, "type", "bridge")
        self._ip("addr", "add", f"{self.controller_address}/24", "dev", self.bridge)
        self._ip("link", "set", self.bridge, "up")
        for k, (name, namespace) in enumerate(self.namespaces.items(), start=1):
            host_end, node_end = f"darav{self.net}h{k}", f"darav{self.net}n{k}"
            self._ip("netns", "add", namespace)
            self._ip("link", "add", host_end, "type", "veth", "peer", "name", node_end)
            self._links.append(host_end)
            self._ip("link", "set", host_end, "master", self.bridge)
            self._ip("link", "set", host_end, "up")
            self._ip("link", "set", node_end, "netns", namespace)
            self._ip("-n", namespace, "link", "set", node_end, "name", self.INTERFACE)
            self._ip("-n", namespace, "addr", "add", f"{self.addresses[name]}/24", "dev", self.INTERFACE)
            self._ip("-n", namespace, "link", "set", self.INTERFACE, "up")
            self._ip("-n", namespace, "link", "set", "lo", "up")

    def namespace_pids(self) -> list[int]:
        """Processes running inside this cluster's namespaces (all of them started by it or its jobs)."""
        pids = []
        for namespace in self.namespaces.values():
            out = _run(["ip", "netns", "pids", namespace]).stdout
            pids += [int(pid) for pid in out.split() if pid.isdigit()]
        return pids

    def close(self) -> None:
        """Cancel the jobs, stop the daemons, then every process left in the namespaces; delete the network."""
        super().close()
        leftovers = self.namespace_pids()
        for pid in leftovers:
            _signal(pid, signal.SIGTERM)
        if not _wait(lambda: not self.namespace_pids(), 15, 0.3):
            for pid in self.namespace_pids():
                _signal(pid, signal.SIGKILL)
            _wait(lambda: not self.namespace_pids(), 10, 0.3)
        for namespace in self.namespaces.values():
            if Path(f"/var/run/netns/{namespace}").exists():
                _run(["ip", "netns", "del", namespace])
        for link in reversed(self._links):
            _run(["ip", "link", "del", link])  # a host veth end is usually gone with its namespace already
        self._links.clear()


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass


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
