"""`llmgw-tui --accept-host NODE`: trust the host key a node presents now.

The operator's explicit decision after checking the fingerprint out of band.
A bastion in front of nodes (a ProxyJump hop) is accepted the same way.
Any older key listed under the same name (a re-installed node) is replaced,
so known_hosts never trusts two different keys for one name by accident.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import asyncssh

from llmgw_core.errors import BadInput, LlmgwError
from llmgw_core.fleet.ssh import SshConnector, SshSettings, SshTarget, fingerprint, known_hosts_name
from llmgw_core.inventory import Inventory, load_inventory


def accept_host_main(node: str, *, inventory: str | None) -> int:
    """Fetch the host key NODE (or a bastion in front of nodes) presents, and trust it.

    `node` is a node of the inventory, or a ProxyJump hop exactly as a
    refusal names it (`bastion`, `ops@jump:2222`). Prints the fingerprint and
    what was written. Returns the exit code: 0 trusted, 1 unreachable, 2 bad input.
    """
    try:
        described = load_inventory(inventory)
        line = asyncio.run(accept_host(described, node))
    except LlmgwError as exc:
        print(f"llmgw-tui: {exc.sentence()}", file=sys.stderr)
        return exc.exit_code
    print(line)
    return 0


async def accept_host(described: Inventory, name: str) -> str:
    """Trust the key node (or bastion) `name` presents now; returns what was done, in words.

    The console's confirmation calls this, then `Fleet.reconnect_now(name)`.

    Raises:
        BadInput: no node or bastion has that name.
        Unreachable: it cannot be reached to ask for its key.
    """
    known_hosts = described.known_hosts_path()
    connector = SshConnector(SshSettings(known_hosts=known_hosts))
    try:
        names = {spec.name for spec in described.node_specs()}
        if name in names:
            key, host, port = await connector.fetch_host_key(
                SshTarget.of(described.node_spec(name))
            )
        else:
            key, host, port = await _bastion_key(connector, described, name)
    finally:
        await connector.close()
    return trust_key(known_hosts, known_hosts_name(host, port), key, node=name)


async def _bastion_key(
    connector: SshConnector, described: Inventory, name: str
) -> tuple[asyncssh.SSHKey, str, int]:
    for spec in described.node_specs():
        hops = await connector.bastions_of(SshTarget.of(spec))
        if name in hops:
            return await connector.fetch_bastion_key(hops, hops.index(name))
    nodes = ", ".join(node.name for node in described.nodes)
    raise BadInput(
        f"no node or bastion is named {name!r} in the inventory", f"its nodes are {nodes}"
    )


def trust_key(known_hosts: Path, listed: str, key: asyncssh.SSHKey, *, node: str) -> str:
    """Add `listed key` to known_hosts (replacing other keys of that name); says what it did."""
    public = key.export_public_key().decode().strip()
    shown = f"{node} ({listed}) presents {fingerprint(key)}"
    try:
        lines = known_hosts.read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        lines = []
    except OSError as exc:
        raise LlmgwError(f"cannot read {known_hosts}: {exc.strerror or exc}") from None
    kept: list[str] = []
    replaced = 0
    for line in lines:
        fields = line.split()
        names = fields[0].split(",") if fields and not line.startswith("#") else []
        if listed in names:
            if " ".join(fields[1:3]) == " ".join(public.split()[:2]):
                return f"{shown}; {known_hosts} already trusts it"
            replaced += 1
            continue
        kept.append(line)
    kept.append(f"{listed} {public}")
    known_hosts.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    temporary = known_hosts.with_name(f".{known_hosts.name}.tmp-{os.getpid()}")
    temporary.write_text("\n".join(kept) + "\n", encoding="utf-8")
    temporary.chmod(0o600)
    os.replace(temporary, known_hosts)
    if replaced:
        return f"{shown}; it replaces the old key in {known_hosts}"
    return f"{shown}; added to {known_hosts}"
