"""SGLang's launch_server on every node; llama.cpp's two servers on one node."""

from __future__ import annotations

from engine_nodes import (
    GGUF,
    LLAMA_70B,
    flag,
    h100_cards,
    h100_node,
    llama_request,
    request,
    two_h100_nodes,
)

from llmgw_core.engines import build_launch, health_path, health_url

SGLANG_PYTHON = ("/opt/llm/venv/bin/python3", "-m", "sglang.launch_server")


def _sglang(**changes):
    nodes = changes.pop("nodes", None) or two_h100_nodes(
        program=SGLANG_PYTHON, engine_version="0.5.3"
    )
    return request(nodes=nodes, engine="sglang", **changes)


def test_sglang_runs_launch_server_on_every_node_with_full_flag_names():
    plan = build_launch(_sglang())
    assert plan.executor == "sglang"
    for shard in plan.shards:
        argv = shard.main.argv
        assert argv[:3] == SGLANG_PYTHON
        assert flag(argv, "--model-path") == LLAMA_70B
        assert flag(argv, "--served-model-name") == "llama-70b"
        assert flag(argv, "--tp-size") == "8"
        assert flag(argv, "--pp-size") == "2"
        assert flag(argv, "--context-length") == "32768"
        assert flag(argv, "--mem-fraction-static") == "0.90"
        assert flag(argv, "--nnodes") == "2"
        assert flag(argv, "--node-rank") == str(shard.rank)
        assert flag(argv, "--dist-init-addr") == "10.20.0.11:20000"
        assert "--tp" not in argv
        assert "--pp" not in argv


def test_sglang_ranks_from_1_serve_no_http():
    head, worker = build_launch(_sglang()).shards
    assert head.health_url == "http://127.0.0.1:8000/health"
    assert worker.serves_http is False
    assert worker.health_url is None


def test_sglang_spreads_experts_as_wide_as_the_tensor_group():
    argv = build_launch(_sglang(expert_parallel=True)).shards[0].main.argv
    assert flag(argv, "--ep-size") == "8"


def test_sglang_on_one_node_names_no_nodes_and_no_pipeline():
    node = h100_node(program=SGLANG_PYTHON, gpus=h100_cards(4))
    argv = build_launch(_sglang(nodes=(node,))).shards[0].main.argv
    for absent in ("--nnodes", "--node-rank", "--dist-init-addr", "--pp-size"):
        assert absent not in argv
    assert flag(argv, "--host") == "0.0.0.0"
    assert flag(argv, "--port") == "8000"


def test_sglang_takes_the_quantisation_dtype_and_running_requests():
    argv = (
        build_launch(_sglang(quantization_flag="fp8", dtype_flag="half", concurrency=8))
        .shards[0]
        .main.argv
    )
    assert flag(argv, "--quantization") == "fp8"
    assert flag(argv, "--dtype") == "half"
    assert flag(argv, "--max-running-requests") == "8"


def test_sglang_without_a_known_interpreter_runs_python3():
    node = h100_node(program=(), gpus=h100_cards(1))
    argv = build_launch(_sglang(nodes=(node,))).shards[0].main.argv
    assert argv[:3] == ("python3", "-m", "sglang.launch_server")


def _cpu_node(program=("/usr/local/bin/llama-server",)):
    return h100_node(
        name="cpu-01", gpus=(), adapters=(), fabric=None, program=program, engine_version="b6500"
    )


def test_llama_server_on_a_cpu_node_offloads_no_layer():
    plan = build_launch(llama_request(_cpu_node()))
    (shard,) = plan.shards
    argv = shard.main.argv
    assert argv[0] == "/usr/local/bin/llama-server"
    assert flag(argv, "--model") == GGUF
    assert flag(argv, "--alias") == "qwen-7b"
    assert flag(argv, "--host") == "0.0.0.0"
    assert flag(argv, "--port") == "8000"
    assert flag(argv, "--ctx-size") == "8192"
    assert flag(argv, "--n-gpu-layers") == "0"
    assert "--split-mode" not in argv
    assert shard.gpus == ()
    assert shard.health_url == "http://127.0.0.1:8000/health"


def test_llama_server_on_two_cards_puts_every_layer_on_them_split_by_layer():
    node = h100_node(gpus=h100_cards(2), program=("llama-server",), engine_version="b6500")
    argv = build_launch(llama_request(node)).shards[0].main.argv
    assert flag(argv, "--n-gpu-layers") == "999"
    assert flag(argv, "--split-mode") == "layer"


def test_llama_server_gives_each_parallel_slot_a_whole_context():
    argv = build_launch(llama_request(_cpu_node(), concurrency=4)).shards[0].main.argv
    assert flag(argv, "--ctx-size") == str(4 * 8192)
    assert flag(argv, "--parallel") == "4"


def test_llama_cpp_python_takes_its_own_flag_names_and_is_probed_without_its_model_lock():
    program = ("/opt/llama/bin/python3", "-m", "llama_cpp.server")
    plan = build_launch(llama_request(_cpu_node(program=program), concurrency=4))
    shard = plan.shards[0]
    argv = shard.main.argv
    assert argv[:3] == program
    assert flag(argv, "--model") == GGUF
    assert flag(argv, "--model_alias") == "qwen-7b"
    assert flag(argv, "--n_ctx") == "8192"
    assert flag(argv, "--n_gpu_layers") == "0"
    assert flag(argv, "--port") == "8000"
    assert flag(argv, "--interrupt_requests") == "False"
    assert shard.health_url == "http://127.0.0.1:8000/openapi.json"
    assert plan.health_path == "/openapi.json"


def test_llama_cpp_python_on_a_card_offloads_every_layer():
    program = ("python3", "-m", "llama_cpp.server")
    node = h100_node(gpus=h100_cards(1), program=program)
    assert flag(build_launch(llama_request(node)).shards[0].main.argv, "--n_gpu_layers") == "-1"


def test_each_engine_has_one_health_path():
    assert health_path("vllm") == "/health"
    assert health_path("sglang") == "/health"
    assert health_path("llama.cpp", ("llama-server",)) == "/health"
    assert health_path("llama.cpp", ("python3", "-m", "llama_cpp.server")) == "/openapi.json"
    assert health_url("vllm", "::", 8000) == "http://127.0.0.1:8000/health"
    assert health_url("vllm", "fd00::11", 8000) == "http://[fd00::11]:8000/health"


def test_llama_server_is_told_flash_attention_on_as_the_plan_sizes_it():
    argv = build_launch(llama_request(_cpu_node())).shards[0].main.argv
    assert flag(argv, "--flash-attn") == "on"
    assert "--ubatch-size" not in argv


def test_flash_attention_off_and_a_micro_batch_are_written_once_from_engine_args():
    argv = (
        build_launch(
            llama_request(_cpu_node(), engine_args={"flash_attn": False, "ubatch_size": "1024"})
        )
        .shards[0]
        .main.argv
    )
    assert flag(argv, "--flash-attn") == "off"
    assert flag(argv, "--ubatch-size") == "1024"
    assert argv.count("--flash-attn") == 1 and argv.count("--ubatch-size") == 1


def test_llama_cpp_python_is_told_flash_attention_on_too():
    program = ("python3", "-m", "llama_cpp.server")
    argv = build_launch(llama_request(_cpu_node(program=program))).shards[0].main.argv
    assert flag(argv, "--flash_attn") == "True"
