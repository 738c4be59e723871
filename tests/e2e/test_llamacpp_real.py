"""A real engine on this machine: llama.cpp serving a tiny GGUF, started by the real agent over SSH.

The node is this machine behind asyncssh's in-process SSH server (no
replay: the agent's shards run the real command). The console's own code
deploys the agent, builds llama.cpp's command with the engine builder,
starts the shard, waits for the agent to see the engine healthy, then asks
a chat completion through an SSH tunnel, as the console does.

The model is written by `tiny_gguf.write_tiny_llama_gguf`; its weights are
patterned so that it answers `tiny_gguf.REPLY` to any prompt.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import socket
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncssh
import httpx
import pytest
from tiny_gguf import BLOCK_COUNT, CONTEXT_TOKENS, EMBEDDING_LENGTH, REPLY, write_tiny_llama_gguf

from llmgw_core.engines.build import build_launch
from llmgw_core.engines.spec import LLAMA_CPP, LaunchNode, LaunchPlan, LaunchRequest
from llmgw_core.fleet.client import AgentClient
from llmgw_core.fleet.deploy import agent_command, ensure_agent
from llmgw_core.fleet.loopback import LoopbackSshd
from llmgw_core.fleet.ssh import SshConnector, SshSettings, SshTarget
from llmgw_core.model.gguf_header import shape_from_gguf
from llmgw_core.model.local import read_local_gguf

_SERVER_MODULES = ("llama_cpp", "uvicorn", "fastapi", "sse_starlette", "starlette_context")
_MISSING = [name for name in _SERVER_MODULES if importlib.util.find_spec(name) is None]
needs_llama_cpp = pytest.mark.skipif(
    bool(_MISSING),
    reason=(
        f"llama-cpp-python's server is not installed here (missing {', '.join(_MISSING)}): "
        "pip install 'llama-cpp-python[server]' (.ci/run does)"
    ),
)

READY_TIMEOUT_S = 120.0
SERVED_NAME = "tiny-llama"


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with contextlib.closing(socket.socket()) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_the_tiny_gguf_is_a_small_llama_our_own_reader_understands(tmp_path: Path):
    first = write_tiny_llama_gguf(tmp_path / "a" / "tiny.gguf")
    second = write_tiny_llama_gguf(tmp_path / "b" / "tiny.gguf")

    header = read_local_gguf(first)
    shape = shape_from_gguf(header, where=str(first))

    assert first.read_bytes() == second.read_bytes()
    assert first.stat().st_size < 2 * 1024 * 1024
    assert header.metadata["general.architecture"] == "llama"
    assert header.metadata["tokenizer.ggml.model"] == "llama"
    assert shape.num_layers == BLOCK_COUNT
    assert shape.hidden_size == EMBEDDING_LENGTH
    assert shape.max_context == CONTEXT_TOKENS


@needs_llama_cpp
def test_llama_cpp_loads_the_tiny_gguf_and_it_answers_its_line(tmp_path: Path):
    from llama_cpp import Llama

    model = Llama(
        str(write_tiny_llama_gguf(tmp_path / "tiny.gguf")), n_ctx=256, verbose=False, seed=1
    )
    answer = model.create_chat_completion(
        messages=[{"role": "user", "content": "Who are you?"}], max_tokens=16
    )

    assert answer["choices"][0]["message"]["content"].strip() == REPLY
    assert answer["choices"][0]["finish_reason"] == "stop"


def launch_plan(model_path: Path, http_port: int) -> LaunchPlan:
    """llama.cpp's shard for this machine, by the engine builder (a CPU node, no cards)."""
    node = LaunchNode(
        name="here",
        rank=0,
        address="127.0.0.1",
        http_port=http_port,
        program=(sys.executable, "-m", "llama_cpp.server"),
    )
    request = LaunchRequest(
        engine=LLAMA_CPP,
        source=str(model_path),
        served_name=SERVED_NAME,
        nodes=(node,),
        context=256,
        http_host="127.0.0.1",
    )
    return build_launch(request)


async def _shard(client: AgentClient, shard_id: str) -> dict[str, Any]:
    listed = await client.request("shard.list", timeout_s=30)
    return next(shard for shard in listed["shards"] if shard["shard_id"] == shard_id)


async def log_lines(client: AgentClient, shard_id: str) -> list[str]:
    """The shard's last engine lines, as the agent captured them."""
    lines: list[str] = []
    async for event in client.events("shard.logs", {"shard_id": shard_id, "tail": 400}):
        lines.extend(event.get("lines", []))
    return lines


async def wait_healthy(client: AgentClient, shard_id: str) -> dict[str, Any]:
    """The shard once the agent has seen its health URL answer 200.

    Raises:
        AssertionError: it ended first, or took longer than `READY_TIMEOUT_S`,
            with its last engine lines.
    """
    deadline = time.monotonic() + READY_TIMEOUT_S
    while time.monotonic() < deadline:
        shard = await _shard(client, shard_id)
        if shard["phase"] in ("exited", "failed", "stopped"):
            lines = await log_lines(client, shard_id)
            raise AssertionError(f"llama.cpp ended ({shard['reason']}):\n" + "\n".join(lines[-40:]))
        if shard["phase"] == "running" and shard["healthy"]:
            return shard
        await asyncio.sleep(0.2)
    lines = await log_lines(client, shard_id)
    raise AssertionError(
        f"llama.cpp not healthy in {READY_TIMEOUT_S:.0f} s:\n" + "\n".join(lines[-40:])
    )


async def ask(connection: asyncssh.SSHClientConnection, http_port: int, prompt: str) -> dict:
    """A chat completion through an SSH tunnel to the node's engine port."""
    tunnel = await connection.forward_local_port("127.0.0.1", 0, "127.0.0.1", http_port)
    try:
        url = f"http://127.0.0.1:{tunnel.get_port()}/v1/chat/completions"
        async with httpx.AsyncClient(timeout=60) as http:
            response = await http.post(
                url,
                json={
                    "model": SERVED_NAME,
                    "messages": [{"role": "user", "content": prompt}],
                    "max_tokens": 16,
                },
            )
        response.raise_for_status()
        return response.json()
    finally:
        tunnel.close()
        await tunnel.wait_closed()


@contextlib.asynccontextmanager
async def node_over_ssh(
    folder: Path,
) -> AsyncIterator[tuple[asyncssh.SSHClientConnection, AgentClient]]:
    """This machine as a node: asyncssh's server, an SSH connection, the real agent deployed on it."""
    client_key = asyncssh.generate_private_key("ssh-ed25519")
    server = LoopbackSshd(
        home=folder / "node" / "home",
        host_key=asyncssh.generate_private_key("ssh-ed25519"),
        authorized_keys=client_key.export_public_key().decode(),
        allow_forwarding=True,
    )
    await server.start()
    known_hosts = folder / "known_hosts"
    known_hosts.write_text(server.known_hosts_line() + "\n")
    connector = SshConnector(
        SshSettings(
            known_hosts=known_hosts,
            config_paths=(),
            use_ssh_agent=False,
            client_keys=(client_key,),
            connect_timeout_s=5.0,
        )
    )
    try:
        connection = await connector.connect(
            SshTarget(node="here", host="127.0.0.1", port=server.port)
        )
        try:
            deployment = await ensure_agent(connection, "here")
            client = await AgentClient.start("here", connection, agent_command(deployment))
            try:
                yield connection, client
            finally:
                await client.close()
        finally:
            connection.close()
    finally:
        await server.stop()


@needs_llama_cpp
def test_llama_cpp_started_by_the_agent_over_ssh_answers_a_chat_completion(tmp_path: Path):
    model_path = write_tiny_llama_gguf(tmp_path / "models" / "tiny.gguf")
    http_port = free_port()
    plan = launch_plan(model_path, http_port)

    async def scenario():
        async with node_over_ssh(tmp_path) as (connection, client):
            started = await client.request(
                "shard.start", plan.head.start_args("tiny-llama"), timeout_s=30
            )
            shard_id = started["shard_id"]
            healthy = await wait_healthy(client, shard_id)
            answer = await ask(connection, http_port, "Who are you?")
            stopped = await client.request("shard.stop", {"shard_id": shard_id}, timeout_s=60)
            lines = await log_lines(client, shard_id)
            return client.hello, healthy, answer, stopped, lines

    hello, healthy, answer, stopped, lines = asyncio.run(scenario())

    assert hello["replay"] is False
    assert healthy["health_url"] == f"http://127.0.0.1:{http_port}/v1/models"
    assert answer["model"] == SERVED_NAME
    assert answer["choices"][0]["message"]["content"].strip() == REPLY
    assert answer["choices"][0]["finish_reason"] == "stop"
    assert answer["usage"]["completion_tokens"] == len(REPLY.split())
    assert stopped["phase"] == "stopped"
    assert any(f"Uvicorn running on http://127.0.0.1:{http_port}" in line for line in lines)
