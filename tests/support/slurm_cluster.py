"""A real Slurm cluster on this machine, private to a test: Debian's slurmctld, one
`slurmd -N NAME` per node and its own munged, all in one temporary folder.

Every daemon runs in the foreground as a child of the test process, as the current user
(`SlurmUser` and `SlurmdUser` are that user: root is not needed), on loopback ports of its
own, with its state, spool, logs, pid files and munge key and socket in the folder. Nodes
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
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

DAEMONS = ("munged", "slurmctld", "slurmd")
CLIENTS = ("sbatch", "scontrol", "sinfo", "squeue", "scancel")
PORTS_FROM = 27100
"""Slurm's ports come from a block of their own, below the kernel's ephemeral range and above
the demo gateways' (kept_demo's 21000 to 27000)."""
PORTS_TO = 28000
WORKER_SHARES = 8
"""The block is cut into this many shares, one an xdist worker (112 ports each)."""


def node_address() -> str:
    """The loopback address this worker's cluster gives its nodes (`NodeAddr`), one a
    pytest-xdist worker: a job's engines bind the address Slurm gives their node from the
    same first port, so two workers' clusters on 127.0.0.1 took each other's engine port
    (a replica answered health on the other's engine, and its `ask` hung)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    return f"127.0.0.{11 + (int(worker) if worker.isdigit() else 0) % 200}"


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


NODES = (
    NodeLine("h100-1", 8, 64000, ("h100", "nvlink"), "h100", 8),
    NodeLine("h100-2", 8, 64000, ("h100", "nvlink"), "h100", 8),
    NodeLine("a100-1", 8, 32000, ("a100",), "a100", 4),
    NodeLine("cpu-1", 4, 16000, ("cpu",)),
)
PARTITIONS = (
    PartitionLine("gpu", ("h100-1", "h100-2", "a100-1"), default=True),
    PartitionLine("cpu", ("cpu-1",), max_time_min=60),
)


def slurm_missing() -> str:
    """Why no cluster can start here ("" when every daemon and client is installed)."""
    absent = [name for name in (*DAEMONS, *CLIENTS) if shutil.which(name) is None]
    for name in ("munged", "slurmctld", "slurmd"):
        if name in absent and Path("/usr/sbin", name).exists():
            absent.remove(name)
    if absent:
        return (
            f"Slurm is not installed here ({', '.join(absent)} missing): "
            "apt-get install slurmctld slurmd slurm-client munge (as .ci/run does)"
        )
    return ""


def _daemon(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin", name))


def _free_ports(count: int) -> list[int]:
    """`count` loopback ports nothing listens on, from this xdist worker's share of Slurm's
    block (two workers' clusters starting at once once took the same port, and one
    slurmctld then reached the other's slurmd, which its munge key did not open), in
    random order so two suites on one machine rarely try the same."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    share = (PORTS_TO - PORTS_FROM) // WORKER_SHARES
    first = PORTS_FROM + (int(worker) if worker.isdigit() else 0) % WORKER_SHARES * share
    candidates = list(range(first, first + share))
    random.shuffle(candidates)
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
    raise RuntimeError(f"no {count} free ports between {first} and {first + share - 1}")


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


def _write_conf(
    root: Path,
    nodes: tuple[NodeLine, ...],
    partitions: tuple[PartitionLine, ...],
    ports: list[int],
) -> Path:
    user = getpass.getuser()
    lines = [
        "ClusterName=llmgwtest",
        "SlurmctldHost=localhost(127.0.0.1)",
        f"SlurmctldPort={ports[0]}",
        f"SlurmUser={user}",
        f"SlurmdUser={user}",
        "AuthType=auth/munge",
        f"AuthInfo=socket={root}/run/munge.sock",
        "CredType=cred/munge",
        f"StateSaveLocation={root}/state",
        f"SlurmdSpoolDir={root}/spool/%n",
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
    gres = ["AutoDetect=off"]
    for index, node in enumerate(nodes):
        line = (
            f"NodeName={node.name} NodeHostname=localhost NodeAddr={node_address()} "
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
        (root / "spool" / node.name).mkdir(parents=True)
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


def _start_munged(root: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    key = root / "munge.key"
    key.write_bytes(secrets.token_bytes(1024))
    key.chmod(0o600)
    socket_path = root / "run" / "munge.sock"
    # --force: munged refuses a socket whose folders are not searchable by everyone
    # ("Socket is inaccessible"), which a test's 0700 temporary folder is not.
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
    nodes: tuple[NodeLine, ...] = NODES,
    partitions: tuple[PartitionLine, ...] = PARTITIONS,
    timeout_s: float = 30.0,
) -> SlurmCluster:
    """Write the configuration into `root`, start munged, slurmctld and every slurmd, and
    wait until every node is idle.

    Raises:
        RuntimeError: a daemon could not start (the message names its log).
        TimeoutError: the nodes were not all idle within `timeout_s`.
    """
    began = time.monotonic()
    for folder in ("state", "log", "run", "spool", "dev"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    conf = _write_conf(root, nodes, partitions, _free_ports(1 + len(nodes)))
    cluster = SlurmCluster(root=root, conf=conf, nodes=nodes, partitions=partitions)
    env = cluster.env
    try:
        cluster.processes.append(_start_munged(root, env))
        quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.STDOUT, "env": env}
        # -i: start clean, whatever an earlier controller left in the state folder.
        cluster.processes.append(subprocess.Popen([_daemon("slurmctld"), "-D", "-i"], **quiet))
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
            cluster.processes.append(subprocess.Popen([_daemon("slurmd"), "-D", "-N", node.name], **quiet))  # fmt: skip
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


@contextmanager
def slurm_cluster(
    root: Path,
    nodes: tuple[NodeLine, ...] = NODES,
    partitions: tuple[PartitionLine, ...] = PARTITIONS,
) -> Iterator[SlurmCluster]:
    """A private cluster for the duration of a `with` block, stopped whatever happens."""
    cluster = start_cluster(root, nodes, partitions)
    try:
        yield cluster
    finally:
        cluster.stop()
