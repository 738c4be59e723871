"""The sim engine, started by the real agent in replay mode in place of real engines."""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from agent_process import AgentClient, agent_env
from ports import free_port

from llmgw_agent.sim.engine.args import engine_kind, parse_engine_argv
from llmgw_agent.sim.engine.lines import nccl_lines
from llmgw_agent.sim.engine.serving import TOKEN_S, _token_s

CARD_MIB = 81559
CAPTURE_XML = (
    "<?xml version='1.0'?><nvidia_smi_log>"
    + f"<gpu id='0'><fb_memory_usage><total>{CARD_MIB} MiB</total></fb_memory_usage></gpu>" * 2
    + "</nvidia_smi_log>"
)


def http_status(url: str) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code
    except OSError:
        return None


def post_json(url: str, body: dict) -> dict:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=5) as response:
        return json.loads(response.read())


@pytest.fixture
def replay_agent(state_dir: Path, tmp_path: Path):
    capture = tmp_path / "capture"
    capture.mkdir()
    (capture / "nvidia-smi-q-x.xml").write_text(CAPTURE_XML)
    client = AgentClient(
        agent_env(state_dir), "--replay", str(capture), stderr_path=tmp_path / "agent.stderr"
    )
    yield client
    for shard in client.call("shard.list")["shards"]:
        if shard["phase"] in ("starting", "running"):
            client.call("shard.stop", {"shard_id": shard["shard_id"], "timeout_s": 5})
    client.close()


def all_log_lines(agent: AgentClient, shard_id: str) -> list[str]:
    request_id = agent.send("shard.logs", {"shard_id": shard_id, "tail": 10000})
    lines: list[str] = []
    while "event" in (message := agent.next_message(request_id)):
        lines.extend(message["event"]["lines"])
    return lines


def wait_for_line(agent: AgentClient, shard_id: str, text: str, timeout_s: float = 20) -> list:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        lines = all_log_lines(agent, shard_id)
        if any(text in line for line in lines):
            return lines
        time.sleep(0.1)
    raise AssertionError(f"{text!r} never appeared in the log of {shard_id}: {lines[-20:]}")


def test_vllm_in_replay_mode_loads_then_serves_chat_and_says_it_uses_the_fabric(
    replay_agent: AgentClient, state_dir: Path
) -> None:
    assert replay_agent.hello["replay"] is True
    port = free_port()
    argv = ["vllm", "serve", "/models/tiny-llama", "--port", str(port)]
    argv += ["--served-model-name", "tiny", "--tensor-parallel-size", "2"]
    argv += ["--gpu-memory-utilization", "0.5"]
    env = {
        "CUDA_VISIBLE_DEVICES": "0,1",
        "NCCL_DEBUG": "INFO",
        "NCCL_IB_HCA": "=mlx5_0:1,mlx5_1:1",
        "LLMGW_SIM_LOAD_S": "1.0",
    }
    started = replay_agent.call(
        "shard.start",
        {
            "replica": "tiny-1",
            "rank": 0,
            "gpus": ["0", "1"],
            "commands": [{"name": "vllm", "argv": argv, "env": env, "role": "main"}],
            "health_url": f"http://127.0.0.1:{port}/health",
        },
    )
    health = f"http://127.0.0.1:{port}/health"
    seen: list[int] = []
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and 200 not in seen:
        status = http_status(health)
        if status is not None and (not seen or seen[-1] != status):
            seen.append(status)
        time.sleep(0.02)
    assert seen == [503, 200]

    reply = post_json(
        f"http://127.0.0.1:{port}/v1/chat/completions",
        {"model": "tiny", "messages": [{"role": "user", "content": "Say hello"}]},
    )
    assert reply["choices"][0]["message"]["content"] == (
        "Hello from the simulated vllm engine serving tiny."
    )
    assert reply["model"] == "tiny"

    lines = wait_for_line(replay_agent, started["shard_id"], "Application startup complete.")
    assert any("NCCL INFO NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/IB" in line for line in lines)
    assert any(line.endswith("NCCL INFO Using network IB") for line in lines)
    assert any("GPU KV cache size:" in line for line in lines)
    assert any("Model loading took" in line for line in lines)

    usage = [json.loads(p.read_text()) for p in (state_dir / "sim-usage").glob("*.json")]
    assert usage == [
        {
            "pid": usage[0]["pid"],
            "gpus": ["0", "1"],
            "used_mib": int(CARD_MIB / 1024 * 0.5 * 1024),
            "cuda_visible_devices": "0,1",
        }
    ]
    shard = next(s for s in replay_agent.call("shard.list")["shards"])
    deadline = time.monotonic() + 10
    while shard["healthy"] is not True and time.monotonic() < deadline:
        time.sleep(0.2)
        shard = replay_agent.call("shard.list")["shards"][0]
    assert shard["healthy"] is True

    stopped = replay_agent.call("shard.stop", {"shard_id": started["shard_id"], "timeout_s": 5})
    assert stopped["phase"] == "stopped"
    assert stopped["killed"] is False
    (shard,) = replay_agent.call("shard.list")["shards"]
    assert shard["commands"][0]["exit_code"] == 0  # SIGTERM: a clean exit
    assert list((state_dir / "sim-usage").glob("*.json")) == []


def test_an_sglang_worker_rank_without_a_fabric_serves_no_http_and_falls_back_to_sockets(
    replay_agent: AgentClient,
) -> None:
    port = free_port()
    argv = ["/usr/bin/python3", "-m", "sglang.launch_server", "--model-path", "/models/m"]
    argv += ["--tp-size", "8", "--nnodes", "2", "--node-rank", "1"]
    argv += ["--dist-init-addr", "10.0.0.1:20000", "--port", str(port)]
    env = {"NCCL_DEBUG": "INFO", "NCCL_IB_DISABLE": "1", "NCCL_MNNVL_ENABLE": "1"}
    env["LLMGW_SIM_LOAD_S"] = "0.3"
    shard_id = replay_agent.call(
        "shard.start",
        {
            "replica": "m-1",
            "rank": 1,
            "gpus": ["0"],
            "commands": [{"name": "sglang", "argv": argv, "env": env}],
        },
    )["shard_id"]
    lines = wait_for_line(replay_agent, shard_id, "Memory pool end")
    assert any(line.endswith("NCCL INFO Using network Socket") for line in lines)
    assert any("NCCL INFO NET/Socket : Using [0]" in line for line in lines)
    assert any("nNodes 2 localRanks 4 localRank 0 MNNVL 1" in line for line in lines)
    assert not any("NET/IB : Using" in line for line in lines)
    # the shard bar redrawn with \r arrives as separate lines
    assert "Loading safetensors checkpoint shards: 100% Completed | 4/4" in lines
    assert http_status(f"http://127.0.0.1:{port}/health") is None


def test_llama_server_in_replay_mode_lists_its_alias_as_the_model(
    replay_agent: AgentClient,
) -> None:
    port = free_port()
    argv = ["/opt/llama.cpp/bin/llama-server", "-m", "/models/tiny.gguf", "--port", str(port)]
    argv += ["-ngl", "99", "-c", "4096", "-a", "tiny-gguf"]
    shard_id = replay_agent.call(
        "shard.start",
        {
            "replica": "g-1",
            "rank": 0,
            "gpus": ["1"],
            "commands": [{"name": "llama", "argv": argv, "env": {"LLMGW_SIM_LOAD_S": "0.2"}}],
        },
    )["shard_id"]
    wait_for_line(replay_agent, shard_id, "server is listening")
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=5) as response:
        models = json.loads(response.read())
    assert models["data"][0]["id"] == "tiny-gguf"
    assert models["data"][0]["max_model_len"] == 4096


def test_a_failing_sim_engine_fails_the_shard_with_its_last_lines_in_the_log(
    replay_agent: AgentClient,
) -> None:
    env = {"LLMGW_SIM_LOAD_S": "0.2", "LLMGW_SIM_FAIL": "CUDA out of memory"}
    shard_id = replay_agent.call(
        "shard.start",
        {
            "replica": "oom",
            "rank": 0,
            "gpus": ["0"],
            "commands": [{"argv": ["vllm", "serve", "/m", "--port", str(free_port())], "env": env}],
        },
    )["shard_id"]
    lines = wait_for_line(replay_agent, shard_id, "shard failed")
    assert any("EngineCore failed to start: CUDA out of memory" in line for line in lines)
    assert replay_agent.call("claims") == {"claims": []}


def _ray_head_shard(port: int, secret_env: dict) -> dict:
    """The Ray head the core builds for rank 0 (on this machine's loopback), as one shard."""
    from llmgw_core.engines import LaunchNode
    from llmgw_core.engines.ray_cluster import auth_env, head_argv

    node = LaunchNode(name="h100-a-01", rank=0, address="127.0.0.1")
    return {
        "replica": "ray",
        "rank": 0,
        "gpus": ["0"],
        "commands": [{"name": "ray-head", "argv": list(head_argv(("ray",), node, port)),
                      "env": auth_env()}],
        "secret_env": secret_env,
    }  # fmt: skip


def test_the_sim_ray_head_starts_with_its_token_in_the_private_folder_the_agent_made(
    replay_agent: AgentClient, state_dir: Path
) -> None:
    from llmgw_core.engines.ray_cluster import new_token

    port = free_port()
    shard_id = replay_agent.call(
        "shard.start", _ray_head_shard(port, {"RAY_AUTH_TOKEN": new_token()})
    )["shard_id"]
    wait_for_line(replay_agent, shard_id, "Ray runtime started.")
    with socket.create_connection(("127.0.0.1", port), timeout=5):
        pass
    private = Path(
        json.loads((state_dir / "shards" / shard_id / "shard.json").read_text())["private_dir"]
    )
    assert (private / "ray").is_dir()
    assert private.stat().st_mode & 0o777 == 0o700


def test_a_ray_head_without_its_token_stops_as_ray_does(replay_agent: AgentClient) -> None:
    shard_id = replay_agent.call("shard.start", _ray_head_shard(free_port(), {}))["shard_id"]
    lines = wait_for_line(replay_agent, shard_id, "shard failed")
    assert any("no authentication token was found" in line for line in lines)


@pytest.mark.parametrize(
    ("argv", "kind"),
    [
        (["vllm", "serve", "m"], "vllm"),
        (["/usr/local/bin/llama-server", "-m", "x.gguf"], "llama.cpp"),
        (["python3", "-m", "sglang.launch_server", "--model-path", "m"], "sglang"),
        (["/venv/bin/python", "-m", "vllm.entrypoints.openai.api_server"], "vllm"),
        (["python3.11", "-m", "llama_cpp.server", "--model", "x.gguf"], "llama.cpp"),
        (["ray", "start", "--head"], "ray"),
        (["rpc-server", "-p", "50052"], "rpc-server"),
        (["python3", "-c", "pass"], None),
        (["sh", "-c", "vllm serve m"], None),
    ],
)
def test_the_engine_a_command_starts_is_told_by_its_program_or_module(
    argv: list[str], kind: str | None
) -> None:
    assert engine_kind(argv) == kind


def test_the_vllm_command_line_is_read_with_its_parallel_sizes_and_names() -> None:
    argv = ["vllm", "serve", "/models/llama", "--port", "8001", "--tensor-parallel-size", "4"]
    argv += ["--pipeline-parallel-size", "2", "--served-model-name", "llama", "alias"]
    argv += ["--max-model-len", "32K", "--nnodes", "2", "--node-rank", "1", "--headless"]
    argv += ["--trust-remote-code"]
    engine = parse_engine_argv("vllm", argv)
    assert (engine["model"], engine["served_name"], engine["port"]) == (
        "/models/llama",
        "llama",
        8001,
    )
    assert (engine["tp"], engine["pp"], engine["nnodes"], engine["node_rank"]) == (4, 2, 2, 1)
    assert engine["context_tokens"] == 32768
    assert engine["serves_http"] is False


def test_the_sim_says_at_start_up_what_the_memory_flags_it_was_given_change() -> None:
    from llmgw_agent.sim.engine.lines import memory_plan, ready_lines

    base = ["vllm", "serve", "/models/llama", "--gpu-memory-utilization", "0.9"]
    plain = memory_plan(parse_engine_argv("vllm", base), 81559, 16 * 2**30)
    fp8 = memory_plan(
        parse_engine_argv("vllm", [*base, "--kv-cache-dtype", "fp8"]), 81559, 16 * 2**30
    )
    assert fp8["kv_gib"] == plain["kv_gib"]  # the same memory …
    assert fp8["kv_tokens"] == pytest.approx(
        2 * plain["kv_tokens"], rel=0.001
    )  # … twice the tokens
    said = ready_lines(parse_engine_argv("vllm", base), fp8, 1.0, "127.0.0.1:8000")
    assert f"GPU KV cache size: {fp8['kv_tokens']:,} tokens" in " ".join(said)
    llama = ["llama-server", "-m", "m.gguf", "--ctx-size", "8192", "--flash-attn", "off"]
    f16 = parse_engine_argv("llama.cpp", llama)
    q8 = parse_engine_argv(
        "llama.cpp", [*llama, "--cache-type-k", "q8_0", "--cache-type-v", "q8_0"]
    )
    assert memory_plan(q8, 81559, 0)["kv_gib"] == pytest.approx(
        memory_plan(f16, 81559, 0)["kv_gib"] * 34 / 64
    )
    assert "llama_context: flash_attn = disabled" in ready_lines(
        f16, memory_plan(f16, 81559, 0), 1.0, "x"
    )


def test_nccl_says_roce_when_a_gid_index_is_given_and_nothing_without_nccl_debug() -> None:
    engine = parse_engine_argv("vllm", ["vllm", "serve", "m", "--tensor-parallel-size", "2"])
    env = {"NCCL_DEBUG": "INFO", "NCCL_IB_HCA": "=mlx5_2:1", "NCCL_IB_GID_INDEX": "3"}
    lines = nccl_lines(env, "node-a", 42, engine)
    assert (
        "node-a:42:42 [0] NCCL INFO NET/IB : Using [0]mlx5_2:1/RoCE ; OOB eth0:127.0.0.1<0>"
        in lines
    )
    assert nccl_lines({"NCCL_IB_HCA": "mlx5_0"}, "node-a", 42, engine) == []


def _channel_vias(env: dict, argv: list, cards: list, topology: dict) -> set:
    engine = parse_engine_argv("vllm", ["vllm", "serve", "m", *argv])
    lines = nccl_lines({"NCCL_DEBUG": "INFO", **env}, "node-a", 42, engine, cards, topology)
    return {line.split(" via ", 1)[1] for line in lines if " via " in line}


def test_the_sim_joins_cards_the_way_nccl_does_on_each_kind_of_box() -> None:
    nv18 = {str(a): {str(b): "NV18" for b in range(8) if b != a} for a in range(8)}
    pcie = {"0": {"1": "NODE"}, "1": {"0": "NODE"}}
    tp4 = ["--tensor-parallel-size", "4"]
    assert _channel_vias({}, tp4, ["0", "1", "2", "3"], nv18) == {"P2P/CUMEM"}
    # NCCL_P2P_DISABLE sends even NVLink cards through host memory.
    disabled = {"NCCL_P2P_DISABLE": "1"}
    assert _channel_vias(disabled, tp4, ["0", "1", "2", "3"], nv18) == {"SHM/direct/direct"}
    # PCIe cards behind different host bridges: past NCCL's P2P level on an Intel host.
    tp2 = ["--tensor-parallel-size", "2"]
    assert _channel_vias({}, tp2, ["0", "1"], pcie) == {"SHM/direct/direct"}
    # Two trays of one NVLink domain: P2P over MNNVL, inside and between the trays.
    trays = ["--tensor-parallel-size", "4", "--pipeline-parallel-size", "2", "--nnodes", "2"]
    mnnvl = {"NCCL_MNNVL_ENABLE": "1"}
    assert _channel_vias(mnnvl, trays, ["0", "1", "2", "3"], nv18) == {"P2P/MNNVL"}
    # Two nodes on InfiniBand: P2P inside, the network between.
    ib = {"NCCL_IB_HCA": "=mlx5_0"}
    assert _channel_vias(ib, trays, ["0", "1", "2", "3"], nv18) == {"P2P/CUMEM", "NET/IB/0/GDRDMA"}


def test_a_sim_engine_on_a_mig_instance_shows_its_memory_in_the_facts_while_it_runs(
    state_dir: Path, tmp_path: Path
) -> None:
    from llmgw_agent.sim.profiles import write_profile

    capture = write_profile("a100-mig", tmp_path / "a100")
    agent = AgentClient(
        agent_env(state_dir), "--replay", str(capture), stderr_path=tmp_path / "agent.stderr"
    )
    try:
        before = {g["id"]: g["memory_used_mib"] for g in agent.call("facts")["gpus"]}
        argv = ["vllm", "serve", "/models/m", "--port", str(free_port())]
        argv += ["--gpu-memory-utilization", "0.5"]
        shard_id = agent.call(
            "shard.start",
            {
                "replica": "mig",
                "rank": 0,
                "gpus": ["1001"],
                "commands": [{"argv": argv, "env": {"LLMGW_SIM_LOAD_S": "0.2"}}],
            },
        )["shard_id"]
        wait_for_line(agent, shard_id, "Application startup complete.")
        during = {g["id"]: g["memory_used_mib"] for g in agent.call("facts")["gpus"]}
        assert during[1001] - before[1001] == int(19968 / 1024 * 0.5 * 1024)
        assert during[1000] == before[1000]

        agent.call("shard.stop", {"shard_id": shard_id, "timeout_s": 5})
        after = {g["id"]: g["memory_used_mib"] for g in agent.call("facts")["gpus"]}
        assert after == before
    finally:
        agent.close()


def test_llama_cpp_over_rpc_waits_for_the_rpc_server_port_then_serves(
    replay_agent: AgentClient,
) -> None:
    rpc_port, http_port = free_port(), free_port()
    rpc = ["rpc-server", "-H", "127.0.0.1", "-p", str(rpc_port)]
    main = ["llama-server", "-m", "/models/big.gguf", "--port", str(http_port)]
    main += ["--rpc", f"127.0.0.1:{rpc_port}", "-ngl", "99"]
    shard_id = replay_agent.call(
        "shard.start",
        {
            "replica": "rpc",
            "rank": 0,
            "gpus": ["0", "1"],
            "commands": [
                {"name": "rpc", "argv": rpc, "role": "sidecar", "wait_for_port": rpc_port},
                {"name": "llama", "argv": main, "env": {"LLMGW_SIM_LOAD_S": "0.2"}},
            ],
        },
    )["shard_id"]
    lines = wait_for_line(replay_agent, shard_id, "server is listening")
    assert f"[rpc]   endpoint       : 127.0.0.1:{rpc_port}" in lines
    assert http_status(f"http://127.0.0.1:{http_port}/health") == 200


def test_the_sim_answers_max_num_seqs_at_once_and_counts_the_rest_as_waiting(
    replay_agent: AgentClient,
) -> None:
    import threading

    from llmgw_agent.sim.engine.serving import IN_FLIGHT_NAMES, KV_USE_NAMES
    from llmgw_core.engines.signals import IN_FLIGHT, KV_USE, engine_load

    # The sim speaks the engines' own names, as the core reads them.
    assert IN_FLIGHT_NAMES == IN_FLIGHT
    assert {kind: (name,) for kind, name in KV_USE_NAMES.items()} == {
        kind: names[:1] for kind, names in KV_USE.items()
    }
    port = free_port()
    argv = ["vllm", "serve", "/models/tiny-llama", "--port", str(port)]
    argv += ["--served-model-name", "tiny", "--max-num-seqs", "2"]
    replay_agent.call(
        "shard.start",
        {
            "replica": "busy-1",
            "rank": 0,
            "gpus": ["0"],
            "commands": [
                {"name": "vllm", "argv": argv, "env": {"LLMGW_SIM_LOAD_S": "0.2"}, "role": "main"}
            ],
            "health_url": f"http://127.0.0.1:{port}/health",
        },
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while http_status(base + "/health") != 200:
        assert time.monotonic() < deadline
        time.sleep(0.05)
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 64}
    answers: list[dict] = []
    senders = [
        threading.Thread(
            target=lambda: answers.append(post_json(base + "/v1/chat/completions", body))
        )
        for _ in range(12)
    ]
    for sender in senders:
        sender.start()
    loads = []
    while any(sender.is_alive() for sender in senders):
        with urllib.request.urlopen(base + "/metrics", timeout=5) as response:
            loads.append(engine_load(response.read().decode(), "vllm"))
        time.sleep(0.01)
    for sender in senders:
        sender.join()
    assert len(answers) == 12
    assert max(load.running for load in loads if load) == 2
    assert max(load.waiting for load in loads if load) >= 4
    assert max(load.kv_use for load in loads if load and load.kv_use is not None) == 1.0
    with urllib.request.urlopen(base + "/metrics", timeout=5) as response:
        assert engine_load(response.read().decode(), "vllm") == type(loads[0])(0, 0, 0.0)


def _shard_healthy(agent: AgentClient, shard_id: str, timeout_s: float = 20) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        (shard,) = [s for s in agent.call("shard.list")["shards"] if s["shard_id"] == shard_id]
        if shard.get("healthy"):
            return shard
        assert shard["phase"] in ("starting", "running"), shard
        time.sleep(0.1)
    raise AssertionError(f"{shard_id} never answered its pinned health check: {shard}")


def test_an_engine_given_its_replicas_identity_serves_https_that_only_its_pin_trusts(
    replay_agent: AgentClient, state_dir: Path
) -> None:
    import ssl

    from llmgw_core.engines.identity import (
        CERT_PLACEHOLDER,
        KEY_PLACEHOLDER,
        EngineIdentity,
        pinned_context,
    )

    identity, stranger = EngineIdentity.make("tiny-tls"), EngineIdentity.make("other")
    port = free_port()
    argv = ["vllm", "serve", "/models/tiny-llama", "--port", str(port), "--host", "127.0.0.1"]
    argv += ["--served-model-name", "tiny", "--ssl-certfile", CERT_PLACEHOLDER]
    argv += ["--ssl-keyfile", KEY_PLACEHOLDER]
    health = f"https://127.0.0.1:{port}/health"
    started = replay_agent.call(
        "shard.start",
        {
            "replica": "tiny-tls",
            "rank": 0,
            "gpus": ["0"],
            "commands": [{"name": "vllm", "argv": argv, "env": {"LLMGW_SIM_LOAD_S": "0.3"}}],
            "health_url": health,
            "health_cert": identity.cert_pem,
            "secret_env": identity.secret_env(),
        },
    )
    # The agent's own probe speaks HTTPS pinned to the recorded certificate.
    shard = _shard_healthy(replay_agent, started["shard_id"])
    assert shard["health_url"] == health
    with urllib.request.urlopen(health, context=pinned_context(identity.cert_pem)) as answer:
        assert answer.status == 200
    with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
        urllib.request.urlopen(health, context=pinned_context(stranger.cert_pem), timeout=5)
    assert http_status(f"http://127.0.0.1:{port}/health") is None  # no plain HTTP at all
    # A caller that trusts the system's CAs is refused too.
    with pytest.raises(ssl.SSLError), socket.create_connection(("127.0.0.1", port), 5) as raw:
        ssl.create_default_context().wrap_socket(raw, server_hostname="llmgw-engine")
    lines = wait_for_line(replay_agent, started["shard_id"], "Starting vLLM server on https://")

    # The key reached the engine as an in-memory file: a /dev/fd path on its command line,
    # nothing in its environment, its records or its log.
    key = identity.key_pem.encode()
    main_pid = shard["main_pid"]
    cmdline = Path(f"/proc/{main_pid}/cmdline").read_bytes().split(b"\0")
    assert b"--ssl-keyfile" in cmdline
    assert cmdline[cmdline.index(b"--ssl-keyfile") + 1].startswith(b"/dev/fd/")
    assert b"BEGIN" not in b"\0".join(cmdline)
    environ = Path(f"/proc/{main_pid}/environ").read_bytes()
    assert b"LLMGW_ENGINE_TLS" not in environ and key not in environ
    assert not any(key in path.read_bytes() for path in state_dir.rglob("*") if path.is_file())
    assert not any("PRIVATE KEY" in line for line in lines)


def test_an_https_health_check_is_pinned_to_a_certificate_never_a_key(
    replay_agent: AgentClient,
) -> None:
    from llmgw_core.engines.identity import EngineIdentity

    identity = EngineIdentity.make()
    base = {
        "replica": "bad",
        "rank": 0,
        "commands": [{"name": "vllm", "argv": ["vllm", "serve", "m"]}],
        "health_url": "https://127.0.0.1:1/health",
    }
    for cert in (identity.key_pem, "not a certificate"):
        reply = replay_agent.request("shard.start", {**base, "health_cert": cert})
        assert not reply["ok"] and reply["error"]["code"] == "bad_args", reply
    plain = {**base, "health_url": "http://127.0.0.1:1/health", "health_cert": identity.cert_pem}
    reply = replay_agent.request("shard.start", plain)
    assert "pins an https:// health_url" in reply["error"]["message"]


@pytest.mark.parametrize(
    ("given", "pace"),
    [
        (None, TOKEN_S),
        ("", TOKEN_S),
        ("0.02", 0.02),
        ("0", 0.0),
        ("fast", TOKEN_S),
        ("nan", TOKEN_S),
        ("inf", TOKEN_S),
        ("-1", TOKEN_S),
        ("11", TOKEN_S),
    ],
)
def test_the_sim_pace_is_taken_from_the_environment_only_when_it_is_a_sane_number(
    given: str | None, pace: float
):
    assert _token_s(given) == pace


def test_the_sims_start_up_lines_are_read_as_vllms_on_cards_and_on_a_cpu_node() -> None:
    from llmgw_agent.sim.engine.lines import cpu_kv_plan, memory_plan, ready_lines
    from llmgw_core.engines.startup_lines import startup_figures

    argv = ["vllm", "serve", "/models/llama", "--max-model-len", "4096"]
    engine = parse_engine_argv("vllm", [*argv, "--gpu-memory-utilization", "0.9"])
    on_cards = memory_plan(engine, 81559, 16 * 2**30)
    read = startup_figures(ready_lines(engine, on_cards, 1.0, "127.0.0.1:8000"))
    assert (read["kv_device"], read["kv_tokens"]) == ("GPU", on_cards["kv_tokens"])
    assert read["weights_gib"] == pytest.approx(16.0, abs=1e-3)
    cpu_engine = parse_engine_argv("vllm", argv)
    on_cpu = cpu_kv_plan(cpu_engine, 3, 16 * 2**30, 256.0)
    read = startup_figures(ready_lines(cpu_engine, on_cpu, 1.0, "127.0.0.1:8000"))
    assert (read["kv_device"], read["kv_cache_gib"], read["kv_sized"]) == ("CPU", 3.0, "explicit")
    assert read["kv_tokens"] == on_cpu["kv_tokens"] and read["kv_tokens"] % 128 == 0
    assert "weights_gib" not in read  # vLLM's CPU worker does not print it


def test_a_decode_worker_says_over_what_its_kv_goes_and_the_agent_keeps_it_with_nccls(
    replay_agent: AgentClient,
) -> None:
    from llmgw_core.fabric.kv_transfer import label, read_kv_transport

    port = free_port()
    argv = ["vllm", "serve", "/models/tiny-llama", "--port", str(port)]
    argv += ["--tensor-parallel-size", "2", "--gpu-memory-utilization", "0.5"]
    argv += ["--kv-transfer-config", '{"kv_connector":"NixlConnector","kv_role":"kv_both"}']
    env = {
        "CUDA_VISIBLE_DEVICES": "0,1",
        "NCCL_DEBUG": "INFO",
        "NCCL_IB_HCA": "=mlx5_0:1,mlx5_1:1",
        "UCX_TLS": "rc,cuda_copy,cuda_ipc,sm,self",
        "UCX_NET_DEVICES": "mlx5_0:1,mlx5_1:1",
        "UCX_LOG_LEVEL": "info",
        "LLMGW_SIM_LOAD_S": "0.5",
    }
    started = replay_agent.call(
        "shard.start",
        {
            "replica": "chat-pd-decode-1",
            "rank": 0,
            "gpus": ["0", "1"],
            "commands": [{"name": "vllm", "argv": argv, "env": env, "role": "main"}],
            "health_url": f"http://127.0.0.1:{port}/health",
        },
    )
    wait_for_line(replay_agent, started["shard_id"], "KV transfer:")
    early = replay_agent.call("shard.nccl", {"shard_id": started["shard_id"], "limit": 400})
    assert any("NCCL INFO Using network IB" in line for line in early["lines"])
    found = read_kv_transport(early["lines"])
    assert found is not None and (found.connector, found.kind) == ("NixlConnector", "InfiniBand")
    assert label(found) == "KV over mlx5_0, mlx5_1 (IB)"
    assert any("UCX  INFO  ep_cfg[1]: tag(" in line for line in early["lines"])
