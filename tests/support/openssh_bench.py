"""The fault matrix's bench on OpenSSH's sshd: the server operators really run.

Three nodes, each its own sshd on a loopback port with its own home and the
agent's state in its own `work_dir`, replaying an HGX H100 capture. The same
fault functions and the same invariant check as on the demo fleet's `Bench`.
The sshd is the fleet tests' (`tests/fleet/conftest.py`), which skips, saying
why, where sshd is not installed.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import asyncssh
from bench import NODES, Bench, LoopThread
from fleet.conftest import ClientKey, OpenSshd, free_port

from llmgw_agent.sim.profiles import write_profile
from llmgw_core.fleet.ssh import SshSettings
from llmgw_core.inventory import parse_inventory


class OpenSshNode:
    """One node's sshd, stopped and started as a node that crashes and comes back."""

    def __init__(self, sshd: OpenSshd, state: Path) -> None:
        self.sshd = sshd
        self.port = sshd.ports[0]
        self.env = {"LLMGW_AGENT_STATE": str(state)}
        self.connections: set[object] = set()

    async def stop(self) -> None:
        self.sshd.crash()

    async def start(self, port: int) -> int:
        self.sshd.start()
        return port


@dataclass
class OpenSshFleet:
    """What `Bench` needs of a fleet: its nodes, inventory and SSH settings."""

    root: Path
    servers: dict[str, OpenSshNode]
    inventory: object
    settings: SshSettings

    async def stop(self) -> None:
        from llmgw_core.fleet.sim.demo import sweep

        for node in self.servers.values():
            node.sshd.stop()
        sweep(self.root / "nodes")


class OpenSshBench(Bench):
    """The matrix's bench on three OpenSSH nodes."""

    def __init__(self, root: Path, *, router: str | None = None) -> None:
        """`router`: a vllm-router every node's inventory entry names (for a gateway)."""
        self.root = root
        self.loop = LoopThread()
        self.consoles = []
        key = asyncssh.generate_private_key("ssh-ed25519")
        key_path = root / "client_key"
        key_path.write_bytes(key.export_private_key())
        key_path.chmod(0o600)
        client = ClientKey(key=key, path=key_path)
        servers: dict[str, OpenSshNode] = {}
        entries, known = [], ""
        for name in NODES:
            folder = root / "nodes" / name
            sshd = OpenSshd(folder / "sshd", client, ports=[free_port()]).start()
            capture = write_profile("hgx-h100", folder / "capture", hostname=name)
            state = folder / "state"
            servers[name] = OpenSshNode(sshd, state)
            known += sshd.known_hosts_lines()
            hcas = sorted(p.name for p in (capture / "sys" / "class" / "infiniband").iterdir())
            entries.append(
                f"  - name: {name}\n    host: 127.0.0.1\n    port: {sshd.ports[0]}\n"
                f"    user: {sshd.user}\n    identity_file: {key_path}\n"
                f"    replay: {capture}\n    work_dir: {state}\n"
                f"    fabrics: [{{name: ib-a, hcas: [{', '.join(hcas)}], rate_gbps: 400}}]\n"
                + (f"    engines: {{router: {{bin: {router}}}}}\n" if router else "")
            )
        (root / "known_hosts").write_text(known)
        text = f"known_hosts: {root / 'known_hosts'}\nnodes:\n" + "".join(entries)
        (root / "inventory.yaml").write_text(text)
        inventory = parse_inventory(text, source=str(root / "inventory.yaml"), folder=root)
        settings = SshSettings(
            known_hosts=root / "known_hosts",
            config_paths=(),
            client_keys=(key,),
            use_ssh_agent=False,
            connect_timeout_s=5.0,
            keepalive_interval_s=1.0,
            keepalive_count_max=2,
        )
        self.demo = OpenSshFleet(root, servers, inventory, settings)
