"""The fleet over asyncssh's in-process server, with the real agent behind it."""

from __future__ import annotations

import asyncio
from pathlib import Path

import asyncssh
import pytest

from llmgw_agent.sim.profiles import write_profile
from llmgw_core.fleet.accept import trust_key
from llmgw_core.fleet.client import AgentClient, AgentError, AgentLost
from llmgw_core.fleet.deploy import agent_command, ensure_agent
from llmgw_core.fleet.fleet import Fleet
from llmgw_core.fleet.loopback import LoopbackSshd
from llmgw_core.fleet.ssh import HostKeyRefused, SshTarget, fingerprint
from llmgw_core.inventory import parse_inventory

from .conftest import ClientKey, asyncssh_node, connector_for, free_port, settled


def inventory_text(
    nodes: list[tuple[str, LoopbackSshd, Path | None]], known_hosts: Path, extra: str = ""
) -> str:
    lines = ["nodes:"]
    for name, server, capture in nodes:
        lines.append(f"  - name: {name}\n    host: 127.0.0.1\n    port: {server.port}")
        if capture is not None:
            lines.append(f"    replay: {capture}")
    return "\n".join(lines) + f"\n{extra}known_hosts: {known_hosts}\n"


def pin(known_hosts: Path, servers: list[LoopbackSshd]) -> None:
    known_hosts.write_text("".join(server.known_hosts_line() + "\n" for server in servers))


async def started(*servers: LoopbackSshd) -> None:
    await asyncio.gather(*(server.start() for server in servers))


def test_several_replay_nodes_are_discovered_over_ssh(tmp_path: Path, client_key: ClientKey):
    kinds = {"h100": ("hgx-h100", {}), "tray": ("gb200-tray", {"tray": 4}), "cpu": ("cpu", {})}

    async def scenario():
        servers = {name: asyncssh_node(tmp_path, name, client_key) for name in kinds}
        await started(*servers.values())
        pin(tmp_path / "known_hosts", list(servers.values()))
        captures = {
            name: write_profile(kind, tmp_path / name / "capture", **options)
            for name, (kind, options) in kinds.items()
        }
        text = inventory_text(
            [(name, servers[name], captures[name]) for name in kinds], tmp_path / "known_hosts"
        )
        try:
            return await settled(
                parse_inventory(text),
                connector_for(tmp_path / "known_hosts", client_keys=(client_key.key,)),
                timeout_s=60,
            )
        finally:
            for server in servers.values():
                await server.stop()

    snapshot = asyncio.run(scenario())
    nodes = snapshot.nodes
    assert [node.state for node in nodes.values()] == ["ready", "ready", "ready"]
    assert len(nodes["h100"].facts.gpus) == 8
    assert {gpu.gpu_class for gpu in nodes["h100"].facts.gpus} == {"h100-80g"}
    assert len(nodes["tray"].facts.gpus) == 4
    assert nodes["tray"].facts.nvlink_domain is not None
    assert nodes["cpu"].facts.gpus == ()
    assert nodes["cpu"].agent_version == "0.1.0"
    assert all(node.last_seen is not None for node in nodes.values())


def test_an_unknown_host_key_is_refused_with_its_fingerprint_and_the_way_to_accept_it(
    tmp_path: Path, client_key: ClientKey
):
    async def scenario():
        server = asyncssh_node(tmp_path, "n1", client_key)
        await server.start()
        (tmp_path / "known_hosts").write_text("")
        connector = connector_for(tmp_path / "known_hosts", client_keys=(client_key.key,))
        try:
            with pytest.raises(HostKeyRefused) as caught:
                await connector.connect(SshTarget(node="n1", host="127.0.0.1", port=server.port))
            return caught.value.sentence(), server
        finally:
            await server.stop()

    sentence, server = asyncio.run(scenario())
    assert (
        f"n1 ([127.0.0.1]:{server.port}) presents the unknown host key {fingerprint(server.host_key)}"
        in sentence
    )
    assert fingerprint(server.host_key).startswith("ssh-ed25519 SHA256:")
    assert sentence.endswith("check it out of band, then run `llmgw-tui --accept-host n1`")


def test_a_changed_host_key_is_refused_then_accepted_explicitly(
    tmp_path: Path, client_key: ClientKey
):
    async def scenario():
        server = asyncssh_node(tmp_path, "n1", client_key)
        await server.start()
        known_hosts = tmp_path / "known_hosts"
        old_key = asyncssh.generate_private_key("ssh-ed25519")
        known_hosts.write_text(f"[127.0.0.1]:{server.port} {old_key.export_public_key().decode()}")
        text = inventory_text([("n1", server, None)], known_hosts)
        fleet = Fleet(
            parse_inventory(text),
            connector_for(known_hosts, client_keys=(client_key.key,)),
            retry_initial_s=0.1,
        )
        try:
            await fleet.start()
            refused = await fleet.wait_settled(30)
            said = trust_key(known_hosts, f"[127.0.0.1]:{server.port}", server.host_key, node="n1")
            fleet.reconnect_now("n1")
            ready = await fleet.wait_for(lambda s: s.nodes["n1"].state == "ready", 30)
            return refused.nodes["n1"], said, ready.nodes["n1"], known_hosts.read_text(), server
        finally:
            await fleet.close()
            await server.stop()

    refused, said, ready, known, server = asyncio.run(scenario())
    assert refused.state == "refused"
    assert (
        f"the host key of n1 ([127.0.0.1]:{server.port}) CHANGED: it now presents {fingerprint(server.host_key)}"
        in refused.reason
    )
    assert "llmgw-tui --accept-host n1" in refused.reason
    assert said.endswith(f"it replaces the old key in {tmp_path / 'known_hosts'}")
    assert ready.state == "ready" and ready.reason is None
    assert known.count(f"[127.0.0.1]:{server.port} ") == 1


def test_a_node_whose_sshd_stops_is_marked_unreachable_and_picked_up_when_it_returns(
    tmp_path: Path, client_key: ClientKey
):
    async def scenario():
        server = asyncssh_node(tmp_path, "n1", client_key)
        await server.start()
        pin(tmp_path / "known_hosts", [server])
        text = inventory_text(
            [("n1", server, write_profile("l40s", tmp_path / "cap"))], tmp_path / "known_hosts"
        )
        fleet = Fleet(
            parse_inventory(text),
            connector_for(tmp_path / "known_hosts", client_keys=(client_key.key,)),
            retry_initial_s=0.2,
            retry_max_s=0.5,
        )
        try:
            await fleet.start()
            first = await fleet.wait_settled(30)
            port = server.port
            await server.stop()
            down = await fleet.wait_for(lambda s: s.nodes["n1"].state == "unreachable", 30)
            await server.start(port)
            back = await fleet.wait_for(lambda s: s.nodes["n1"].state == "ready", 30)
            return first.nodes["n1"], down.nodes["n1"], back.nodes["n1"]
        finally:
            await fleet.close()
            await server.stop()

    first, down, back = asyncio.run(scenario())
    assert first.state == "ready"
    assert down.state == "unreachable"
    assert "n1" in down.reason
    assert len(down.facts.gpus) == 4  # what it had stays visible while it is away
    assert back.state == "ready" and back.reason is None
    assert back.last_seen > first.last_seen


def test_a_fabric_naming_adapters_the_node_lacks_marks_that_node(
    tmp_path: Path, client_key: ClientKey
):
    async def scenario():
        server = asyncssh_node(tmp_path, "h100", client_key)
        await server.start()
        pin(tmp_path / "known_hosts", [server])
        capture = write_profile("hgx-h100", tmp_path / "cap")
        text = (
            f"nodes:\n  - name: h100\n    host: 127.0.0.1\n    port: {server.port}\n    replay: {capture}\n"
            "    fabrics: [{name: ib-a, hcas: [mlx5_0, mlx5_1, mlx5_9], rate_gbps: 400}]\n"
            f"known_hosts: {tmp_path / 'known_hosts'}\n"
        )
        try:
            return await settled(
                parse_inventory(text),
                connector_for(tmp_path / "known_hosts", client_keys=(client_key.key,)),
            )
        finally:
            await server.stop()

    node = asyncio.run(scenario()).nodes["h100"]
    assert node.state == "refused"
    assert node.reason.startswith(
        "fabric ib-a names mlx5_9, which h100 does not have (its adapters: mlx5_0, mlx5_1"
    )
    assert node.reason.endswith("correct the fabric's hcas in the inventory")
    assert len(node.facts.gpus) == 8


def test_the_agent_is_uploaded_once_and_reused_while_its_hash_is_unchanged(
    tmp_path: Path, client_key: ClientKey
):
    async def scenario():
        server = asyncssh_node(tmp_path, "n1", client_key)
        await server.start()
        pin(tmp_path / "known_hosts", [server])
        connector = connector_for(tmp_path / "known_hosts", client_keys=(client_key.key,))
        target = SshTarget(node="n1", host="127.0.0.1", port=server.port)
        try:
            async with await connector.connect(target) as connection:
                first = await ensure_agent(connection, "n1")
                second = await ensure_agent(connection, "n1")
                launcher = await connection.run("sh .local/bin/llmgw --help", check=False)
            return first, second, launcher, server.home
        finally:
            await server.stop()

    first, second, launcher, home = asyncio.run(scenario())
    assert first.uploaded and not second.uploaded
    assert first.agent_path == second.agent_path
    cached = sorted(path.name for path in (home / ".cache" / "llmgw").iterdir())
    name = Path(first.agent_path).name
    # the zipapp (and the folder a start unpacks beside it); no temporary left behind
    assert cached in ([name], [name.removesuffix(".pyz"), name])
    assert Path(first.agent_path).name.startswith("agent-")
    assert "usage: llmgw {serve,doctor,supervise,sim-engine,front,hold}" in launcher.stdout


def fake_python(folder: Path, version: tuple[int, int, int] | None) -> dict[str, str]:
    """A node whose `python3` is old (or missing): PATH holds only what the test puts there."""
    folder.mkdir(parents=True, exist_ok=True)
    if version is not None:
        script = folder / "python3"
        major, minor, micro = version
        answer = (
            f'{{"python": [{major}, {minor}, {micro}], "home": "\'$HOME\'", '
            '"present": false, "launcher": false}'
        )
        script.write_text(f"#!/bin/sh\necho '{answer}'\n")
        script.chmod(0o755)
    return {"PATH": f"{folder}:/nonexistent"}


@pytest.mark.parametrize(
    ("version", "expected"),
    [
        (
            (3, 6, 8),
            "n1 has Python 3.6.8; the agent needs 3.8 or newer: install python3.8+ on the node",
        ),
        (None, "n1 has no python3 on its PATH; the agent needs Python 3.8 or newer"),
    ],
)
def test_a_node_without_a_recent_python_is_refused_with_what_to_install(
    tmp_path: Path, client_key: ClientKey, version, expected
):
    async def scenario():
        server = asyncssh_node(
            tmp_path, "n1", client_key, env=fake_python(tmp_path / "bin", version)
        )
        await server.start()
        pin(tmp_path / "known_hosts", [server])
        try:
            return await settled(
                parse_inventory(inventory_text([("n1", server, None)], tmp_path / "known_hosts")),
                connector_for(tmp_path / "known_hosts", client_keys=(client_key.key,)),
            )
        finally:
            await server.stop()

    node = asyncio.run(scenario()).nodes["n1"]
    assert node.state == "refused"
    assert node.reason.startswith(expected)


async def _agent(tmp_path: Path, client_key: ClientKey, replay: Path | None = None):
    server = asyncssh_node(tmp_path, "n1", client_key)
    await server.start()
    pin(tmp_path / "known_hosts", [server])
    connector = connector_for(tmp_path / "known_hosts", client_keys=(client_key.key,))
    connection = await connector.connect(SshTarget(node="n1", host="127.0.0.1", port=server.port))
    deployment = await ensure_agent(connection, "n1")
    client = await AgentClient.start(
        "n1", connection, agent_command(deployment, replay=str(replay) if replay else None)
    )
    return server, connection, client


def test_many_requests_are_in_flight_at_once_on_one_channel(tmp_path: Path, client_key: ClientKey):
    async def scenario():
        capture = write_profile("a100-mig", tmp_path / "cap")
        server, connection, client = await _agent(tmp_path, client_key, capture)
        try:
            answers = await asyncio.gather(
                client.request("facts", timeout_s=30),
                *(client.request("ping", timeout_s=30) for _ in range(30)),
            )
            with pytest.raises(AgentError) as caught:
                await client.request("shard.stop", {"shard_id": 7}, timeout_s=30)
            return client.hello, answers, caught.value
        finally:
            await client.close()
            connection.close()
            await server.stop()

    hello, answers, error = asyncio.run(scenario())
    assert hello["protocol"] == 1 and hello["replay"] is True
    facts, *pongs = answers
    assert any(gpu["mig_profile"] for gpu in facts["gpus"])
    assert len(pongs) == 30 and all(pong["pong"] for pong in pongs)
    assert error.code == "bad_args"
    assert error.message.startswith("n1: shard.stop failed: argument 'shard_id' must be a string")


def test_a_stream_yields_events_until_cancelled_then_its_result(
    tmp_path: Path, client_key: ClientKey
):
    async def scenario():
        server, connection, client = await _agent(tmp_path, client_key)
        # Where the console watches a download: the node's Hugging Face cache
        # (the agent refuses paths outside its folders and the model dirs).
        watched = tmp_path / "n1" / "home" / ".cache" / "huggingface" / "hub" / "models--o--m"
        watched.mkdir(parents=True)
        (watched / "part").write_bytes(b"x" * 1000)
        try:
            stream = client.stream("download.watch", {"path": str(watched), "interval_s": 0.05})
            events = []
            async for event in stream:
                events.append(event)
                if len(events) == 2:
                    break
            result = await stream.cancel()
            still = await client.request("ping", timeout_s=10)
            return events, result, still
        finally:
            await client.close()
            connection.close()
            await server.stop()

    events, result, still = asyncio.run(scenario())
    assert len(events) == 2
    assert result["cancelled"] is True
    assert still["pong"] is True


def test_a_lost_connection_fails_every_waiting_request_with_a_sentence(
    tmp_path: Path, client_key: ClientKey
):
    async def scenario():
        server, _connection, client = await _agent(tmp_path, client_key)
        # Where the console watches a download: the node's Hugging Face cache
        # (the agent refuses paths outside its folders and the model dirs).
        watched = tmp_path / "n1" / "home" / ".cache" / "huggingface" / "hub" / "models--o--m"
        watched.mkdir(parents=True)
        stream = client.stream("download.watch", {"path": str(watched), "interval_s": 0.05})
        await stream.__anext__()
        await server.stop()
        with pytest.raises(AgentLost) as caught:
            async for _ in stream:
                pass
        with pytest.raises(AgentLost) as later:
            await client.request("ping")
        await client.close()
        return caught.value.sentence(), later.value.sentence()

    during, after = asyncio.run(scenario())
    assert during.startswith(
        "download.watch on n1 got no answer: the agent on n1 stopped answering"
    )
    assert after.startswith("the agent on n1 stopped answering")


def test_lines_the_agent_should_never_send_become_errors_not_crashes(
    tmp_path: Path, client_key: ClientKey
):
    async def scenario():
        server, connection, client = await _agent(tmp_path, client_key)
        try:
            client._dispatch("this is not json\n")
            client._dispatch('{"id": 999, "ok": true, "result": 1}\n')
            pending = asyncio.ensure_future(client.request("ping", timeout_s=10))
            await asyncio.sleep(0)  # the request is on the wire; answer it first, badly
            request_id = max(client._pending)
            client._dispatch(f'{{"id": {request_id}, "ok": "maybe"}}\n')
            with pytest.raises(AgentError) as caught:
                await pending
            after = await client.request("ping", timeout_s=10)
            return list(client.protocol_errors), caught.value, after
        finally:
            await client.close()
            connection.close()
            await server.stop()

    protocol_errors, error, after = asyncio.run(scenario())
    assert protocol_errors[0] == "not a JSON object: 'this is not json'"
    assert protocol_errors[1].startswith("a reply to no request of ours")
    assert error.code == "malformed"
    assert error.message.startswith("n1: the agent's answer to ping is malformed")
    assert after["pong"] is True


def test_a_closed_port_and_a_refused_login_read_as_sentences(tmp_path: Path, client_key: ClientKey):
    async def scenario():
        stranger = ClientKey(key=asyncssh.generate_private_key("ssh-ed25519"), path=tmp_path / "x")
        server = asyncssh_node(tmp_path, "locked", stranger)
        await server.start()
        pin(tmp_path / "known_hosts", [server])
        closed_port = free_port()
        text = (
            f"nodes:\n  - {{name: locked, host: 127.0.0.1, port: {server.port}, user: ops}}\n"
            f"  - {{name: gone, host: 127.0.0.1, port: {closed_port}}}\n"
            f"known_hosts: {tmp_path / 'known_hosts'}\n"
        )
        try:
            return (
                await settled(
                    parse_inventory(text),
                    connector_for(tmp_path / "known_hosts", client_keys=(client_key.key,)),
                ),
                server.port,
                closed_port,
            )
        finally:
            await server.stop()

    snapshot, port, closed_port = asyncio.run(scenario())
    locked, gone = snapshot.nodes["locked"], snapshot.nodes["gone"]
    assert locked.state == "unreachable"
    assert locked.reason == (
        f"locked (127.0.0.1:{port}) refused the login of user 'ops': "
        "check the user and the key (identity_file, ssh-agent) for this node"
    )
    assert gone.state == "unreachable"
    assert (
        gone.reason
        == f"gone (127.0.0.1:{closed_port}) cannot be reached: connection refused (is sshd running?)"
    )


def test_refreshing_rereads_the_facts_and_tells_listeners(tmp_path: Path, client_key: ClientKey):
    async def scenario():
        server = asyncssh_node(tmp_path, "n1", client_key)
        await server.start()
        pin(tmp_path / "known_hosts", [server])
        text = inventory_text(
            [("n1", server, write_profile("cpu", tmp_path / "cap"))], tmp_path / "known_hosts"
        )
        fleet = Fleet(
            parse_inventory(text),
            connector_for(tmp_path / "known_hosts", client_keys=(client_key.key,)),
        )
        seen = []
        fleet.add_listener(seen.append)
        try:
            await fleet.start()
            first = await fleet.wait_settled(30)
            second = await fleet.refresh("n1")
            return first, second, seen
        finally:
            await fleet.close()
            await server.stop()

    first, second, seen = asyncio.run(scenario())
    assert second.nodes["n1"].last_seen > first.nodes["n1"].last_seen
    assert second.taken_at > first.taken_at
    assert seen[-1] is second
    with pytest.raises(Exception, match="frozen"):
        second.nodes["n1"].state = "unreachable"


def test_a_ready_node_lends_its_connection_for_a_tunnel_to_a_port_on_it(
    tmp_path: Path, client_key: ClientKey
):
    async def scenario():
        async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.write((await reader.readline()).upper())
            await writer.drain()
            writer.close()

        engine = await asyncio.start_server(echo, "127.0.0.1", 0)
        engine_port = engine.sockets[0].getsockname()[1]
        server = asyncssh_node(tmp_path, "n1", client_key, allow_forwarding=True)
        await server.start()
        pin(tmp_path / "known_hosts", [server])
        text = inventory_text([("n1", server, None)], tmp_path / "known_hosts")
        fleet = Fleet(
            parse_inventory(text),
            connector_for(tmp_path / "known_hosts", client_keys=(client_key.key,)),
        )
        try:
            await fleet.start()
            await fleet.wait_settled(30)
            tunnel = await fleet.connection("n1").forward_local_port(
                "127.0.0.1", 0, "127.0.0.1", engine_port
            )
            reader, writer = await asyncio.open_connection("127.0.0.1", tunnel.get_port())
            writer.write(b"hello engine\n")
            answer = await reader.readline()
            writer.close()
            tunnel.close()
            return answer
        finally:
            await fleet.close()
            await server.stop()
            engine.close()

    assert asyncio.run(scenario()) == b"HELLO ENGINE\n"


def _listening_tcp_inodes() -> set[str]:
    """The socket inodes of every TCP listener on this machine (state 0A in /proc/net/tcp*)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table, encoding="ascii") as lines:
            for line in list(lines)[1:]:
                fields = line.split()
                if fields[3] == "0A":
                    found.add(fields[9])
    return found


def _own_socket_inodes() -> set[str]:
    import os

    found = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            found.add(target[8:-1])
    return found


def test_the_consoles_tunnels_are_unix_sockets_in_a_private_folder_not_tcp_ports(
    tmp_path: Path, client_key: ClientKey
):
    """Another user of the console's machine can connect to a loopback port; to a socket in a
    0700 folder of the operator's, not."""
    import os
    import stat

    from llmgw_core.serve.http import EngineReach

    async def scenario():
        async def engine(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
            await writer.drain()
            writer.close()

        server_engine = await asyncio.start_server(engine, "127.0.0.1", 0)
        engine_port = server_engine.sockets[0].getsockname()[1]
        server = asyncssh_node(tmp_path, "n1", client_key, allow_forwarding=True)
        await server.start()
        pin(tmp_path / "known_hosts", [server])
        text = inventory_text([("n1", server, None)], tmp_path / "known_hosts")
        fleet = Fleet(
            parse_inventory(text),
            connector_for(tmp_path / "known_hosts", client_keys=(client_key.key,)),
        )
        reach = EngineReach(fleet)
        try:
            await fleet.start()
            await fleet.wait_settled(30)
            listening_before = _listening_tcp_inodes() & _own_socket_inodes()
            tunnel = await reach.tunnel("n1", engine_port)
            listening_after = _listening_tcp_inodes() & _own_socket_inodes()
            folder = os.path.dirname(tunnel.path)
            modes = (
                stat.S_IMODE(os.stat(folder).st_mode),
                stat.S_ISSOCK(os.stat(tunnel.path).st_mode),
            )
            async with tunnel.client(timeout=10) as client:
                answer = (await client.get(tunnel.url + "/health")).text
            await reach.close()
            return listening_after - listening_before, modes, answer, os.path.exists(folder)
        finally:
            await reach.close()
            await fleet.close()
            await server.stop()
            server_engine.close()

    new_listeners, (folder_mode, is_socket), answer, folder_left = asyncio.run(scenario())
    assert new_listeners == set()
    assert folder_mode == 0o700 and is_socket
    assert answer == "ok"
    assert not folder_left
