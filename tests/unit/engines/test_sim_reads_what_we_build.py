"""The sim engine reads the very command lines the builders make.

In replay mode the agent runs the sim engine in place of the real one with
the real argv (`llmgw_agent.sim.engine.args`). If the sim misread a built
command, the demo would pass while a real fleet failed — so every kind of
command is fed to the sim's own recogniser and parser here.
"""

from __future__ import annotations

import pytest
from engine_nodes import LLAMA_70B, h100_cards, h100_node, request, two_h100_nodes

from llmgw_agent.sim.engine.args import engine_kind, parse_engine_argv
from llmgw_core.engines import build_launch

GGUF = "/var/lib/llmgw-models/qwen-7b-q4_k_m.gguf"


def _read(argv: tuple[str, ...]) -> dict:
    kind = engine_kind(list(argv))
    assert kind is not None, f"the sim does not recognise {argv[:3]}"
    return parse_engine_argv(kind, list(argv))


def test_the_sim_reads_a_single_node_vllm_command():
    argv = build_launch(request(nodes=(h100_node(gpus=h100_cards(4)),))).shards[0].main.argv
    engine = _read(argv)
    assert engine["kind"] == "vllm"
    assert engine["model"] == LLAMA_70B
    assert engine["served_name"] == "llama-70b"
    assert (engine["host"], engine["port"]) == ("0.0.0.0", 8000)
    assert (engine["tp"], engine["pp"], engine["nnodes"]) == (4, 1, 1)
    assert engine["context_tokens"] == 32768
    assert engine["memory_fraction"] == 0.9
    assert engine["serves_http"]


def test_the_sim_reads_vllms_multiprocessing_ranks_and_the_headless_one():
    head, worker = (
        _read(shard.main.argv) for shard in build_launch(request(nodes=two_h100_nodes())).shards
    )
    assert (head["nnodes"], head["node_rank"], head["serves_http"]) == (2, 0, True)
    assert (worker["nnodes"], worker["node_rank"], worker["serves_http"]) == (2, 1, False)
    assert (head["tp"], head["pp"]) == (worker["tp"], worker["pp"]) == (8, 2)
    assert worker["model"] == LLAMA_70B


def test_the_sim_reads_the_ray_head_its_worker_and_vllm_on_ray():
    head, worker = build_launch(request(nodes=two_h100_nodes(engine_version="0.11.0"))).shards
    ray_head = _read(head.commands[0].argv)
    assert (ray_head["kind"], ray_head["head"], ray_head["port"]) == ("ray", True, 6379)
    ray_worker = _read(worker.main.argv)
    assert (ray_worker["kind"], ray_worker["head"]) == ("ray", False)
    serve = _read(head.main.argv)
    assert (serve["kind"], serve["tp"], serve["pp"], serve["port"]) == ("vllm", 8, 2, 8000)


def test_the_sim_reads_sglangs_ranks_and_only_rank_0_serves():
    nodes = two_h100_nodes(program=("/opt/llm/venv/bin/python3", "-m", "sglang.launch_server"))
    plan = build_launch(request(nodes=nodes, engine="sglang"))
    head, worker = (_read(shard.main.argv) for shard in plan.shards)
    assert head["kind"] == worker["kind"] == "sglang"
    assert (head["node_rank"], head["serves_http"]) == (0, True)
    assert (worker["node_rank"], worker["serves_http"]) == (1, False)
    assert (head["tp"], head["pp"], head["nnodes"]) == (8, 2, 2)
    assert head["model"] == LLAMA_70B
    assert head["served_name"] == "llama-70b"
    assert head["context_tokens"] == 32768
    assert head["memory_fraction"] == 0.9


@pytest.mark.parametrize(
    "program",
    [("/usr/local/bin/llama-server",), ("/opt/llama/bin/python3", "-m", "llama_cpp.server")],
)
def test_the_sim_reads_both_llama_cpp_servers(program):
    node = h100_node(gpus=(), adapters=(), fabric=None, program=program, http_port=8080)
    req = request(
        nodes=(node,),
        engine="llama.cpp",
        source=GGUF,
        served_name="qwen-7b",
        context=4096,
        planned_context=4096,
        tensor_parallel=1,
    )
    engine = _read(build_launch(req).shards[0].main.argv)
    assert engine["kind"] == "llama.cpp"
    assert engine["model"] == GGUF
    assert engine["served_name"] == "qwen-7b"
    assert engine["port"] == 8080
    assert engine["context_tokens"] == 4096
    assert engine["gpu_layers"] == "0"
    assert engine["serves_http"]


def test_the_sim_engine_is_given_vllms_own_commands():
    nodes = two_h100_nodes(simulated=True, engine_version="0.11.0")
    sim, real = (build_launch(request(nodes=nodes, engine=e)) for e in ("sim", "vllm"))
    assert [s.commands for s in sim.shards] == [s.commands for s in real.shards]
    assert sim.executor == "ray"
