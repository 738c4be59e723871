"""The fleet over OpenSSH's sshd on loopback ports: the server operators really run."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import asyncssh
import pytest

from llmgw_agent.sim.profiles import write_profile
from llmgw_core.fleet.deploy import ensure_agent
from llmgw_core.fleet.fleet import Fleet
from llmgw_core.fleet.ssh import SshTarget, fingerprint
from llmgw_core.inventory import parse_inventory

from .conftest import ClientKey, OpenSshd, connector_for, free_port, settled

pytestmark = pytest.mark.sshd


def node_entry(
    name: str,
    port: int,
    key: Path,
    user: str,
    *,
    capture: Path | None = None,
    work_dir: Path | None = None,
) -> str:
    entry = f"  - name: {name}\n    host: 127.0.0.1\n    port: {port}\n    user: {user}\n    identity_file: {key}\n"
    if capture is not None:
        entry += f"    replay: {capture}\n"
    if work_dir is not None:
        entry += f"    work_dir: {work_dir}\n"
    return entry


def test_several_replay_nodes_are_discovered_through_openssh(
    tmp_path: Path, client_key: ClientKey, openssh
):
    sshd = OpenSshd(tmp_path / "sshd", client_key, ports=[free_port() for _ in range(3)]).start()
    openssh.append(sshd)
    (tmp_path / "known_hosts").write_text(sshd.known_hosts_lines())
    kinds = [
        ("h100", "hgx-h100", {}),
        ("mig", "a100-mig", {}),
        ("tray", "gb200-tray", {"state": "not-joined"}),
    ]
    entries = "".join(
        node_entry(
            name,
            port,
            client_key.path,
            sshd.user,
            capture=write_profile(kind, tmp_path / name, **options),
            work_dir=tmp_path / name / "state",
        )
        for (name, kind, options), port in zip(kinds, sshd.ports, strict=True)
    )
    inventory = parse_inventory(f"nodes:\n{entries}known_hosts: {tmp_path / 'known_hosts'}\n")

    nodes = asyncio.run(
        settled(inventory, connector_for(tmp_path / "known_hosts"), timeout_s=60)
    ).nodes
    assert {name: node.state for name, node in nodes.items()} == {
        "h100": "ready",
        "mig": "ready",
        "tray": "ready",
    }
    assert len(nodes["h100"].facts.gpus) == 8
    assert any(gpu.mig_profile for gpu in nodes["mig"].facts.gpus)
    assert nodes["tray"].facts.nvlink_domain is None  # not joined: no domain
    assert sshd.logins() == 3
    assert (tmp_path / "h100" / "state").is_dir()  # each node's agent kept its own state dir


def test_a_changed_host_key_of_an_openssh_node_is_refused_with_the_fingerprint(
    tmp_path: Path, client_key: ClientKey, openssh
):
    sshd = OpenSshd(tmp_path / "sshd", client_key).start()
    openssh.append(sshd)
    old = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode()
    (tmp_path / "known_hosts").write_text(f"[127.0.0.1]:{sshd.ports[0]} {old}")
    inventory = parse_inventory(
        f"nodes:\n{node_entry('gpu-a-01', sshd.ports[0], client_key.path, sshd.user)}"
        f"known_hosts: {tmp_path / 'known_hosts'}\n"
    )

    node = asyncio.run(settled(inventory, connector_for(tmp_path / "known_hosts"))).nodes[
        "gpu-a-01"
    ]
    assert node.state == "refused"
    assert node.reason == (
        f"the host key of gpu-a-01 ([127.0.0.1]:{sshd.ports[0]}) CHANGED: it now presents "
        f"{fingerprint(sshd.host_key)}, which {tmp_path / 'known_hosts'} does not list for it: "
        "check it out of band, then run `llmgw-tui --accept-host gpu-a-01`"
    )
    assert sshd.logins() == 0


def test_an_openssh_node_that_stops_mid_session_is_unreachable_then_recovered(
    tmp_path: Path, client_key: ClientKey, openssh
):
    sshd = OpenSshd(tmp_path / "sshd", client_key).start()
    openssh.append(sshd)
    (tmp_path / "known_hosts").write_text(sshd.known_hosts_lines())
    capture = write_profile("l40s", tmp_path / "cap")
    inventory = parse_inventory(
        f"nodes:\n{node_entry('n1', sshd.ports[0], client_key.path, sshd.user, capture=capture)}"
        f"known_hosts: {tmp_path / 'known_hosts'}\n"
    )

    async def scenario():
        fleet = Fleet(
            inventory, connector_for(tmp_path / "known_hosts"), retry_initial_s=0.2, retry_max_s=0.5
        )
        try:
            await fleet.start()
            first = await fleet.wait_settled(30)
            await asyncio.to_thread(sshd.crash)
            down = await fleet.wait_for(lambda s: s.nodes["n1"].state == "unreachable", 30)
            sshd.start()
            back = await fleet.wait_for(lambda s: s.nodes["n1"].state == "ready", 30)
            return first.nodes["n1"], down.nodes["n1"], back.nodes["n1"]
        finally:
            await fleet.close()

    first, down, back = asyncio.run(scenario())
    assert first.state == "ready"
    assert down.state == "unreachable" and "n1" in down.reason
    assert back.state == "ready"
    assert back.last_seen > first.last_seen


def test_nodes_behind_a_proxyjump_share_one_bastion_connection(
    tmp_path: Path, client_key: ClientKey, openssh
):
    bastion = OpenSshd(tmp_path / "bastion", client_key).start()
    nodes = OpenSshd(tmp_path / "nodes", client_key, ports=[free_port(), free_port()]).start()
    openssh.extend([bastion, nodes])
    (tmp_path / "known_hosts").write_text(bastion.known_hosts_lines() + nodes.known_hosts_lines())
    config = tmp_path / "ssh_config"
    config.write_text(
        f"Host bastion\n  HostName 127.0.0.1\n  Port {bastion.ports[0]}\n  User {bastion.user}\n"
        f"  IdentityFile {client_key.path}\n"
        + "".join(
            f"Host gpu-{index}\n  HostName 127.0.0.1\n  Port {port}\n  User {nodes.user}\n"
            f"  IdentityFile {client_key.path}\n  ProxyJump bastion\n"
            for index, port in enumerate(nodes.ports)
        )
    )
    inventory = parse_inventory(
        "nodes:\n  - {name: gpu-0, host: gpu-0}\n  - {name: gpu-1, host: gpu-1}\n"
        f"known_hosts: {tmp_path / 'known_hosts'}\n"
    )

    snapshot = asyncio.run(
        settled(inventory, connector_for(tmp_path / "known_hosts", config=config), timeout_s=60)
    )
    assert [node.state for node in snapshot.nodes.values()] == ["ready", "ready"]
    assert bastion.logins() == 1
    assert nodes.logins() == 2


def test_the_agent_is_uploaded_once_over_openssh_and_reused(
    tmp_path: Path, client_key: ClientKey, openssh
):
    sshd = OpenSshd(tmp_path / "sshd", client_key).start()
    openssh.append(sshd)
    (tmp_path / "known_hosts").write_text(sshd.known_hosts_lines())
    target = SshTarget(
        node="n1",
        host="127.0.0.1",
        port=sshd.ports[0],
        user=sshd.user,
        identity_file=str(client_key.path),
    )

    async def scenario():
        connector = connector_for(tmp_path / "known_hosts")
        async with await connector.connect(target) as connection:
            first = await ensure_agent(connection, "n1")
            stamp = Path(first.agent_path).stat().st_mtime_ns
        async with await connector.connect(target) as connection:
            second = await ensure_agent(connection, "n1")
            doctor = await connection.run('"$HOME/.local/bin/llmgw" --help', check=False)
        return first, stamp, second, doctor

    first, stamp, second, doctor = asyncio.run(scenario())
    assert first.uploaded and not second.uploaded
    assert Path(second.agent_path).stat().st_mtime_ns == stamp
    assert first.agent_path == f"{sshd.home}/.cache/llmgw/{Path(first.agent_path).name}"
    assert first.home == str(sshd.home)
    launcher = sshd.home / ".local" / "bin" / "llmgw"
    assert launcher.stat().st_mode & 0o111
    assert Path(first.agent_path).name in launcher.read_text()
    assert "usage: llmgw {serve,doctor,supervise,sim-engine,front,hold}" in doctor.stdout


def test_accept_host_prints_the_fingerprint_and_trusts_the_key_once(
    tmp_path: Path, client_key: ClientKey, openssh, capsys
):
    from llmgw_core.fleet.accept import accept_host_main

    sshd = OpenSshd(tmp_path / "sshd", client_key).start()
    openssh.append(sshd)
    known_hosts = tmp_path / "known_hosts"
    inventory_file = tmp_path / "inventory.yaml"
    inventory_file.write_text(
        f"nodes:\n{node_entry('gpu-a-01', sshd.ports[0], client_key.path, sshd.user)}"
        "known_hosts: known_hosts\n"
    )
    assert accept_host_main("gpu-a-01", inventory=str(inventory_file)) == 0
    assert accept_host_main("gpu-a-01", inventory=str(inventory_file)) == 0
    assert accept_host_main("gpu-zz", inventory=str(inventory_file)) == 2
    out, err = capsys.readouterr()
    listed = f"[127.0.0.1]:{sshd.ports[0]}"
    shown = f"gpu-a-01 ({listed}) presents {fingerprint(sshd.host_key)}"
    assert out.splitlines() == [
        f"{shown}; added to {known_hosts}",
        f"{shown}; {known_hosts} already trusts it",
    ]
    assert (
        err.strip()
        == "llmgw-tui: no node or bastion is named 'gpu-zz' in the inventory: its nodes are gpu-a-01"
    )
    assert known_hosts.read_text().count(listed) == 1

    assert (
        asyncio.run(
            settled(
                parse_inventory(inventory_file.read_text(), folder=tmp_path),
                connector_for(known_hosts),
            )
        )
        .nodes["gpu-a-01"]
        .state
        == "ready"
    )


def test_a_node_that_hangs_without_closing_is_found_out_by_keepalives(
    tmp_path: Path, client_key: ClientKey, openssh
):
    sshd = OpenSshd(tmp_path / "sshd", client_key).start()
    openssh.append(sshd)
    (tmp_path / "known_hosts").write_text(sshd.known_hosts_lines())
    inventory = parse_inventory(
        f"nodes:\n{node_entry('n1', sshd.ports[0], client_key.path, sshd.user, capture=write_profile('cpu', tmp_path / 'cap'))}"
        f"known_hosts: {tmp_path / 'known_hosts'}\n"
    )

    async def scenario():
        # keepalives every second, two unanswered = gone (the default is 15 s x 3)
        fleet = Fleet(
            inventory, connector_for(tmp_path / "known_hosts"), retry_initial_s=0.2, retry_max_s=0.5
        )
        frozen: list[int] = []
        try:
            await fleet.start()
            await fleet.wait_settled(30)
            frozen = sshd.freeze()
            down = await fleet.wait_for(lambda s: s.nodes["n1"].state == "unreachable", 30)
            sshd.thaw(frozen)
            back = await fleet.wait_for(lambda s: s.nodes["n1"].state == "ready", 30)
            return down.nodes["n1"], back.nodes["n1"]
        finally:
            sshd.thaw(frozen)
            await fleet.close()

    down, back = asyncio.run(scenario())
    assert down.state == "unreachable"
    assert back.state == "ready"


def test_handshakes_stay_below_maxstartups_of_a_strict_sshd(
    tmp_path: Path, client_key: ClientKey, openssh
):
    # This sshd drops every unauthenticated connection above 3 at once.
    sshd = OpenSshd(
        tmp_path / "sshd", client_key, ports=[free_port() for _ in range(8)], max_startups="3:100:3"
    )
    openssh.append(sshd.start())
    (tmp_path / "known_hosts").write_text(sshd.known_hosts_lines())
    entries = "".join(
        node_entry(
            f"n{index}", port, client_key.path, sshd.user, work_dir=tmp_path / f"state{index}"
        )
        for index, port in enumerate(sshd.ports)
    )
    inventory = parse_inventory(f"nodes:\n{entries}known_hosts: {tmp_path / 'known_hosts'}\n")

    async def scenario():
        connector = connector_for(tmp_path / "known_hosts", max_handshakes_per_server=2)
        # Without the gate this sshd drops 5 of the 8 at once (measured). With it
        # a drop is rare (sshd hears of a finished login late on a busy machine)
        # and the retry picks the node up.
        fleet = Fleet(inventory, connector, retry_initial_s=0.2)
        try:
            await fleet.start()
            return await fleet.wait_for(lambda s: s.counts() == {"ready": 8}, 60)
        finally:
            await fleet.close()

    snapshot = asyncio.run(scenario())
    assert snapshot.counts() == {"ready": 8}


def test_an_unknown_bastion_refuses_its_nodes_until_it_is_accepted(
    tmp_path: Path, client_key: ClientKey, openssh, monkeypatch, capsys
):
    from llmgw_core.fleet.accept import accept_host_main

    bastion = OpenSshd(tmp_path / "bastion", client_key).start()
    nodes = OpenSshd(tmp_path / "nodes", client_key).start()
    openssh.extend([bastion, nodes])
    home = tmp_path / "operator"
    (home / ".ssh").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    (home / ".ssh" / "config").write_text(
        f"Host bastion\n  HostName 127.0.0.1\n  Port {bastion.ports[0]}\n  User {bastion.user}\n"
        f"  IdentityFile {client_key.path}\n"
        f"Host gpu-0\n  HostName 127.0.0.1\n  Port {nodes.ports[0]}\n  User {nodes.user}\n"
        f"  IdentityFile {client_key.path}\n  ProxyJump bastion\n"
    )
    (home / ".ssh" / "known_hosts").write_text(
        nodes.known_hosts_lines()
    )  # the node, not the bastion
    inventory_file = tmp_path / "inventory.yaml"
    inventory_file.write_text("nodes:\n  - {name: gpu-0, host: gpu-0}\n")

    async def connect_all():
        fleet = Fleet(
            parse_inventory(inventory_file.read_text()),
            connector_for(home / ".ssh" / "known_hosts", config=home / ".ssh" / "config"),
        )
        try:
            await fleet.start()
            return (await fleet.wait_settled(30)).nodes["gpu-0"]
        finally:
            await fleet.close()

    before = asyncio.run(connect_all())
    assert accept_host_main("bastion", inventory=str(inventory_file)) == 0
    after = asyncio.run(connect_all())
    assert before.state == "refused"
    assert before.reason == (
        f"through the bastion bastion: bastion ([127.0.0.1]:{bastion.ports[0]}) presents the unknown host key "
        f"{fingerprint(bastion.host_key)}, not listed in {home / '.ssh' / 'known_hosts'}: "
        "check it out of band, then run `llmgw-tui --accept-host bastion`"
    )
    assert capsys.readouterr().out.startswith(
        f"bastion ([127.0.0.1]:{bastion.ports[0]}) presents {fingerprint(bastion.host_key)}"
    )
    assert after.state == "ready"


def test_a_node_without_sftp_gets_the_agent_through_an_exec_channel(
    tmp_path: Path, client_key: ClientKey, openssh
):
    sshd = OpenSshd(tmp_path / "sshd", client_key, sftp=False).start()
    openssh.append(sshd)
    (tmp_path / "known_hosts").write_text(sshd.known_hosts_lines())
    inventory = parse_inventory(
        f"nodes:\n{node_entry('n1', sshd.ports[0], client_key.path, sshd.user, capture=write_profile('l40s', tmp_path / 'cap'))}"
        f"known_hosts: {tmp_path / 'known_hosts'}\n"
    )

    node = asyncio.run(settled(inventory, connector_for(tmp_path / "known_hosts"))).nodes["n1"]
    assert node.state == "ready", node.reason
    cached = sorted(path.name for path in (sshd.home / ".cache" / "llmgw").iterdir())
    # the zipapp and the folder its first start unpacked beside it; no temporary left behind
    assert cached[-1].startswith("agent-") and cached[-1].endswith(".pyz")
    assert cached in ([cached[-1]], [cached[-1].removesuffix(".pyz"), cached[-1]])
    assert (sshd.home / ".local" / "bin" / "llmgw").stat().st_mode & 0o777 == 0o755


def test_a_headless_run_that_ends_leaves_no_agent_running_on_its_nodes(
    tmp_path: Path, client_key: ClientKey, openssh
):
    """The runner does not wait for each agent's exit; the agents still exit, on end of input."""
    sshd = OpenSshd(tmp_path / "sshd", client_key, ports=[free_port(), free_port()]).start()
    openssh.append(sshd)
    (tmp_path / "known_hosts").write_text(sshd.known_hosts_lines())
    capture = write_profile("l40s", tmp_path / "cap")
    entries = "".join(
        node_entry(f"n{i}", port, client_key.path, sshd.user, capture=capture)
        for i, port in enumerate(sshd.ports)
    )
    inventory = tmp_path / "fleet.yaml"
    inventory.write_text(f"nodes:\n{entries}known_hosts: {tmp_path / 'known_hosts'}\n")
    script = tmp_path / "nodes.yaml"
    script.write_text("steps:\n  - nodes: {all_ready: true}\n")
    env = {k: v for k, v in os.environ.items() if k != "SSH_AUTH_SOCK"}
    env["HOME"] = str(tmp_path)

    command = [sys.executable, "-m", "llmgw_tui.cli", "--inventory", str(inventory)]
    done = subprocess.run(
        [*command, "--run", str(script), "--json"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(done.stdout.splitlines()[-1])["ok"] is True
    assert sshd.logins() == 2
    deployed = list((sshd.home / ".cache" / "llmgw").glob("agent-*.pyz"))
    assert deployed, "the agent was not deployed where the scan below looks for it"

    def agents() -> list[str]:
        """Every process on this machine running the agent from the nodes' home (orphans too)."""
        running = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                except OSError:
                    continue
                if str(sshd.home) in cmdline and " serve" in cmdline:
                    running.append(cmdline)
        return running

    deadline = time.monotonic() + 20
    while agents() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert agents() == []
