"""A real engine on this machine: llama.cpp serving a tiny GGUF, started by the real agent over SSH.

The node is this machine behind an SSH server on loopback (no replay: the
agent discovers this machine and its shards run the real command). Two
ways in:

* the fleet's own parts, step by step: the agent deployed and connected,
  llama-cpp-python found in the node's facts, llama.cpp's command built from
  them (`launch_node`, `build_launch`) with the replica's own certificate,
  the shard started, the agent seeing it healthy over pinned HTTPS, a chat
  completion through an SSH tunnel (pinned too), the shard stopped;
* the console as a person runs it: `llmgw-tui --inventory … --run` with the
  `serve` (a local GGUF, `engine: llama.cpp`), `ask`, `logs` and `stop` steps,
  through asyncssh's server and through OpenSSH's sshd (where installed).

The model is written by `tiny_gguf.write_tiny_llama_gguf`; its weights are
patterned so that it answers `tiny_gguf.REPLY` to any prompt. Every test
skips, saying what to install, where llama-cpp-python's server is absent.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.metadata
import importlib.util
import json
import os
import signal
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import asyncssh
import httpx
import pytest
from engine_process import WEATHER_TOOL
from ports import free_port as free_port
from this_machine import NODE, node_sshd, run_script_on_this_machine
from tiny_gguf import (
    BLOCK_COUNT,
    CONTEXT_TOKENS,
    EMBEDDING_LENGTH,
    EOS_ID,
    REPLY,
    TOOL_CALL,
    write_tiny_llama_gguf,
    write_tiny_tool_caller_gguf,
)

from llmgw_core.engines.build import build_launch
from llmgw_core.engines.from_fleet import launch_node
from llmgw_core.engines.identity import EngineIdentity, pinned_context
from llmgw_core.engines.spec import LLAMA_CPP, LaunchPlan, LaunchRequest
from llmgw_core.facts import NodeFacts
from llmgw_core.fleet.client import AgentClient
from llmgw_core.fleet.fleet import Fleet
from llmgw_core.fleet.ssh import SshConnector, SshSettings
from llmgw_core.inventory import NodeSpec, parse_inventory
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

TLS = EngineIdentity.make("tiny-llama")
"""The replica's certificate and key: its engine serves HTTPS with them, every caller pins it."""
READY_TIMEOUT_S = 120.0
SERVED_NAME = "tiny-llama"


def llama_cpp_version() -> str:
    """The llama-cpp-python installed beside these tests."""
    return importlib.metadata.version("llama-cpp-python")


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


def launch_plan(spec: NodeSpec, facts: NodeFacts, model_path: Path, http_port: int) -> LaunchPlan:
    """llama.cpp's shard for the node, as the console builds it from the node's own facts.

    No cards (a CPU way); the program is where the node's agent found
    llama-cpp-python installed. Its engine serves HTTPS with `TLS`.
    """
    node = launch_node(spec, facts, engine=LLAMA_CPP, rank=0, gpu_ids=(), http_port=http_port)
    request = LaunchRequest(
        engine=LLAMA_CPP,
        source=str(model_path),
        served_name=SERVED_NAME,
        nodes=(node,),
        context=256,
        tls=TLS,
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


@contextlib.asynccontextmanager
async def started_shard(client: AgentClient, plan: LaunchPlan, replica: str) -> AsyncIterator[str]:
    """Start the plan's one shard and yield its id; it is stopped on the way out, come what may.

    A shard outlives the SSH session that started it (that is its point), so
    a test that fails half-way must still stop it.
    """
    started = await client.request("shard.start", plan.head.start_args(replica), timeout_s=30)
    try:
        yield started["shard_id"]
    finally:
        await client.request("shard.stop", {"shard_id": started["shard_id"]}, timeout_s=60)


@contextlib.asynccontextmanager
async def engine_url(
    fleet: Fleet, node: str, http_port: int, host: str = "127.0.0.1", scheme: str = "https"
) -> AsyncIterator[str]:
    """`https://127.0.0.1:PORT`: the node's engine port (on `host`, the address it is bound
    to) through an SSH tunnel on its connection (speak to it with `pinned_client`); `scheme`
    "http" for a port that speaks plain HTTP (a gateway's front)."""
    tunnel = await fleet.connection(node).forward_local_port("127.0.0.1", 0, host, http_port)
    try:
        yield f"{scheme}://127.0.0.1:{tunnel.get_port()}"
    finally:
        tunnel.close()
        await tunnel.wait_closed()


def pinned_client() -> httpx.AsyncClient:
    """A client that trusts the replica's certificate and nothing else."""
    return httpx.AsyncClient(timeout=60, verify=pinned_context(TLS.cert_pem))


def chat_body(prompt: str, **options: Any) -> dict[str, Any]:
    """A chat completion request for the served model."""
    return {
        "model": SERVED_NAME,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": 16,
        **options,
    }


async def ask(
    fleet: Fleet, node: str, http_port: int, prompt: str, host: str = "127.0.0.1"
) -> dict[str, Any]:
    """A chat completion through an SSH tunnel to the node's engine port."""
    async with (
        engine_url(fleet, node, http_port, host) as base,
        pinned_client() as http,
    ):
        response = await http.post(f"{base}/v1/chat/completions", json=chat_body(prompt))
    response.raise_for_status()
    return response.json()


@contextlib.asynccontextmanager
async def this_machine_as_a_node(
    folder: Path, model_dir: Path, node_lines: str = ""
) -> AsyncIterator[Fleet]:
    """A fleet of one node, `here`: this machine behind asyncssh's server, its agent ready.

    Nothing is replayed: the agent discovers this machine, and finds
    llama-cpp-python in the environment running these tests (named to it by
    `LLMGW_ENGINE_PREFIXES`, as an operator names a virtualenv).
    `node_lines` are more of the node's inventory keys (YAML lines, indented
    as its `host:`), such as where an engine lives.
    """
    client_key = asyncssh.generate_private_key("ssh-ed25519")
    server = node_sshd(folder, client_key)
    await server.start()
    known_hosts = folder / "known_hosts"
    known_hosts.write_text(server.known_hosts_line() + "\n")
    inventory = parse_inventory(
        f"nodes:\n  - name: {NODE}\n    host: 127.0.0.1\n    port: {server.port}\n"
        f"    model_dirs: [{model_dir}]\n{node_lines}known_hosts: {known_hosts}\n"
    )
    settings = SshSettings(
        known_hosts=known_hosts,
        config_paths=(),
        use_ssh_agent=False,
        client_keys=(client_key,),
        connect_timeout_s=5.0,
    )
    fleet = Fleet(inventory, SshConnector(settings))
    try:
        await fleet.start()
        settled = await fleet.wait_settled(60)
        if settled.nodes[NODE].state != "ready":
            raise AssertionError(
                f"{NODE} is {settled.nodes[NODE].state}: {settled.nodes[NODE].reason}"
            )
        yield fleet
    finally:
        await fleet.close()
        await server.stop()


@needs_llama_cpp
def test_llama_cpp_started_by_the_agent_over_ssh_answers_a_chat_completion(tmp_path: Path):
    model_dir = tmp_path / "models"
    model_path = write_tiny_llama_gguf(model_dir / "tiny-llama" / "tiny.gguf")
    http_port = free_port()

    async def scenario():
        async with this_machine_as_a_node(tmp_path, model_dir) as fleet:
            node = fleet.snapshot().nodes[NODE]
            spec = next(spec for spec in fleet.inventory.node_specs() if spec.name == NODE)
            plan = launch_plan(spec, node.facts, model_path, http_port)
            client = fleet.client(NODE)
            async with started_shard(client, plan, "tiny-llama") as shard_id:
                healthy = await wait_healthy(client, shard_id)
                answer = await ask(fleet, NODE, http_port, "Who are you?", plan.head.http_host)
                stopped = await client.request("shard.stop", {"shard_id": shard_id}, timeout_s=60)
            lines = await log_lines(client, shard_id)
            return client.hello, node.facts, plan, healthy, answer, stopped, lines

    hello, facts, plan, healthy, answer, stopped, lines = asyncio.run(scenario())

    assert hello["replay"] is False
    assert facts.engines["llama-cpp-python"].version == llama_cpp_version()
    stored = facts.model_dirs[str(model_dir)].models
    assert [(model.name, model.format, model.state) for model in stored] == [
        ("tiny-llama", "gguf", "complete")
    ]
    assert plan.head.main.argv[:3] == (
        str(Path(sys.prefix) / "bin" / "python3"),
        "-m",
        "llama_cpp.server",
    )
    assert plan.head.main.env["CUDA_VISIBLE_DEVICES"] == ""
    # The path is the builder's choice (a llama-cpp-python route that answers once loaded).
    assert healthy["health_url"] == plan.head.health_url
    # Bound to the node's management address (the loopback where it has none), probed there.
    bound = plan.head.http_host
    assert bound == facts.host.mgmt_address or (
        facts.host.mgmt_address is None and bound == "127.0.0.1"
    )
    # The agent's probe speaks HTTPS pinned to the replica's certificate.
    assert healthy["health_url"].startswith(f"https://{bound}:{http_port}/")
    assert plan.head.health_cert == TLS.cert_pem
    assert answer["model"] == SERVED_NAME
    assert answer["choices"][0]["message"]["content"].strip() == REPLY
    assert answer["choices"][0]["finish_reason"] == "stop"
    assert answer["usage"]["completion_tokens"] == len(REPLY.split())
    assert stopped["phase"] == "stopped"
    assert any(f"Uvicorn running on https://{bound}:{http_port}" in line for line in lines)
    assert not any("PRIVATE KEY" in line for line in lines)


async def _stream_slowly_and_ask_again(
    fleet: Fleet, http_port: int, options: dict[str, Any], host: str
) -> tuple[int, str | None, httpx.Response]:
    """Stream one answer, reading slowly, and ask a second question while it streams.

    Returns the chunks read, how the stream was cut (None: it was not) and
    the second question's response.
    """
    chunks, cut, second = 0, None, None
    async with (
        engine_url(fleet, NODE, http_port, host) as base,
        pinned_client() as http,
    ):
        url = f"{base}/v1/chat/completions"
        body = chat_body("Go on.", stream=True, **options)
        async with http.stream("POST", url, json=body) as response:
            try:
                async for line in response.aiter_lines():
                    if not line.startswith("data: {"):
                        continue
                    chunks += 1
                    if chunks == 2:
                        second = asyncio.ensure_future(http.post(url, json=chat_body("And you?")))
                    # Read slowly: the agent probes health every second.
                    await asyncio.sleep(0.02)
            except httpx.HTTPError as exc:
                cut = f"{type(exc).__name__}: {exc}"
        assert second is not None, f"the stream ended after {chunks} chunks"
        return chunks, cut, await second


@needs_llama_cpp
def test_a_long_streamed_answer_is_not_cut_by_the_health_probe_or_a_second_question(
    tmp_path: Path,
):
    model_dir = tmp_path / "models"
    model_path = write_tiny_llama_gguf(model_dir / "tiny-llama" / "tiny.gguf")
    http_port = free_port()
    # Without end-of-sequence the model goes on for every token asked.
    endless = {"logit_bias": {str(EOS_ID): -100.0}, "max_tokens": 150}

    async def scenario():
        async with this_machine_as_a_node(tmp_path, model_dir) as fleet:
            node = fleet.snapshot().nodes[NODE]
            spec = next(spec for spec in fleet.inventory.node_specs() if spec.name == NODE)
            plan = launch_plan(spec, node.facts, model_path, http_port)
            client = fleet.client(NODE)
            async with started_shard(client, plan, "tiny") as shard_id:
                await wait_healthy(client, shard_id)
                chunks, cut, answered = await _stream_slowly_and_ask_again(
                    fleet, http_port, endless, plan.head.http_host
                )
            return chunks, cut, answered.json()

    chunks, cut, second = asyncio.run(scenario())

    assert cut is None
    assert chunks == 1 + endless["max_tokens"] + 1  # the role, every token, the finish
    assert second["choices"][0]["message"]["content"].strip() == REPLY


@needs_llama_cpp
@pytest.mark.parametrize("ssh", ["asyncssh", pytest.param("openssh", marks=pytest.mark.sshd)])
def test_a_script_serves_the_tiny_gguf_on_this_machine_asks_it_and_stops_it(
    tmp_path: Path, ssh: str
):
    model_dir = tmp_path / "models"
    model_path = write_tiny_llama_gguf(model_dir / "tiny-llama" / "tiny.gguf")
    steps = (
        f"  - serve: {{model: {model_path}, engine: llama.cpp, context: 256, name: tiny,"
        " timeout: 120}\n"
        '  - ask: {replica: tiny, prompt: "Who are you?", max_tokens: 16}\n'
        "  - logs: {replica: tiny, lines: 100}\n"
        "  - stop: {replica: tiny}\n"
    )

    done, left_running = run_script_on_this_machine(
        tmp_path, steps, model_dir, str(model_path), ssh=ssh
    )

    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    served, asked, logged, stopped = [json.loads(line) for line in done.stdout.splitlines()]
    replica = served["result"]["replica"]
    assert (replica["phase"], replica["engine"], replica["way"]) == (
        "ready",
        "llama.cpp",
        "CPU node",
    )
    (shard,) = replica["shards"]
    assert shard["node"] == NODE and shard["gpus"] == [] and shard["healthy"] is True
    # The interpreter of this environment: found by the agent, or named in the inventory.
    assert Path(shard["argv"][0]).parent == Path(sys.prefix) / "bin"
    assert shard["argv"][1:3] == ["-m", "llama_cpp.server"]
    assert shard["env"]["CUDA_VISIBLE_DEVICES"] == ""
    assert "health answered" in [entry["step"] for entry in served["result"]["trace"]]
    assert asked["result"]["text"].strip() == REPLY
    assert asked["result"]["completion_tokens"] == len(REPLY.split())
    port = replica["endpoint"].rsplit(":", 1)[1]
    assert any(
        line.startswith(f"[r0 {NODE}]")
        and f"Uvicorn running on https://{replica['http_host']}:{port}" in line
        for line in logged["result"]["lines"]
    )
    assert [entry["shard_id"] for entry in stopped["result"]["stopped"]] == [shard["shard_id"]]
    assert list(left_running.values()) == []


@needs_llama_cpp
def test_a_service_of_the_tiny_gguf_rolls_to_a_new_context_on_real_llama_cpp(tmp_path: Path):
    model_dir = tmp_path / "models"
    model_path = write_tiny_llama_gguf(model_dir / "tiny-llama" / "tiny.gguf")
    service = (
        f"{{name: tiny, model: {model_path}, engine: llama.cpp, replicas: 1, timeout: 120,"
        " drain_s: 1, context: "
    )
    steps = (
        f"  - apply: {{service: {service}256}}}}\n"
        f"  - apply: {{service: {service}256}}}}\n"
        f"  - apply: {{service: {service}512}}}}\n"
        '  - ask: {replica: tiny-2, prompt: "Who are you?", max_tokens: 16}\n'
        "  - replicas: {}\n"
        "  - stop: {service: tiny}\n"
    )

    done, left_running = run_script_on_this_machine(tmp_path, steps, model_dir, str(model_path))

    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    first, again, rolled, asked, listed, stopped = [
        json.loads(line)["result"] for line in done.stdout.splitlines()
    ]
    assert [a["action"] for a in first["actions"]] == ["start"]
    assert again["actions"] == []
    assert rolled["actions"] == [
        {"action": "replace", "replica": "tiny-1", "why": "context 256 → 512", "by": "tiny-2"}
    ]
    # llama-cpp-python publishes no count of its requests in flight: the whole drain_s is waited.
    assert rolled["done"][0]["drained"]["in_flight"] is None
    assert rolled["done"][0]["drained"]["waited_s"] >= 1.0
    assert asked["text"].strip() == REPLY
    live = [r for r in listed["replicas"] if r["phase"] == "ready"]
    assert [(r["name"], r["service"]) for r in live] == [("tiny-2", "tiny")]
    assert stopped["stopped"] == ["tiny-2"]
    assert list(left_running.values()) == []


def test_llama_server_served_with_jinja_answers_an_openai_tools_call_with_a_tool_call(
    tmp_path: Path,
):
    """Where a llama-server is installed (or `LLMGW_LLAMA_SERVER` names a build): `engine_args:
    {jinja: true}` reaches it, and the OpenAI SDK's `tools=` call gets a `tool_calls` message
    parsed by llama-server itself from the model's Hermes-style answer."""
    from llamacpp_truth import llama_server
    from openai import OpenAI

    server = llama_server()
    if not server:
        pytest.skip(
            "no llama-server here (.ci/install-llama-server builds one; LLMGW_LLAMA_SERVER names one)"
        )
    model_dir = tmp_path / "models"
    model_path = write_tiny_tool_caller_gguf(model_dir / "tools" / "tools.gguf")
    serve = (
        f"  - serve: {{model: {model_path}, engine: llama.cpp, context: 2048, name: tools,"
        " engine_args: {jinja: true}, timeout: 120}\n"
    )
    done, _ = run_script_on_this_machine(
        tmp_path, serve, model_dir, "nothing names this", engines={"llama.cpp": {"bin": server}}
    )
    try:
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        replica = json.loads(done.stdout.splitlines()[-1])["result"]["replica"]
        (shard,) = replica["shards"]
        assert shard["argv"][0] == server and "--jinja" in shard["argv"]
        assert shard["argv"][shard["argv"].index("--flash-attn") + 1] == "on"
        port = replica["endpoint"].rsplit(":", 1)[1]
        client = OpenAI(
            base_url=f"https://{replica['http_host']}:{port}/v1",
            api_key="none",
            http_client=httpx.Client(verify=pinned_context(replica["tls_cert"])),
        )
        tools = [WEATHER_TOOL]
        answer = client.chat.completions.create(
            model="tools",
            messages=[{"role": "user", "content": "What is the weather in Paris?"}],
            tools=tools,
            max_tokens=64,
        )
        choice = answer.choices[0]
        assert choice.finish_reason == "tool_calls", choice
        (call,) = choice.message.tool_calls
        assert call.function.name == TOOL_CALL["name"]
        assert json.loads(call.function.arguments) == TOOL_CALL["arguments"]
    finally:
        stopped, left_running = run_script_on_this_machine(
            tmp_path, "  - stop: {replica: tools}\n", model_dir, str(model_path)
        )
    assert stopped.returncode == 0, stopped.stdout[-2000:]
    assert list(left_running.values()) == []


CO_TENANT = '''#!{python}
"""llama-server, but on its first start a co-tenant takes its port just before it binds."""
import os, subprocess, sys, time
argv = sys.argv[1:]
marker = {marker!r}
if "--port" in argv and not os.path.exists(marker):
    open(marker, "w").close()
    host, port = argv[argv.index("--host") + 1], argv[argv.index("--port") + 1]
    holder = subprocess.Popen(
        [sys.executable, "-c", {hold!r}, host, port, marker + ".held"], start_new_session=True
    )
    while not os.path.exists(marker + ".held"):
        time.sleep(0.01)
os.execv({server!r}, [{server!r}, *argv])
'''

HOLD = (
    "import os, socket, sys, time\n"
    "s = socket.socket()\n"
    "s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)\n"  # as the engine binds
    "try:\n"
    "    s.bind((sys.argv[1], int(sys.argv[2]))); s.listen()\n"
    "except OSError:\n"  # another test's engine won it first: the same race, from elsewhere
    "    open(sys.argv[3], 'w').write('0'); sys.exit()\n"
    "open(sys.argv[3], 'w').write(str(os.getpid()))\n"
    "time.sleep(120)\n"
)


def test_an_engine_whose_port_a_co_tenant_took_first_is_started_again_on_a_free_one(
    tmp_path: Path,
):
    """`port.free` finds the port free; another user's process binds it before llama-server
    does. The real llama-server fails on it, and serve starts the replica again on ports
    asked for afresh, instead of failing the serve (the race two consoles, or CI's parallel
    tests, run on one node)."""
    from llamacpp_truth import llama_server

    server = llama_server()
    if not server:
        pytest.skip(
            "no llama-server here (.ci/install-llama-server builds one; LLMGW_LLAMA_SERVER names one)"
        )
    model_dir = tmp_path / "models"
    model_path = write_tiny_llama_gguf(model_dir / "tiny-llama" / "tiny.gguf")
    marker = tmp_path / "co-tenant"
    wrapper = tmp_path / "llama-server"
    wrapper.write_text(
        CO_TENANT.format(python=sys.executable, marker=str(marker), hold=HOLD, server=server)
    )
    wrapper.chmod(0o755)
    serve = (
        f"  - serve: {{model: {model_path}, engine: llama.cpp, context: 512, name: raced,"
        " timeout: 120}\n"
    )
    try:
        done, _ = run_script_on_this_machine(
            tmp_path,
            serve,
            model_dir,
            "nothing names this",
            engines={"llama.cpp": {"bin": str(wrapper)}},
        )
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        result = json.loads(done.stdout.splitlines()[-1])["result"]
        steps = [step["step"] for step in result["trace"]]
        # Once for the co-tenant (more where another test's engine took the next port too).
        lost = [step for step in result["trace"] if step["step"] == "lost a race for its port"]
        assert lost, result["trace"]
        assert all("r0 here could not bind its port" in step["detail"] for step in lost)
        assert steps.count("claimed, process started") == len(lost) + 1
        replica = result["replica"]
        assert replica["phase"] == "ready"
    finally:
        with contextlib.suppress(FileNotFoundError, ValueError, ProcessLookupError):
            if held := int((tmp_path / "co-tenant.held").read_text()):
                os.kill(held, signal.SIGKILL)
        run_script_on_this_machine(
            tmp_path, "  - stop: {replica: raced}\n", model_dir, str(model_path)
        )
