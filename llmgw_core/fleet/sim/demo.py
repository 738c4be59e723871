"""The demo fleet: a realistic GPU cluster started on this machine, no hardware needed.

Every simulated node is an SSH server on 127.0.0.1 (its own port, its own
generated host key pinned in a generated known_hosts, its own home) behind
which the REAL agent runs, deployed by the real deploy code, reading a
hardware profile our own simulator writes as a capture directory. Everything
above the capture directory — SSH, deployment, protocol, parsing, planning,
launch, supervision — is the code an operator runs against real nodes.

The fleet: two HGX H100 nodes on fabric `ib-a` (8 × 400 Gb/s rails, one rail
of the second node degraded), one GB200 NVL72 rack (18 trays × 4 GPUs in one
NVLink domain with IMEX up; one tray degraded, one not joined), an A100 node
with MIG carved, an L40S PCIe node and a CPU node.

Everything it starts is stopped when it stops, and a last sweep ends any
process still running from its folder, even after Ctrl-C.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import os
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import asyncssh
import yaml

from llmgw_core.fleet.loopback import LoopbackSshd
from llmgw_core.fleet.sim.nodes import SimNode, capture_adapters
from llmgw_core.fleet.ssh import SshSettings
from llmgw_core.inventory import Inventory, parse_inventory

if TYPE_CHECKING:
    from llmgw_core.fleet.sim.demo_slurm import DemoSlurm

NVL72_TRAYS = 18
NVL72_CLUSTER_UUID = "4f2c9a1e-7b3d-4c55-9e61-0a8d2b7c3f10"
NVL72_CLIQUE_ID = 32766
DEGRADED_TRAY = 7
NOT_JOINED_TRAY = 13
RAIL_RATE_GBPS = 400
DEMO_PREFIX = "llmgw-demo-"
OWNER_FILE = "owner.pid"


def demo_nodes() -> list[SimNode]:
    """The nodes of the demo fleet, in the order the console lists them."""
    nodes = [
        SimNode("h100-a-01", "hgx-h100", fabric="ib-a", labels={"rack": "r01"}),
        SimNode(
            "h100-a-02",
            "hgx-h100",
            options={"degraded_rail": "mlx5_5"},
            fabric="ib-a",
            labels={"rack": "r01"},
        ),
    ]
    for tray in range(1, NVL72_TRAYS + 1):
        state = "joined"
        if tray == DEGRADED_TRAY:
            state = "degraded"
        elif tray == NOT_JOINED_TRAY:
            state = "not-joined"
        nodes.append(
            SimNode(
                f"gb200-r1-t{tray:02d}",
                "gb200-tray",
                options={
                    "tray": tray,
                    "rack": "nvl72-r1",
                    "cluster_uuid": NVL72_CLUSTER_UUID,
                    "clique_id": NVL72_CLIQUE_ID,
                    "state": state,
                },
                labels={"rack": "nvl72-r1", "tray": str(tray)},
            )
        )
    nodes += [
        SimNode("a100-mig-01", "a100-mig", labels={"rack": "r02"}),
        SimNode("l40s-01", "l40s", labels={"rack": "r02"}),
        SimNode("cpu-01", "cpu", labels={"rack": "r03"}),
    ]
    return nodes


@dataclass
class DemoFleet:
    """The running demo fleet: its servers, and the inventory that reaches them.

    Attributes:
        root: the folder holding everything (homes, captures, keys, known_hosts).
        inventory: an ordinary inventory of the demo nodes (also in `root/inventory.yaml`).
        settings: SSH settings with the generated client key and known_hosts.
    """

    root: Path
    servers: dict[str, LoopbackSshd]
    inventory: Inventory
    settings: SshSettings
    slurm: DemoSlurm | None = None
    """Its Slurm cluster and login node (`demo up --slurm`), else None."""
    _stopped: bool = False

    async def stop(self, spare: Iterable[int] = ()) -> None:
        """Stop every server and everything still running from the demo's folder.

        Args:
            spare: processes that name the folder and must live on (the
                `demo down` that asked for the stop).
        """
        if self._stopped:
            return
        self._stopped = True
        if self.slurm is not None:
            await self.slurm.stop()  # its jobs cancelled before the daemons go
        await asyncio.gather(*(server.stop() for server in self.servers.values()))
        sweep(self.root, spare=spare)
        atexit.unregister(sweep)


async def start_demo_fleet(
    root: Path | None = None,
    nodes: list[SimNode] | None = None,
    real_engines: Mapping[str, Mapping[str, str]] | None = None,
    *,
    slurm: bool = False,
) -> DemoFleet:
    """Write the captures and keys, start one SSH server per node; returns at once.

    The agents start when the console connects (it deploys them, as on any fleet).

    Args:
        root: the demo's folder (default: a new temporary one).
        nodes: the simulated nodes (default: `demo_nodes()`).
        real_engines: engines the CPU node runs for real, as the inventory's `engines:` names
            them (`{"vllm": {"bin": PATH}}`): its agent starts them on this machine instead
            of the sim engine (`demo_engines` reads them from the command line).
        slurm: also start a Slurm cluster of six nodes and its login node, as clusters
            `hgx` and `nvl` of the inventory (`llmgw_core.fleet.sim.demo_slurm`; Debian's
            Slurm packages must be installed).
    """
    from llmgw_agent.sim.profiles import write_profile

    sweep_abandoned(Path(tempfile.gettempdir()))
    root = root or Path(tempfile.mkdtemp(prefix=DEMO_PREFIX))
    root.mkdir(parents=True, exist_ok=True)
    (root / OWNER_FILE).write_text(str(os.getpid()), encoding="utf-8")
    atexit.register(sweep, root)
    nodes = nodes if nodes is not None else demo_nodes()
    client_key = asyncssh.generate_private_key("ssh-ed25519")
    authorized = client_key.export_public_key().decode()
    servers: dict[str, LoopbackSshd] = {}
    captures: dict[str, Path] = {}
    for node in nodes:
        folder = root / "nodes" / node.name
        options = {"hostname": node.name, **node.options}
        captures[node.name] = write_profile(node.profile, folder / "capture", **options)
        servers[node.name] = LoopbackSshd(
            home=folder / "home",
            host_key=asyncssh.generate_private_key("ssh-ed25519"),
            authorized_keys=authorized,
            env={
                "LLMGW_AGENT_STATE": str(folder / "home" / "state"),
                # A simulated node keeps weights in ~/models: its agent may watch them there.
                "LLMGW_AGENT_MODEL_DIRS": str(folder / "home" / "models"),
            },
            allow_forwarding=True,  # the console reaches engines' ports through SSH tunnels
        )
    await asyncio.gather(*(server.start() for server in servers.values()))
    key_file = root / "client_key"
    key_file.write_bytes(client_key.export_private_key())
    key_file.chmod(0o600)
    demo_slurm: DemoSlurm | None = None
    if slurm:
        from llmgw_core.fleet.sim.demo_slurm import start_demo_slurm

        try:
            demo_slurm = await start_demo_slurm(root / "slurm", authorized, key_file)
        except BaseException:
            await asyncio.gather(*(server.stop() for server in servers.values()))
            raise
    known_hosts = root / "known_hosts"
    logins = [demo_slurm.login] if demo_slurm is not None else []
    known_hosts.write_text(
        "".join(server.known_hosts_line() + "\n" for server in [*servers.values(), *logins]),
        encoding="utf-8",
    )
    document = {
        "nodes": [
            _inventory_entry(
                node, servers[node.name].port, captures[node.name], key_file, real_engines or {}
            )
            for node in nodes
        ],
        "known_hosts": str(known_hosts),
    }
    if demo_slurm is not None:
        document["clusters"] = demo_slurm.entries
    text = yaml.safe_dump(document, sort_keys=False)
    (root / "inventory.yaml").write_text(text, encoding="utf-8")
    inventory = parse_inventory(text, source=str(root / "inventory.yaml"), folder=root)
    settings = SshSettings(
        known_hosts=known_hosts,
        config_paths=(),
        client_keys=(client_key,),
        use_ssh_agent=False,
        max_handshakes=64,
        max_handshakes_per_server=64,  # asyncssh's servers have no MaxStartups
    )
    return DemoFleet(
        root=root, servers=servers, inventory=inventory, settings=settings, slurm=demo_slurm
    )


def _inventory_entry(
    node: SimNode,
    port: int,
    capture: Path,
    key_file: Path,
    real_engines: Mapping[str, Mapping[str, str]],
) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "name": node.name,
        "host": "127.0.0.1",
        "port": port,
        "identity_file": str(key_file),
        "replay": str(capture),
    }
    hcas = capture_adapters(capture)
    if node.fabric and hcas:
        entry["fabrics"] = [{"name": node.fabric, "hcas": hcas, "rate_gbps": RAIL_RATE_GBPS}]
    if node.labels:
        entry["labels"] = dict(node.labels)
    router = demo_router()
    engines: dict[str, Any] = {}
    if node.profile == "cpu" and router is not None:
        # The gateway's default node: it reports the vllm-router installed beside llmgw, as a
        # real node would (doctor names it; the gateway's front routes by itself).
        engines["router"] = {"bin": router}
    if node.profile == "cpu":
        engines.update({name: dict(where) for name, where in real_engines.items()})
    if engines:
        entry["engines"] = engines
    return entry


REAL_ENGINE_FORMS = {"vllm": "bin", "sglang": "python", "llama.cpp": "bin"}
"""How `--engine ENGINE=PATH` names each engine: vLLM's and llama-server's program, SGLang's
Python (llama-cpp-python's server: `llama.cpp=…/python3`)."""


def demo_engines(given: Iterable[str]) -> dict[str, dict[str, str]]:
    """`--engine ENGINE=PATH` values as the CPU node's inventory `engines:`.

    Raises:
        BadInput: an engine llmgw does not run, or a path that is not a program here.
    """
    from llmgw_core.errors import BadInput

    engines: dict[str, dict[str, str]] = {}
    for text in given:
        name, equals, path = text.partition("=")
        if name not in REAL_ENGINE_FORMS or not equals:
            raise BadInput(
                f"--engine {text!r} is not ENGINE=PATH with ENGINE one of "
                + ", ".join(REAL_ENGINE_FORMS),
                "for example --engine vllm=$HOME/venv/bin/vllm",
            )
        program = Path(path).expanduser()
        if not program.is_absolute() or not program.is_file() or not os.access(program, os.X_OK):
            raise BadInput(
                f"--engine {name}: {path!r} is not a program on this machine (an absolute path)",
                "give the path of the engine's executable",
            )
        form = REAL_ENGINE_FORMS[name]
        if name == "llama.cpp" and program.name.startswith("python"):
            form = "python"  # llama-cpp-python's server, run as `python3 -m llama_cpp.server`
        engines[name] = {form: str(program)}
    return engines


def demo_router() -> str | None:
    """The `vllm-router` installed beside this Python (the demo's CPU node reports it), if any."""
    beside = Path(sys.executable).parent / "vllm-router"
    if beside.is_file():
        return str(beside)
    return shutil.which("vllm-router")


def processes_rooted_in(root: Path, spare: Iterable[int] = ()) -> list[int]:
    """Our processes that run from `root`: cwd, command line or environment inside it."""
    marker = os.fsencode(str(root.resolve()))
    found = []
    spared = {os.getpid(), *spare}
    uid = os.getuid()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in spared:
            continue
        try:
            if entry.stat().st_uid != uid:
                continue
            cwd = os.fsencode(os.readlink(entry / "cwd"))
            if cwd.startswith(marker):
                found.append(int(entry.name))
                continue
            if marker in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
                continue
            if marker in (entry / "environ").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def sweep(root: Path, grace_s: float = 2.0, spare: Iterable[int] = ()) -> None:
    """End every process still running from `root` (TERM, then KILL), then remove it."""
    pids = processes_rooted_in(root, spare)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    while pids and time.monotonic() < deadline:
        time.sleep(0.05)
        pids = [pid for pid in pids if alive(pid)]
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    shutil.rmtree(root, ignore_errors=True)


def sweep_abandoned(folder: Path) -> list[Path]:
    """Sweep demo folders whose console died without cleaning up (killed, not interrupted).

    Its agents ended with it (their input closed), but shards run detached by
    design; this ends them and removes the folder. Returns what it swept.
    """
    swept = []
    for root in folder.glob(f"{DEMO_PREFIX}*"):
        try:
            owner = int((root / OWNER_FILE).read_text(encoding="utf-8").strip())
        except (OSError, ValueError):
            continue
        if owner != os.getpid() and not alive(owner):
            sweep(root)
            swept.append(root)
    return swept


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie does not: it only waits to be reaped)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            state = stat.read().rsplit(b")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != b"Z"
