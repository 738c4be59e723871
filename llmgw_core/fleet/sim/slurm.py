"""A real Slurm cluster on this machine, private to its user: Debian's slurmctld, one
`slurmd -N NAME` per node and its own munged, all in one folder. The test suite's
clusters and the demo's (`llmgw-tui demo up --slurm`) are started here.

Every daemon runs in the foreground as a child of the process that starts it, as the
current user (`SlurmUser` and `SlurmdUser` are that user: root is not needed), on loopback
ports of its own, with its state, spool, logs, pid files and munge key and socket in the
folder. Only that user can talk to it: munged's socket and key are in the folder. Nodes
share `NodeHostname=localhost` and differ by `Port=` (Debian's 22.05 build runs several
slurmd on one host). `SlurmdParameters=config_overrides` makes each slurmd report the CPUs
and memory its line declares, so a two-core machine holds four "eight-CPU" nodes without
Slurm draining them for "Low socket*core*thread count".

GPUs are GRES backed by device files, as on a real node: Slurm refuses a `File=` that is
not a character or block device ("is not a valid character or block device, fix your
gres.conf") and sets no `CUDA_VISIBLE_DEVICES` for a GRES without files, so each card is
a symbolic link to /dev/null (a character device every user may stat; no `mknod`, no
root). A job given `--gres=gpu:h100:2` then sees `CUDA_VISIBLE_DEVICES=0,1`.

`SlurmCluster.stop` cancels every job, ends every daemon, and ends any process that still
carries this cluster's `SLURM_CONF` in its environment (a job's step outlives its slurmd
when it is killed): nothing is left running.
"""

from __future__ import annotations

import getpass
import os
import random
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "scontrol", "sinfo", "squeue", "scancel")
PORTS_FROM = 28000
PORTS_TO = 32000
"""Where a cluster's ports are looked for by default: below the kernel's ephemeral range
(32768 on), whose ports an outgoing connection may take between the probe and the bind, and
above the ports the test suite hands its own servers."""


@dataclass(frozen=True)
class NodeLine:
    """One node of the private cluster as slurm.conf and gres.conf declare it."""

    name: str
    cpus: int
    memory_mib: int
    features: tuple[str, ...]
    gpu_type: str = ""
    gpu_count: int = 0


@dataclass(frozen=True)
class PartitionLine:
    """One partition: its nodes, whether it is the default, its time limit in minutes."""

    name: str
    nodes: tuple[str, ...]
    default: bool = False
    max_time_min: int | None = None


def slurm_missing() -> str:
    """Why no cluster can start here ("" when every daemon and client is installed)."""
    absent = [name for name in (*DAEMONS, *CLIENTS) if shutil.which(name) is None]
    for name in ("munged", "slurmctld", "slurmd"):
        if name in absent and Path("/usr/sbin", name).exists():
            absent.remove(name)
    if absent:
        return (
            f"Slurm is not installed here ({', '.join(absent)} missing): "
            "apt-get install slurmctld slurmd slurm-client munge"
        )
    return ""


def _daemon(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin", name))


def free_ports(count: int, first: int = PORTS_FROM, last: int = PORTS_TO) -> list[int]:
    """`count` loopback ports nothing listens on, between `first` and `last`, in random order
    (two clusters started at once rarely try the same; the suite gives each of its workers
    a range of its own as well)."""
    candidates = list(range(first, last))
    random.SystemRandom().shuffle(candidates)  # not the seeded generator a test run resets
    found: list[int] = []
    for port in candidates:
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
        found.append(port)
        if len(found) == count:
            return found
    raise RuntimeError(f"no {count} free ports between {first} and {last - 1}")


@dataclass
class SlurmCluster:
    """A running private cluster: its folder, its slurm.conf and its daemons.

    Attributes:
        root: the folder holding everything the cluster writes.
        conf: its slurm.conf (clients find it through `SLURM_CONF`).
        nodes, partitions: what it declares.
        started_s: how long it took from the first daemon to every node idle.
    """

    root: Path
    conf: Path
    nodes: tuple[NodeLine, ...]
    partitions: tuple[PartitionLine, ...]
    sockets: Path | None = None
    """A short folder of its own for the Unix sockets (munged's, each job step's in the
    spool) where `root`'s path is too long for them; removed on `stop`."""
    started_s: float = 0.0
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def env(self) -> dict[str, str]:
        """The environment a Slurm client needs to talk to this cluster."""
        return {**os.environ, "SLURM_CONF": str(self.conf)}

    def run(self, *argv: str, check: bool = True, timeout_s: float = 15) -> str:
        """Run a Slurm client against this cluster and return what it printed.

        Raises:
            subprocess.CalledProcessError: when `check` and the client failed.
        """
        done = subprocess.run(
            list(argv), env=self.env, capture_output=True, text=True, timeout=timeout_s
        )
        if check and done.returncode != 0:
            raise subprocess.CalledProcessError(
                done.returncode, list(argv), done.stdout, done.stderr
            )
        return done.stdout if check else done.stdout + done.stderr

    def wait_for(self, what: str, ready: Callable[[], bool], timeout_s: float = 20.0) -> None:
        """Poll `ready()` every 0.1 s until it is true.

        Raises:
            TimeoutError: naming `what` and the last lines of the controller's log.
        """
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if ready():
                return
            time.sleep(0.1)
        raise TimeoutError(f"{what} within {timeout_s:.0f} s; {self._log_tail()}")

    def node_states(self) -> dict[str, str]:
        """Each node's state as sinfo prints it (`idle`, `mixed`, `drained`…)."""
        out = self.run("sinfo", "-h", "-N", "-o", "%N %T", check=False)
        states: dict[str, str] = {}
        for line in out.splitlines():
            parts = line.split()
            if len(parts) == 2:
                states[parts[0]] = parts[1]
        return states

    def queue(self) -> list[str]:
        """The ids of the jobs still in the queue."""
        return self.run("squeue", "-h", "-o", "%i", check=False).split()

    def cancel_all(self, timeout_s: float = 15.0) -> None:
        """Cancel every job and wait until the queue is empty and no node is completing."""
        if self.queue():
            self.run("scancel", "--user", getpass.getuser(), check=False)
        self.wait_for(
            "the queue to empty",
            lambda: (
                not self.queue()
                and not any("comp" in state for state in self.node_states().values())
            ),
            timeout_s,
        )

    def stop(self) -> None:
        """End every daemon and every process of this cluster's jobs; leave nothing running."""
        if self.processes and all(process.poll() is None for process in self.processes):
            # The daemons go next whatever the queue still holds.
            with suppress(TimeoutError, subprocess.SubprocessError, OSError):
                self.cancel_all(timeout_s=10)
        for process in reversed(self.processes):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in reversed(self.processes):
            try:
                process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(timeout=5)
        # A job's slurmstepd, its script and their children outlive the daemons when a
        # cancel did not finish first (seen: slurmstepd, slurm_script and sleep left running).
        for pid in self.stray_pids():
            with suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while self.stray_pids() and time.monotonic() < deadline:
            time.sleep(0.05)
        if self.sockets is not None:
            shutil.rmtree(self.sockets, ignore_errors=True)

    def stray_pids(self) -> list[int]:
        """Processes other than the daemons that carry this cluster's SLURM_CONF (its jobs'
        steps and scripts, slurmctld's slurmscriptd): started by this cluster, so ending them
        ends nobody else's. A zombie's environment reads empty, so it is never counted."""
        marker = f"SLURM_CONF={self.conf}".encode()
        ours = {process.pid for process in self.processes}
        found = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit() or int(entry.name) in ours | {os.getpid()}:
                continue
            try:
                environ = (entry / "environ").read_bytes()
            except OSError:
                continue
            if marker in environ.split(b"\0"):
                found.append(int(entry.name))
        return found

    def _log_tail(self) -> str:
        log = self.root / "log" / "slurmctld.log"
        try:
            lines = log.read_text(errors="replace").splitlines()[-5:]
        except OSError:
            return "slurmctld wrote no log"
        return "slurmctld's log ends: " + " | ".join(lines)


SOCKET_PATH_MAX = 107
"""The longest path a Unix socket may have (`sun_path` is 108 bytes with its terminator)."""


def _sockets_folder(root: Path, nodes: tuple[NodeLine, ...]) -> Path | None:
    """A short temporary folder for the sockets when those under `root` would be too long:
    a step's socket is `SPOOL/NODE/NODE_JOB.STEP` (slurmstepd refuses a longer one: "Unix
    socket path … is too long"), with up to 10 digits each for the job and the step."""
    longest = max((len(node.name) for node in nodes), default=0)
    if len(str(root / "spool")) + 2 * longest + 24 <= SOCKET_PATH_MAX:
        return None
    return Path(tempfile.mkdtemp(prefix="llmgw-slurm-"))  # 0700, in /tmp


def _write_conf(
    root: Path,
    nodes: tuple[NodeLine, ...],
    partitions: tuple[PartitionLine, ...],
    ports: list[int],
    address: str,
    name: str,
    sockets: Path,
) -> Path:
    user = getpass.getuser()
    lines = [
        f"ClusterName={name}",
        "SlurmctldHost=localhost(127.0.0.1)",
        f"SlurmctldPort={ports[0]}",
        f"SlurmUser={user}",
        f"SlurmdUser={user}",
        "AuthType=auth/munge",
        f"AuthInfo=socket={sockets}/run/munge.sock",
        "CredType=cred/munge",
        f"StateSaveLocation={root}/state",
        f"SlurmdSpoolDir={sockets}/spool/%n",
        f"SlurmctldPidFile={root}/run/slurmctld.pid",
        f"SlurmdPidFile={root}/run/slurmd-%n.pid",
        f"SlurmctldLogFile={root}/log/slurmctld.log",
        f"SlurmdLogFile={root}/log/slurmd-%n.log",
        # No cgroups in a container, no accounting daemon: process groups and nothing.
        "ProctrackType=proctrack/pgid",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none",
        "JobCompType=jobcomp/none",
        "SwitchType=switch/none",
        "MpiDefault=none",
        "MailProg=/bin/true",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core_Memory",
        # Without a default a job takes its nodes' whole memory and no second job fits.
        "DefMemPerCPU=1000",
        "GresTypes=gpu",
        "SchedulerType=sched/backfill",
        "SchedulerParameters=batch_sched_delay=0",
        "SlurmdParameters=config_overrides",
        "ReturnToService=2",
        "SlurmctldTimeout=10",
        "SlurmdTimeout=60",
        "InactiveLimit=0",
        "KillWait=1",
        # A finished job's state and reason stay readable for a minute (a site's default is
        # 300 s): a console that sees a job's node go asks the controller why it ended.
        "MinJobAge=60",
        "MessageTimeout=5",
    ]
    if address == "127.0.0.1":
        # Each daemon listens on loopback, not on every interface. A slurmd binds the address
        # `localhost` resolves to, so a NodeAddr of another loopback address (the suite's,
        # one per worker) keeps the default, every interface, for its slurmctld to reach it.
        lines.append("CommunicationParameters=NoCtldInAddrAny,NoInAddrAny")
    gres = ["AutoDetect=off"]
    for index, node in enumerate(nodes):
        line = (
            f"NodeName={node.name} NodeHostname=localhost NodeAddr={address} "
            f"Port={ports[1 + index]} CPUs={node.cpus} RealMemory={node.memory_mib} "
            f"Feature={','.join(node.features)} State=UNKNOWN"
        )
        if node.gpu_count:
            line += f" Gres=gpu:{node.gpu_type}:{node.gpu_count}"
            cards = root / "dev" / node.name
            cards.mkdir(parents=True)
            for card in range(node.gpu_count):
                (cards / f"gpu{card}").symlink_to("/dev/null")
            gres.append(
                f"NodeName={node.name} Name=gpu Type={node.gpu_type} "
                f"File={cards}/gpu[0-{node.gpu_count - 1}]"
            )
        lines.append(line)
        (sockets / "spool" / node.name).mkdir(parents=True)
    for partition in partitions:
        limit = "INFINITE" if partition.max_time_min is None else str(partition.max_time_min)
        lines.append(
            f"PartitionName={partition.name} Nodes={','.join(partition.nodes)} "
            f"Default={'YES' if partition.default else 'NO'} MaxTime={limit} State=UP"
        )
    (root / "gres.conf").write_text("\n".join(gres) + "\n")
    conf = root / "slurm.conf"
    conf.write_text("\n".join(lines) + "\n")
    return conf


def _start_munged(root: Path, sockets: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    key = root / "munge.key"
    key.write_bytes(secrets.token_bytes(1024))
    key.chmod(0o600)
    socket_path = sockets / "run" / "munge.sock"
    # --force: munged refuses a socket whose folders are not searchable by everyone
    # ("Socket is inaccessible"), which a 0700 folder is not.
    argv = [
        _daemon("munged"), "--foreground", "--force", f"--key-file={key}",
        f"--socket={socket_path}", f"--pid-file={root}/run/munged.pid",
        f"--log-file={root}/log/munged.log", f"--seed-file={root}/run/munged.seed",
    ]  # fmt: skip
    process = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 10
    while not socket_path.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"munged did not start: see {root}/log/munged.log")
        time.sleep(0.02)
    return process


def start_cluster(
    root: Path,
    nodes: tuple[NodeLine, ...],
    partitions: tuple[PartitionLine, ...],
    *,
    ports: list[int] | None = None,
    address: str = "127.0.0.1",
    name: str = "llmgwdemo",
    timeout_s: float = 30.0,
) -> SlurmCluster:
    """Write the configuration into `root`, start munged, slurmctld and every slurmd, and
    wait until every node is idle.

    Args:
        ports: slurmctld's port, then one per node (default: `free_ports`).
        address: the `NodeAddr` of every node: a job's engines bind it.
        name: the cluster's `ClusterName`.

    Raises:
        RuntimeError: a daemon could not start (the message names its log).
        TimeoutError: the nodes were not all idle within `timeout_s`.
    """
    began = time.monotonic()
    root.mkdir(parents=True, exist_ok=True)
    root.chmod(0o700)  # its munge key and socket: no other user may reach them
    short = _sockets_folder(root, nodes)
    sockets = short or root
    for folder in ("state", "log", "run", "dev"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    for folder in ("run", "spool"):
        (sockets / folder).mkdir(parents=True, exist_ok=True)
    ports = ports or free_ports(1 + len(nodes))
    conf = _write_conf(root, nodes, partitions, ports, address, name, sockets)
    cluster = SlurmCluster(root=root, conf=conf, nodes=nodes, partitions=partitions, sockets=short)
    env = cluster.env
    try:
        cluster.processes.append(_start_munged(root, sockets, env))

        def daemon(*argv: str) -> subprocess.Popen[bytes]:
            return subprocess.Popen(
                [_daemon(argv[0]), *argv[1:]],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.STDOUT,
                env=env,
            )

        # -i: start clean, whatever an earlier controller left in the state folder.
        cluster.processes.append(daemon("slurmctld", "-D", "-i"))
        cluster.wait_for(
            "slurmctld to answer",
            lambda: (
                subprocess.run(
                    ["scontrol", "ping"], env=env, capture_output=True, text=True
                ).stdout.count("UP")
                > 0
            ),
            timeout_s,
        )
        for node in nodes:
            cluster.processes.append(daemon("slurmd", "-D", "-N", node.name))
        names = {node.name for node in nodes}
        cluster.wait_for(
            "every node to be idle",
            lambda: (
                (states := cluster.node_states()).keys() >= names
                and all(states[name] == "idle" for name in names)
            ),
            timeout_s,
        )
    except BaseException:
        cluster.stop()
        raise
    cluster.started_s = time.monotonic() - began
    return cluster
