"""The environment of SPEC §4, variable by variable."""

from __future__ import annotations

from engine_nodes import h100_cards, h100_node, ib_adapters, request, two_h100_nodes

from llmgw_core.engines import FabricAdapter, LaunchGpu, build_launch
from llmgw_core.engines.environment import shard_env


def _env(req, rank: int = 0) -> dict[str, str]:
    return dict(build_launch(req).shards[rank].main.env)


def test_the_cards_are_named_by_index_in_pci_bus_order():
    env = _env(request(nodes=(h100_node(gpus=h100_cards(4, first=4)),)))
    assert env["CUDA_VISIBLE_DEVICES"] == "4,5,6,7"
    assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"


def test_a_mig_instance_is_named_by_its_mig_uuid():
    mig = LaunchGpu(
        id="1001",
        card_index=0,
        gpu_class="a100-80g-2g.20gb",
        name="NVIDIA A100-SXM4-80GB",
        uuid="MIG-36b7c334-fd01-5b20-b0fe-977591e0ed81",
        mig_profile="2g.20gb",
        compute_capability="8.0",
    )
    node = h100_node(gpus=(mig,), adapters=(), fabric=None)
    env = _env(request(nodes=(node,), tensor_parallel=1))
    assert env["CUDA_VISIBLE_DEVICES"] == "MIG-36b7c334-fd01-5b20-b0fe-977591e0ed81"


def test_a_mig_uuid_reported_without_its_prefix_gets_it():
    mig = LaunchGpu(
        id="1000", card_index=0, gpu_class="a100", uuid="GPU-5b2c/1/0", mig_profile="3g.40gb"
    )
    node = h100_node(gpus=(mig,), adapters=(), fabric=None)
    env = _env(request(nodes=(node,), tensor_parallel=1))
    assert env["CUDA_VISIBLE_DEVICES"] == "MIG-GPU-5b2c/1/0"


def test_a_cpu_node_sees_no_card():
    node = h100_node(gpus=(), adapters=(), fabric=None, program=("/usr/local/bin/llama-server",))
    req = request(nodes=(node,), engine="llama.cpp", source="/models/q4.gguf", tensor_parallel=1)
    assert _env(req)["CUDA_VISIBLE_DEVICES"] == ""


def test_the_fabric_adapters_are_listed_exactly_with_the_equals_prefix():
    env = _env(request(nodes=two_h100_nodes()), rank=1)
    assert env["NCCL_IB_HCA"] == "=mlx5_0,mlx5_1"
    assert env["NCCL_IB_DISABLE"] == "0"


def test_only_the_chosen_fabrics_adapters_are_listed_however_many_the_node_has():
    rails = ib_adapters(*(f"mlx5_{n}" for n in (0, 3, 4, 5, 6, 9, 10, 11)))
    env = _env(request(nodes=two_h100_nodes(adapters=rails)))
    assert env["NCCL_IB_HCA"] == "=mlx5_0,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_9,mlx5_10,mlx5_11"


def test_an_adapters_second_port_is_named_with_it():
    adapters = (
        FabricAdapter("mlx5_0", port=1, link_layer="InfiniBand"),
        FabricAdapter("mlx5_0", port=2, link_layer="InfiniBand"),
    )
    env = _env(request(nodes=two_h100_nodes(adapters=adapters)))
    assert env["NCCL_IB_HCA"] == "=mlx5_0,mlx5_0:2"


def test_a_node_without_a_fabric_turns_infiniband_off():
    env = _env(request(nodes=(h100_node(adapters=(), fabric=None),)))
    assert env["NCCL_IB_DISABLE"] == "1"
    assert "NCCL_IB_HCA" not in env
    assert "NCCL_IB_GID_INDEX" not in env


def test_roce_adapters_carry_their_gid_index():
    roce = tuple(FabricAdapter(f"mlx5_{n}", link_layer="Ethernet", gid_index=3) for n in (0, 1))
    env = _env(request(nodes=two_h100_nodes(adapters=roce, fabric="roce-b")))
    assert env["NCCL_IB_GID_INDEX"] == "3"
    assert env["NCCL_IB_HCA"] == "=mlx5_0,mlx5_1"


def test_infiniband_sets_no_gid_index():
    assert "NCCL_IB_GID_INDEX" not in _env(request(nodes=two_h100_nodes()))


def test_roce_without_a_known_gid_index_leaves_nccl_to_choose():
    roce = (FabricAdapter("mlx5_0", link_layer="Ethernet"),)
    assert "NCCL_IB_GID_INDEX" not in _env(request(nodes=two_h100_nodes(adapters=roce)))


def test_bootstrap_stays_on_the_management_interface_for_nccl_and_gloo():
    env = _env(request(nodes=two_h100_nodes(interface="enp225s0f0")))
    assert env["NCCL_SOCKET_IFNAME"] == "=enp225s0f0"
    assert env["GLOO_SOCKET_IFNAME"] == "enp225s0f0"


def test_an_unknown_management_interface_is_left_to_nccl():
    env = _env(request(nodes=two_h100_nodes(interface=None)))
    assert "NCCL_SOCKET_IFNAME" not in env
    assert "GLOO_SOCKET_IFNAME" not in env


def test_nodes_inside_one_nvlink_domain_turn_on_multi_node_nvlink_and_cumem():
    domain = "4f2c9a1e-7b3d-4c55-9e61-0a8d2b7c3f10"
    nodes = two_h100_nodes(nvlink_domain=domain, gpus=h100_cards(4))
    env = _env(request(nodes=nodes), rank=1)
    assert env["NCCL_MNNVL_ENABLE"] == "1"
    assert env["NCCL_CUMEM_ENABLE"] == "1"


def test_nodes_on_infiniband_alone_do_not_turn_on_multi_node_nvlink():
    env = _env(request(nodes=two_h100_nodes()))
    assert "NCCL_MNNVL_ENABLE" not in env
    assert "NCCL_CUMEM_ENABLE" not in env


def test_one_node_in_a_domain_needs_no_multi_node_nvlink():
    node = h100_node(nvlink_domain="4f2c9a1e-7b3d-4c55-9e61-0a8d2b7c3f10")
    assert "NCCL_MNNVL_ENABLE" not in _env(request(nodes=(node,)))


def test_each_vllm_rank_across_nodes_is_told_its_own_address():
    plan = build_launch(request(nodes=two_h100_nodes()))
    assert [shard.main.env["VLLM_HOST_IP"] for shard in plan.shards] == [
        "10.20.0.11",
        "10.20.0.12",
    ]


def test_one_node_needs_no_host_ip():
    assert "VLLM_HOST_IP" not in _env(request())


def test_the_operators_variables_go_on_every_node():
    plan = build_launch(request(nodes=two_h100_nodes(), extra_env={"NCCL_DEBUG": "INFO"}))
    assert [shard.main.env["NCCL_DEBUG"] for shard in plan.shards] == ["INFO", "INFO"]


def test_the_operator_may_steer_nccl_past_what_the_launcher_chose():
    env = _env(request(nodes=two_h100_nodes(), extra_env={"NCCL_IB_HCA": "=mlx5_1"}))
    assert env["NCCL_IB_HCA"] == "=mlx5_1"


def test_the_hub_token_goes_apart_as_each_shards_secret_env_never_in_a_command():
    token = "hf_abcdefghijklmnopqrstuvwxyz012345"
    plan = build_launch(request(nodes=two_h100_nodes(), secret_env={"HF_TOKEN": token}))
    for shard in plan.shards:
        assert shard.secret_env == {"HF_TOKEN": token}
        for command in shard.commands:
            assert "HF_TOKEN" not in command.env
            assert not any(token in arg for arg in command.argv)
        # shard.json is written from everything but secret_env: the token is not in it.
        written = {k: v for k, v in shard.start_args("r").items() if k != "secret_env"}
        assert token not in str(written)


def test_the_environment_is_the_same_function_for_every_process_of_a_shard():
    req = request(nodes=two_h100_nodes(engine_version="0.11.0"))
    head = build_launch(req).shards[0]
    for command in head.commands:  # Ray adds its own variables only (engines.ray_cluster)
        assert {k: v for k, v in command.env.items() if not k.startswith("RAY_")} == shard_env(
            req, req.head
        )


def test_vllm_on_a_cpu_node_is_given_the_kv_cache_the_plan_sized_and_the_operator_may_say_more():
    node = h100_node(gpus=(), adapters=(), fabric=None)
    req = request(nodes=(node,), tensor_parallel=1, cpu_kv_cache_gib=3)
    env = _env(req)
    assert env["VLLM_CPU_KVCACHE_SPACE"] == "3" and env["CUDA_VISIBLE_DEVICES"] == ""
    mine = request(
        nodes=(node,),
        tensor_parallel=1,
        cpu_kv_cache_gib=3,
        extra_env={"VLLM_CPU_KVCACHE_SPACE": "8"},
    )
    assert _env(mine)["VLLM_CPU_KVCACHE_SPACE"] == "8"
    on_cards = _env(request(nodes=two_h100_nodes()))
    assert "VLLM_CPU_KVCACHE_SPACE" not in on_cards
