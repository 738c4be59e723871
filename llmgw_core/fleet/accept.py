"""`llmgw-tui --accept-host NODE`: trust the host key a node presents now.

The operator's explicit decision after checking the fingerprint out of band.
Any older key listed under the same name (a re-installed node) is replaced,
so known_hosts never trusts two different keys for one name by accident.
"""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import asyncssh

from llmgw_core.errors import LlmgwError
from llmgw_core.fleet.ssh import SshConnector, SshSettings, SshTarget, fingerprint, known_hosts_name
from llmgw_core.inventory import load_inventory


def accept_host_main(node: str, *, inventory: str | None) -> int:
    """Fetch NODE's host key, print its fingerprint and add it to known_hosts.

    Returns the process exit code: 0 trusted, 1 unreachable, 2 bad input.
    """
    try:
        described = load_inventory(inventory)
        spec = described.node_spec(node)
    except LlmgwError as exc:
        print(f"llmgw-tui: {exc.sentence()}", file=sys.stderr)
        return exc.exit_code
    target = SshTarget(
        node=spec.name,
        host=spec.host,
        port=spec.port,
        user=spec.user,
        identity_file=spec.identity_file,
    )
    known_hosts = described.known_hosts_path()
    try:
        line = asyncio.run(_accept(target, known_hosts))
    except LlmgwError as exc:
        print(f"llmgw-tui: {exc.sentence()}", file=sys.stderr)
        return exc.exit_code
    print(line)
    return 0


async def _accept(target: SshTarget, known_hosts: Path) -> str:
    connector = SshConnector(SshSettings(known_hosts=known_hosts))
    try:
        key, host, port = await connector.fetch_host_key(target)
    finally:
        await connector.close()
    return trust_key(known_hosts, known_hosts_name(host, port), key, node=target.node)


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
