"""What a big discovery costs and how it is timed: ciphers, a starved console, shared captures."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import asyncssh
import pytest

from llmgw_agent.discover import collect_facts
from llmgw_core.fleet.gates import CoalescedWrites
from llmgw_core.fleet.sim.fleet import scale_nodes, write_captures
from llmgw_core.fleet.sim.pool import KindFacts
from llmgw_core.fleet.ssh import SshTarget, Unreachable

from .conftest import ClientKey, asyncssh_node, connector_for


def test_connections_use_aes_gcm_unless_the_ssh_config_names_the_ciphers(
    tmp_path: Path, client_key: ClientKey
):
    async def scenario() -> tuple[str, str]:
        server = asyncssh_node(tmp_path, "n1", client_key)
        await server.start()
        known_hosts = tmp_path / "known_hosts"
        known_hosts.write_text(server.known_hosts_line() + "\n")
        config = tmp_path / "ssh_config"
        config.write_text("Host pinned\n  HostName 127.0.0.1\n  Ciphers aes256-ctr\n")
        connector = connector_for(known_hosts, config, client_keys=(client_key.key,))
        try:
            chosen = []
            for host in ("127.0.0.1", "pinned"):
                connection = await connector.connect(SshTarget("n1", host, server.port))
                chosen.append(connection.get_extra_info("send_cipher"))
                connection.close()
                await connection.wait_closed()
            return chosen[0], chosen[1]
        finally:
            await connector.close()
            await server.stop()

    default, configured = asyncio.run(scenario())
    assert default == "aes128-gcm@openssh.com"
    assert configured == "aes256-ctr"


class _SlowLogin(asyncssh.SSHServer):
    """A node whose login the console's own loop is too busy to finish for a while.

    It shares the console's event loop, so blocking here is the console hogging
    its CPU (thousands of other nodes' bytes), not a slow node.
    """

    def begin_auth(self, username: str) -> bool:
        time.sleep(1.0)
        return True

    def public_key_auth_supported(self) -> bool:
        return True


def test_a_node_is_not_timed_out_for_the_time_the_console_itself_could_not_run(
    tmp_path: Path, client_key: ClientKey
):
    async def scenario() -> str:
        host_key = asyncssh.generate_private_key("ssh-ed25519")
        acceptor = await asyncssh.listen(
            "127.0.0.1",
            0,
            server_host_keys=[host_key],
            authorized_client_keys=asyncssh.import_authorized_keys(client_key.public),
            server_factory=_SlowLogin,
        )
        port = acceptor.get_port()
        known_hosts = tmp_path / "known_hosts"
        public = host_key.export_public_key().decode().strip()
        known_hosts.write_text(f"[127.0.0.1]:{port} {public}\n")
        connector = connector_for(known_hosts, client_keys=(client_key.key,), connect_timeout_s=0.5)
        try:
            connection = await connector.connect(SshTarget("busy", "127.0.0.1", port))
            user = connection.get_extra_info("username")
            connection.close()
            await connection.wait_closed()
            return str(user)
        finally:
            await connector.close()
            acceptor.close()

    assert asyncio.run(scenario())  # logged in, though 1 s passed against a 0.5 s timeout


def test_a_node_that_stops_after_its_banner_is_still_given_up_on_at_the_connect_timeout(
    tmp_path: Path,
):
    async def scenario() -> tuple[str, float]:
        async def banner_then_nothing(
            reader: asyncio.StreamReader, writer: asyncio.StreamWriter
        ) -> None:
            writer.write(b"SSH-2.0-OpenSSH_9.6\r\n")
            while await reader.read(65536):
                pass
            writer.close()

        server = await asyncio.start_server(banner_then_nothing, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        connector = connector_for(tmp_path / "known_hosts", connect_timeout_s=0.5)
        started = time.monotonic()
        try:
            with pytest.raises(Unreachable) as refused:
                await connector.connect(SshTarget("mute", "127.0.0.1", port))
            return refused.value.sentence(), time.monotonic() - started
        finally:
            await connector.close()
            server.close()

    sentence, waited_s = asyncio.run(scenario())
    assert sentence.startswith("mute (127.0.0.1:") and sentence.endswith(
        "cannot be reached: timed out"
    )
    assert waited_s < 2.0


def test_nodes_of_one_kind_read_their_capture_once_and_each_reports_its_own_host(
    tmp_path: Path,
):
    nodes = [n for n in scale_nodes(racks=0, h100=3, mig=0, l40s=0, cpu=0, silent_every=0)]
    captures = write_captures(tmp_path, nodes)
    shared = KindFacts()
    first, template = captures[nodes[0].name]
    shared.read_ahead(str(template), {"model_dirs": []}, lambda: collect_facts(replay=str(first)))
    answers = {}
    for node in nodes:
        capture, template = captures[node.name]
        answers[node.name] = shared.facts(
            str(template),
            str(capture),
            {"model_dirs": []},
            lambda capture=capture: collect_facts(replay=str(capture)),
        )
    assert shared.reads == 1
    for node in nodes:
        capture, _ = captures[node.name]
        assert answers[node.name] == collect_facts(replay=str(capture))
    assert answers["h100-p2-0001"]["host"]["hostname"] == "h100-p2-0001"


def test_writes_of_one_loop_turn_leave_together_in_order_and_a_close_sends_them_first():
    async def scenario() -> tuple[bytes, int]:
        received = bytearray()
        reads = 0
        done = asyncio.Event()

        async def peer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            nonlocal reads
            while chunk := await reader.read(65536):
                received.extend(chunk)
                reads += 1
            writer.close()
            done.set()

        server = await asyncio.start_server(peer, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        transport, _ = await asyncio.get_running_loop().create_connection(
            asyncio.Protocol, "127.0.0.1", port
        )
        coalesced = CoalescedWrites(transport)
        for index in range(100):
            coalesced.write(f"packet {index:03d};".encode())
        coalesced.close()  # before the loop turned: what was written still leaves
        await asyncio.wait_for(done.wait(), 10)
        server.close()
        return bytes(received), reads

    received, reads = asyncio.run(scenario())
    assert received == b"".join(f"packet {i:03d};".encode() for i in range(100))
    assert reads == 1
