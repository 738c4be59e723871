"""A big simulated fleet on this machine: thousands of nodes behind one bastion, for scale.

`scale_nodes()` describes the fleet of issue 11 — 28 GB200 NVL72 racks (504
trays), HGX H100 pods on their own InfiniBand rails, A100 nodes with MIG,
L40S and CPU nodes, 2,048 in all — with one node in 20 silent (it accepts
TCP and never speaks SSH). `start_sim_fleet()` brings it up:

* what is REAL: every node's SSH server (its own loopback address
  127.77.x.y, its own host key pinned in known_hosts), the bastion every
  node is reached through (ProxyJump, one shared connection), every
  handshake, login and channel, the agent's protocol and discovery code
  reading a capture of the node's hardware, and all of the console's side;
* what is SIMULATED: the hardware (captures our simulator writes; nodes of
  one kind share one capture but their own `host.json`), and the agent
  process — the nodes' servers and agents run as a few pool processes
  (`sim_pool`), not one Python process per node.

Everything it starts is stopped by `SimFleet.stop()`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncssh
import yaml

from llmgw_core.fleet.sim.nodes import SimNode
from llmgw_core.fleet.ssh import SshSettings
from llmgw_core.inventory import Inventory, parse_inventory

RACK_TRAYS = 18
H100_RAILS = tuple(f"mlx5_{i}" for i in range(8))
RAIL_RATE_GBPS = 400
POOL_START_TIMEOUT_S = 120.0


def scale_nodes(
    *,
    racks: int = 28,
    h100: int = 1352,
    h100_pods: int = 4,
    mig: int = 64,
    l40s: int = 64,
    cpu: int = 64,
    silent_every: int = 20,
) -> list[SimNode]:
    """The nodes of a big fleet (2,048 by default); every `silent_every`-th is silent (0: none)."""
    nodes: list[SimNode] = []
    for rack in range(1, racks + 1):
        rack_name = f"nvl72-r{rack:02d}"
        for tray in range(1, RACK_TRAYS + 1):
            state = "degraded" if (rack + tray) % 37 == 0 else "joined"
            nodes.append(
                SimNode(
                    f"gb200-r{rack:02d}-t{tray:02d}",
                    "gb200-tray",
                    {"tray": tray, "rack": rack_name, "clique_id": rack, "state": state},
                    labels={"rack": rack_name, "tray": str(tray)},
                )
            )
    for index in range(h100):
        pod = index % h100_pods + 1
        degraded = {"degraded_rail": "mlx5_3"} if index % 97 == 5 else {}
        nodes.append(
            SimNode(f"h100-p{pod}-{index:04d}", "hgx-h100", degraded, fabric=f"ib-pod{pod}")
        )
    nodes += [SimNode(f"a100-mig-{i:03d}", "a100-mig") for i in range(mig)]
    nodes += [SimNode(f"l40s-{i:03d}", "l40s") for i in range(l40s)]
    nodes += [SimNode(f"cpu-{i:03d}", "cpu") for i in range(cpu)]
    if silent_every:
        nodes = [
            SimNode(n.name, n.profile, n.options, n.fabric, n.labels, silent=True)
            if i % silent_every == silent_every - 1
            else n
            for i, n in enumerate(nodes)
        ]
    return nodes


def node_address(index: int) -> str:
    """The loopback address of the `index`-th node (127.77.x.y: Linux answers all of 127/8)."""
    return f"127.77.{index // 250}.{index % 250 + 1}"


def write_captures(root: Path, nodes: list[SimNode]) -> dict[str, tuple[Path, Path]]:
    """A capture directory per node and its kind's template: one written per kind, linked,
    each node with its own host.json."""
    from llmgw_agent.sim.profiles import write_profile

    templates: dict[str, Path] = {}
    captures: dict[str, tuple[Path, Path]] = {}
    for node in nodes:
        if node.silent:
            continue
        kind = json.dumps([node.profile, node.options], sort_keys=True)
        if kind not in templates:
            folder = root / "templates" / str(len(templates))
            templates[kind] = write_profile(node.profile, folder, **node.options)
        template = templates[kind]
        capture = root / "nodes" / node.name / "capture"
        capture.mkdir(parents=True, exist_ok=True)
        for entry in template.iterdir():
            if entry.name != "host.json":
                (capture / entry.name).symlink_to(entry)
        host = json.loads((template / "host.json").read_text(encoding="utf-8"))
        host["hostname"] = node.name
        host["mgmt_address"] = "10.{}.{}.{}".format(
            20 + len(captures) // 62500, *divmod(len(captures) % 62500, 250)
        )
        (capture / "host.json").write_text(json.dumps(host), encoding="utf-8")
        captures[node.name] = (capture, template)
    return captures


@dataclass
class SimFleet:
    """The running simulated fleet: its pools, and the inventory and settings that reach it."""

    root: Path
    inventory: Inventory
    settings: SshSettings
    silent: tuple[str, ...]
    pools: list[asyncio.subprocess.Process]
    _stopped: bool = False

    async def stop(self) -> None:
        """End every pool process and remove the fleet's folder."""
        if self._stopped:
            return
        self._stopped = True
        await stop_pools(self.pools)
        shutil.rmtree(self.root, ignore_errors=True)


async def stop_pools(pools: list[asyncio.subprocess.Process]) -> None:
    """Close each pool's input (it stops its servers and exits); kill one that lingers."""
    for pool in pools:
        if pool.stdin is not None:
            pool.stdin.close()
    for pool in pools:
        try:
            await asyncio.wait_for(pool.wait(), 10)
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                pool.kill()
            await pool.wait()


async def start_sim_fleet(
    root: Path,
    nodes: list[SimNode],
    *,
    pools: int = 4,
    bastion: bool = True,
    **settings: Any,
) -> SimFleet:
    """Write the captures and keys, start the pool processes; returns once every node listens.

    `settings` override the SSH settings (e.g. `max_handshakes_per_bastion`).
    """
    root.mkdir(parents=True, exist_ok=True)
    captures = await asyncio.to_thread(write_captures, root, nodes)
    client_key = asyncssh.generate_private_key("ssh-ed25519")
    key_file = root / "client_key"
    key_file.write_bytes(client_key.export_private_key())
    key_file.chmod(0o600)
    host_keys = {
        n.name: asyncssh.generate_private_key("ssh-ed25519") for n in nodes if not n.silent
    }
    specs: list[dict[str, Any]] = [
        {"authorized_keys": client_key.export_public_key().decode(), "nodes": []}
        for _ in range(pools)
    ]
    for index, node in enumerate(nodes):
        entry: dict[str, Any] = {"name": node.name, "address": node_address(index)}
        if node.silent:
            entry["silent"] = True
        else:
            capture, template = captures[node.name]
            entry["capture"] = str(capture)
            entry["kind"] = str(template)  # its facts are read once per kind (sim_pool)
            entry["home"] = str(root / "nodes" / node.name / "home")
            entry["host_key"] = host_keys[node.name].export_private_key().decode()
        specs[index % pools]["nodes"].append(entry)
    bastion_key = asyncssh.generate_private_key("ssh-ed25519")
    if bastion:
        specs.append(
            {
                "authorized_keys": client_key.export_public_key().decode(),
                "bastion": {
                    "address": "127.0.0.1",
                    "home": str(root / "bastion"),
                    "host_key": bastion_key.export_private_key().decode(),
                },
            }
        )
    started: list[asyncio.subprocess.Process] = []
    ports: dict[str, int] = {}
    try:
        for number, spec in enumerate(specs):
            spec_file = root / f"pool-{number}.json"
            spec_file.write_text(json.dumps(spec), encoding="utf-8")
            spec_file.chmod(0o600)
            with (root / f"pool-{number}.log").open("ab") as log:
                started.append(
                    await asyncio.create_subprocess_exec(
                        sys.executable,
                        "-m",
                        "llmgw_core.fleet.sim.pool",
                        str(spec_file),
                        stdin=asyncio.subprocess.PIPE,
                        stdout=asyncio.subprocess.PIPE,
                        stderr=log,
                        env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"},
                    )
                )
        for pool in started:
            assert pool.stdout is not None
            line = await asyncio.wait_for(pool.stdout.readline(), POOL_START_TIMEOUT_S)
            if not line:
                raise RuntimeError("a simulated node pool ended before listening")
            ports.update(json.loads(line)["ports"])
    except BaseException:
        await stop_pools(started)
        raise
    known_hosts = root / "known_hosts"
    lines = [
        f"[{node_address(i)}]:{ports[n.name]} {host_keys[n.name].export_public_key().decode().strip()}"
        for i, n in enumerate(nodes)
        if not n.silent
    ]
    config_paths: tuple[Path, ...] = ()
    if bastion:
        public = bastion_key.export_public_key().decode().strip()
        lines.append(f"[127.0.0.1]:{ports['bastion']} {public}")
        config = root / "ssh_config"
        config.write_text(
            f"Host 127.77.*\n  ProxyJump 127.0.0.1:{ports['bastion']}\n", encoding="utf-8"
        )
        config_paths = (config,)
    known_hosts.write_text("\n".join(lines) + "\n", encoding="utf-8")
    document = {
        "defaults": {"identity_file": str(key_file)},
        "nodes": [_inventory_entry(n, i, ports[n.name]) for i, n in enumerate(nodes)],
        "known_hosts": str(known_hosts),
    }
    text = yaml.safe_dump(document, sort_keys=False)
    (root / "inventory.yaml").write_text(text, encoding="utf-8")
    inventory = parse_inventory(text, source=str(root / "inventory.yaml"), folder=root)
    ssh_settings = SshSettings(
        known_hosts=known_hosts,
        config_paths=config_paths,
        client_keys=(client_key,),
        use_ssh_agent=False,
        **settings,
    )
    silent = tuple(n.name for n in nodes if n.silent)
    return SimFleet(root, inventory, ssh_settings, silent, started)


def _inventory_entry(node: SimNode, index: int, port: int) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": node.name, "host": node_address(index), "port": port}
    if node.fabric:
        entry["fabrics"] = [
            {"name": node.fabric, "hcas": list(H100_RAILS), "rate_gbps": RAIL_RATE_GBPS}
        ]
    if node.labels:
        entry["labels"] = dict(node.labels)
    return entry
