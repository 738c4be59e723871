"""vLLM's commands: one node, Ray across nodes before 0.12, its own multiprocessing from 0.12."""

from __future__ import annotations

from engine_nodes import LLAMA_70B, flag, h100_cards, h100_node, request, two_h100_nodes

from llmgw_core.engines import build_launch


def test_one_node_runs_vllm_serve_with_full_flag_names_and_the_model_as_one_argument():
    plan = build_launch(request(nodes=(h100_node(gpus=h100_cards(4)),)))
    (shard,) = plan.shards
    (command,) = shard.commands
    assert plan.executor == "single"
    assert command.argv[:3] == ("/opt/llm/venv/bin/vllm", "serve", LLAMA_70B)
    assert flag(command.argv, "--served-model-name") == "llama-70b"
    assert flag(command.argv, "--tensor-parallel-size") == "4"
    assert flag(command.argv, "--pipeline-parallel-size") == "1"
    assert flag(command.argv, "--max-model-len") == "32768"
    assert flag(command.argv, "--gpu-memory-utilization") == "0.90"
    assert flag(command.argv, "--host") == "0.0.0.0"
    assert flag(command.argv, "--port") == "8000"
    assert flag(command.argv, "--distributed-executor-backend") == "mp"
    assert "--nnodes" not in command.argv
    assert all(not arg.startswith("-") or arg.startswith("--") for arg in command.argv)


def test_one_card_names_no_executor_backend():
    plan = build_launch(request(nodes=(h100_node(gpus=h100_cards(1)),)))
    assert "--distributed-executor-backend" not in plan.shards[0].main.argv


def test_a_single_node_shard_serves_http_with_its_health_url_on_loopback():
    shard = build_launch(request()).shards[0]
    assert shard.serves_http
    assert shard.health_url == "http://127.0.0.1:8000/health"
    assert shard.gpus == ("0", "1", "2", "3", "4", "5", "6", "7")


def test_an_engine_bound_to_one_address_listens_and_is_probed_there():
    shard = build_launch(request(nodes=(h100_node(bind="10.20.0.11"),))).shards[0]
    assert flag(shard.main.argv, "--host") == "10.20.0.11"
    assert shard.health_url == "http://10.20.0.11:8000/health"
    assert shard.http_host == "10.20.0.11"
    anywhere = build_launch(request(nodes=(h100_node(bind="0.0.0.0"),))).shards[0]
    assert flag(anywhere.main.argv, "--host") == "0.0.0.0"
    assert (anywhere.http_host, anywhere.health_url) == (
        "127.0.0.1",
        "http://127.0.0.1:8000/health",
    )


def test_experts_quantisation_dtype_and_concurrency_are_passed_when_the_plan_says_so():
    argv = (
        build_launch(
            request(
                expert_parallel=True,
                quantization_flag="fp8",
                dtype_flag="half",
                concurrency=16,
            )
        )
        .shards[0]
        .main.argv
    )
    assert "--enable-expert-parallel" in argv
    assert flag(argv, "--quantization") == "fp8"
    assert flag(argv, "--dtype") == "half"
    assert flag(argv, "--max-num-seqs") == "16"


def test_a_dense_model_in_its_own_precision_gets_none_of_those_flags():
    argv = build_launch(request()).shards[0].main.argv
    for absent in ("--enable-expert-parallel", "--quantization", "--dtype", "--max-num-seqs"):
        assert absent not in argv


def test_vllm_0_12_joins_two_nodes_with_its_own_multiprocessing():
    plan = build_launch(request(nodes=two_h100_nodes()))
    head, worker = plan.shards
    assert plan.executor == "mp"
    for shard in plan.shards:
        (command,) = shard.commands
        assert flag(command.argv, "--distributed-executor-backend") == "mp"
        assert flag(command.argv, "--nnodes") == "2"
        assert flag(command.argv, "--node-rank") == str(shard.rank)
        assert flag(command.argv, "--master-addr") == "10.20.0.11"
        assert flag(command.argv, "--master-port") == "29501"
        assert flag(command.argv, "--tensor-parallel-size") == "8"
        assert flag(command.argv, "--pipeline-parallel-size") == "2"
    assert "--headless" not in head.main.argv
    assert flag(head.main.argv, "--port") == "8000"
    assert "--headless" in worker.main.argv
    assert "--port" not in worker.main.argv


def test_only_rank_0_serves_http_and_has_a_health_url():
    head, worker = build_launch(request(nodes=two_h100_nodes())).shards
    assert (head.rank, head.serves_http, head.health_url) == (
        0,
        True,
        "http://127.0.0.1:8000/health",
    )
    assert (worker.rank, worker.serves_http, worker.health_url) == (1, False, None)


def test_the_rendezvous_port_given_is_the_master_port():
    plan = build_launch(request(nodes=two_h100_nodes(), rendezvous_port=31000))
    assert {flag(shard.main.argv, "--master-port") for shard in plan.shards} == {"31000"}


def test_shards_come_rank_0_first_whatever_order_the_nodes_were_given_in():
    nodes = tuple(reversed(two_h100_nodes()))
    plan = build_launch(request(nodes=nodes))
    assert [shard.rank for shard in plan.shards] == [0, 1]
    assert plan.head.node == "h100-a-01"


def test_vllm_0_11_joins_nodes_through_ray_head_and_worker_sidecars():
    plan = build_launch(request(nodes=two_h100_nodes(engine_version="0.11.0")))
    head, worker = plan.shards
    assert plan.executor == "ray"
    ray_head, serve = head.commands
    assert ray_head.argv == (
        "/opt/llm/venv/bin/ray",
        "start",
        "--head",
        "--port",
        "6379",
        "--node-ip-address",
        "10.20.0.11",
        "--temp-dir",
        "@LLMGW_PRIVATE_DIR@/ray",
        "--include-dashboard=false",
        "--block",
    )
    assert (ray_head.role, ray_head.wait_for_port) == ("sidecar", 6379)
    assert serve.role == "main"
    assert serve.argv[:3] == ("/opt/llm/venv/bin/vllm", "serve", LLAMA_70B)
    assert flag(serve.argv, "--distributed-executor-backend") == "ray"
    assert "--nnodes" not in serve.argv
    (join,) = worker.commands
    assert join.argv == (
        "/opt/llm/venv/bin/ray",
        "start",
        "--address",
        "10.20.0.11:6379",
        "--node-ip-address",
        "10.20.0.12",
        "--temp-dir",
        "@LLMGW_PRIVATE_DIR@/ray",
        "--block",
    )
    assert join.role == "main"
    assert worker.health_url is None
    assert plan.start_after_head


def test_multiprocessing_ranks_may_start_in_any_order():
    assert not build_launch(request(nodes=two_h100_nodes())).start_after_head


def test_ray_takes_the_fabric_environment_at_start_on_every_node():
    head, worker = build_launch(request(nodes=two_h100_nodes(engine_version="0.11.0"))).shards
    for command in (*head.commands, *worker.commands):
        assert command.env["NCCL_IB_HCA"] == "=mlx5_0,mlx5_1"
        assert command.env["CUDA_VISIBLE_DEVICES"] == "0,1,2,3,4,5,6,7"
    assert head.commands[0].env["VLLM_HOST_IP"] == "10.20.0.11"
    assert worker.commands[0].env["VLLM_HOST_IP"] == "10.20.0.12"


def test_ray_is_run_from_the_path_when_vllm_is_found_on_the_path():
    plan = build_launch(request(nodes=two_h100_nodes(engine_version="0.10.2", program=())))
    assert plan.shards[0].commands[0].argv[0] == "ray"
    assert plan.shards[0].main.argv[:2] == ("vllm", "serve")


def test_the_operator_may_ask_for_ray_on_a_version_that_has_multiprocessing():
    plan = build_launch(request(nodes=two_h100_nodes(), executor="ray"))
    assert plan.executor == "ray"
    assert plan.shards[0].commands[0].name == "ray-head"


def test_an_unreported_version_is_taken_as_a_current_one():
    plan = build_launch(request(nodes=two_h100_nodes(engine_version=None)))
    assert plan.executor == "mp"


def test_a_release_candidate_of_0_12_has_multiprocessing():
    plan = build_launch(request(nodes=two_h100_nodes(engine_version="0.12.0rc1+cu128")))
    assert plan.executor == "mp"


def test_ray_workers_reach_an_ipv6_head_in_brackets():
    nodes = (h100_node(0, address="fd00::11"), h100_node(1, address="fd00::12"))
    plan = build_launch(request(nodes=nodes, executor="ray"))
    assert flag(plan.shards[1].main.argv, "--address") == "[fd00::11]:6379"


def test_the_start_args_are_the_agents_shard_spec():
    head = build_launch(request(nodes=two_h100_nodes(engine_version="0.11.0"))).shards[0]
    args = head.start_args("llama-70b-1", shard_id="llama-70b-1-r0", spec={"model": LLAMA_70B})
    assert args["replica"] == "llama-70b-1"
    assert args["shard_id"] == "llama-70b-1-r0"
    assert args["rank"] == 0
    assert args["gpus"] == ["0", "1", "2", "3", "4", "5", "6", "7"]
    assert args["health_url"] == "http://127.0.0.1:8000/health"
    assert args["spec"] == {"model": LLAMA_70B}
    assert [c["role"] for c in args["commands"]] == ["sidecar", "main"]
    assert args["commands"][0]["wait_for_port"] == 6379
    assert "wait_for_port" not in args["commands"][1]
    assert all(isinstance(arg, str) for c in args["commands"] for arg in c["argv"])
