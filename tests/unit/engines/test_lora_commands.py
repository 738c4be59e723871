"""Each engine is started with its own LoRA flags, and the sim reads them as the engine would."""

from __future__ import annotations

import json

import pytest
from engine_nodes import h100_cards, h100_node, llama_request, request

from llmgw_agent.sim.engine.args import engine_kind, parse_engine_argv
from llmgw_core.engines import build_launch
from llmgw_core.engines.spec import LoraLaunch
from llmgw_core.errors import BadInput

TWO = LoraLaunch((("sql", "/a/sql"), ("chat", "/a/chat")), max_loras=2, max_lora_rank=12)


def _argv(asked) -> list[str]:
    return list(build_launch(asked).shards[0].main.argv)


def _sim(argv: list[str]) -> dict:
    kind = engine_kind(argv)
    assert kind is not None
    return parse_engine_argv(kind, argv)


def test_vllm_gets_its_slots_the_adapters_with_their_base_and_runtime_updates():
    launch = build_launch(request(nodes=(h100_node(gpus=h100_cards(1)),), lora=TWO))
    main = launch.shards[0].main
    argv = list(main.argv)
    at = argv.index("--lora-modules")
    assert argv[argv.index("--max-loras") + 1] == "2"
    assert argv[argv.index("--max-lora-rank") + 1] == "16"  # 12 rounded up to vLLM's choice
    given = [json.loads(x) for x in argv[at + 1 : at + 3]]
    assert given == [
        {"name": "sql", "path": "/a/sql", "base_model_name": "llama-70b"},
        {"name": "chat", "path": "/a/chat", "base_model_name": "llama-70b"},
    ]
    assert main.env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"
    assert launch.adapters == ({"name": "sql", "lora_id": None}, {"name": "chat", "lora_id": None})
    read = _sim(argv)
    assert read["adapters"] == [
        {"name": "sql", "path": "/a/sql"},
        {"name": "chat", "path": "/a/chat"},
    ]


def test_sglang_gets_its_batch_slots_and_paths():
    node = h100_node(
        gpus=h100_cards(1), program=("/opt/venv/bin/python3", "-m", "sglang.launch_server")
    )
    argv = _argv(request(nodes=(node,), engine="sglang", lora=TWO))
    assert argv[argv.index("--max-loras-per-batch") + 1] == "2"
    assert argv[argv.index("--max-lora-rank") + 1] == "12"
    assert argv[argv.index("--lora-paths") + 1 :][:2] == ["sql=/a/sql", "chat=/a/chat"]
    assert [a["name"] for a in _sim(argv)["adapters"]] == ["sql", "chat"]


def test_llama_server_loads_every_adapter_at_scale_zero_and_numbers_them():
    lora = LoraLaunch((("sql", "/a/sql.gguf"), ("chat", "/a/chat.gguf")), 2, 8)
    node = h100_node(gpus=h100_cards(1), program=("llama-server",))
    launch = build_launch(llama_request(node, lora=lora))
    argv = list(launch.shards[0].main.argv)
    assert argv[argv.index("--lora-scaled") + 1] == "/a/sql.gguf:0,/a/chat.gguf:0"
    assert "--lora" not in argv
    assert launch.adapters == ({"name": "sql", "lora_id": 0}, {"name": "chat", "lora_id": 1})
    assert _sim(argv)["adapters"] == [
        {"name": "0", "path": "/a/sql.gguf", "scale": 0.0},
        {"name": "1", "path": "/a/chat.gguf", "scale": 0.0},
    ]


def test_a_path_llama_servers_list_cannot_carry_is_refused():
    lora = LoraLaunch((("odd", "/a/one,two.gguf"),), 1, 8)
    node = h100_node(gpus=h100_cards(1), program=("llama-server",))
    with pytest.raises(BadInput, match="holds a ',' or a ':'"):
        build_launch(llama_request(node, lora=lora))


def test_llama_cpp_python_takes_one_adapter_for_every_request_and_refuses_two():
    python = ("/opt/venv/bin/python3", "-m", "llama_cpp.server")
    node = h100_node(gpus=h100_cards(1), program=python)
    one = LoraLaunch((("sql", "/a/sql.gguf"),), 1, 8)
    launch = build_launch(llama_request(node, lora=one))
    argv = list(launch.shards[0].main.argv)
    assert argv[argv.index("--lora_path") + 1] == "/a/sql.gguf"
    assert launch.adapter_only
    with pytest.raises(BadInput, match="applies one LoRA adapter to every request"):
        build_launch(llama_request(node, lora=LoraLaunch((("a", "/a"), ("b", "/b")), 2, 8)))
