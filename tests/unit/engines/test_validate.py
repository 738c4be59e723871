"""What is refused before anything starts, each with the sentence the operator reads."""

from __future__ import annotations

from dataclasses import replace

import pytest
from engine_nodes import h100_cards, h100_node, request, two_h100_nodes

from llmgw_core.engines import FabricAdapter, LaunchGpu, build_launch, validate_launch
from llmgw_core.errors import BadInput


def _refusal(req) -> BadInput:
    with pytest.raises(BadInput) as refused:
        validate_launch(req)
    return refused.value


def test_a_good_launch_passes():
    validate_launch(request(nodes=two_h100_nodes()))


def test_cards_of_two_classes_in_one_tensor_group_are_refused():
    mixed = (*h100_cards(7), replace(h100_cards(1, first=7)[0], gpu_class="h100-94g"))
    refusal = _refusal(request(nodes=(h100_node(gpus=mixed),)))
    assert refusal.message == (
        "the cards are not all one kind: h100-a-01 card 0 is h100-80g and h100-a-01 card 7 "
        "is h100-94g"
    )
    assert refusal.fix == "place the replica on cards of one class"


def test_nodes_of_two_classes_are_refused():
    other = h100_node(1, gpus=tuple(replace(g, gpu_class="h200-141g") for g in h100_cards()))
    refusal = _refusal(request(nodes=(h100_node(0), other)))
    assert "h100-a-02 card 0 is h200-141g" in refusal.message


def test_fp8_weights_on_a_card_older_than_8_9_are_refused():
    a100 = tuple(
        replace(g, gpu_class="a100-80g", name="NVIDIA A100-SXM4-80GB", compute_capability="8.0")
        for g in h100_cards(4)
    )
    req = request(
        nodes=(h100_node(gpus=a100),), quantization="modelopt-fp8", min_compute_capability=8.9
    )
    refusal = _refusal(req)
    assert refusal.message == (
        "modelopt-fp8 weights need compute capability 8.9 and h100-a-01 card 0 "
        "(NVIDIA A100-SXM4-80GB) has 8.0"
    )


def test_fp8_weights_on_an_l40s_or_an_h100_pass():
    l40s = tuple(replace(g, gpu_class="l40s-48g", compute_capability="8.9") for g in h100_cards(4))
    validate_launch(request(nodes=(h100_node(gpus=l40s),), min_compute_capability=8.9))
    validate_launch(request(min_compute_capability=8.9))


def test_fp8_asked_for_by_hand_takes_the_planners_floor_for_online_fp8():
    t4 = tuple(
        replace(g, gpu_class="t4-16g", name="Tesla T4", compute_capability="7.5")
        for g in h100_cards(1)
    )
    refusal = _refusal(
        request(nodes=(h100_node(gpus=t4, adapters=(), fabric=None),), quantization_flag="fp8")
    )
    assert refusal.message == (
        "fp8 weights need compute capability 8.0 and h100-a-01 card 0 (Tesla T4) has 7.5"
    )


def test_an_unknown_compute_capability_is_left_to_the_engine():
    unknown = tuple(replace(g, compute_capability=None) for g in h100_cards(8))
    validate_launch(request(nodes=(h100_node(gpus=unknown),), min_compute_capability=8.9))


def test_nodes_times_cards_must_be_tp_times_pp():
    refusal = _refusal(request(nodes=two_h100_nodes(), tensor_parallel=4))
    assert refusal.message == (
        "2 nodes × 8 cards is 16 cards, and tensor parallel 4 × pipeline parallel 2 needs 8"
    )
    assert refusal.fix == "give as many cards as TP × PP"


def test_nodes_with_different_numbers_of_cards_are_refused():
    nodes = (h100_node(0), h100_node(1, gpus=h100_cards(4)))
    refusal = _refusal(request(nodes=nodes, tensor_parallel=6))
    assert refusal.message == (
        "every node of a replica runs the same number of cards (h100-a-01 8, h100-a-02 4)"
    )


def test_a_mig_instance_runs_alone():
    migs = tuple(
        LaunchGpu(
            id=f"100{n}",
            card_index=0,
            gpu_class="a100-80g-1g.10gb",
            uuid=f"MIG-{n}",
            mig_profile="1g.10gb",
        )
        for n in range(2)
    )
    refusal = _refusal(request(nodes=(h100_node(gpus=migs),), tensor_parallel=2))
    assert refusal.message.startswith("h100-a-01 1000 is a MIG instance, and a MIG instance runs")
    assert refusal.fix == "serve the model on one MIG instance, or on whole cards"


def test_a_mig_instance_without_its_uuid_is_refused():
    mig = LaunchGpu(id="1000", card_index=0, gpu_class="a100", mig_profile="3g.40gb")
    refusal = _refusal(request(nodes=(h100_node(gpus=(mig,)),), tensor_parallel=1))
    assert "did not report the UUID of MIG instance 1000" in refusal.message


def test_a_context_longer_than_the_plan_is_refused():
    refusal = _refusal(request(context=65536, planned_context=32768))
    assert refusal.sentence() == (
        "a context of 65536 tokens is more than the 32768 the plan sized the cards for: "
        "plan again with a context of 65536"
    )


def test_a_shorter_context_than_planned_passes():
    validate_launch(request(context=8192, planned_context=32768))


def test_nodes_on_two_fabrics_are_refused():
    nodes = (h100_node(0), h100_node(1, fabric="ib-b"))
    refusal = _refusal(request(nodes=nodes))
    assert refusal.message == (
        "a replica spans one fabric, never two, and these nodes are on ['ib-a', 'ib-b']"
    )


def test_a_node_without_a_fabric_cannot_join_a_multi_node_replica():
    nodes = (h100_node(0), h100_node(1, fabric=None, adapters=()))
    refusal = _refusal(request(nodes=nodes))
    assert refusal.message == (
        "a replica across nodes needs one fabric or one NVLink domain, and h100-a-02 is "
        "given neither"
    )


def test_nodes_inside_one_nvlink_domain_need_no_fabric():
    nodes = two_h100_nodes(fabric=None, adapters=(), nvlink_domain="4f2c9a1e")
    validate_launch(request(nodes=nodes))


def test_nodes_half_inside_a_domain_are_refused():
    nodes = (h100_node(0, nvlink_domain="4f2c9a1e"), h100_node(1))
    refusal = _refusal(request(nodes=nodes))
    assert refusal.message.startswith("a replica is inside one NVLink domain or in none")


def test_a_fabric_mixing_infiniband_and_roce_is_refused():
    mixed = (
        FabricAdapter("mlx5_0", link_layer="InfiniBand"),
        FabricAdapter("mlx5_1", link_layer="Ethernet", gid_index=3),
    )
    refusal = _refusal(request(nodes=two_h100_nodes(adapters=mixed)))
    assert refusal.message == "h100-a-01 mixes InfiniBand and RoCE adapters on fabric ib-a"


def test_roce_adapters_with_two_gid_indexes_are_refused():
    roce = (
        FabricAdapter("mlx5_0", link_layer="Ethernet", gid_index=3),
        FabricAdapter("mlx5_1", link_layer="Ethernet", gid_index=1),
    )
    refusal = _refusal(request(nodes=two_h100_nodes(adapters=roce, fabric="roce-b")))
    assert "use different GID indexes [1, 3], and NCCL takes one" in refusal.message


def test_multiprocessing_across_nodes_on_vllm_0_11_is_refused():
    refusal = _refusal(request(nodes=two_h100_nodes(engine_version="0.11.0"), executor="mp"))
    assert refusal.sentence() == (
        "vLLM 0.11.0 joins nodes only through Ray; its own multi-node mode (--nnodes) came "
        "in 0.12.0: use the ray executor, or install vLLM 0.12 or later"
    )


def test_an_unknown_executor_is_refused():
    refusal = _refusal(request(nodes=two_h100_nodes(), executor="slurm"))
    assert refusal.message == "unknown vLLM executor 'slurm'"


def test_two_vllm_versions_in_one_replica_are_refused():
    nodes = (h100_node(0), h100_node(1, engine_version="0.11.0"))
    refusal = _refusal(request(nodes=nodes))
    assert refusal.message == (
        "the nodes run different vllm versions (0.11.0, 0.12.0), and the ranks of one "
        "replica must agree"
    )


def test_ranks_must_count_from_zero_each_once():
    nodes = (h100_node(0), h100_node(2))
    assert _refusal(request(nodes=nodes)).message == (
        "the nodes' ranks are [0, 2]; a replica of 2 nodes numbers them 0 to 1, each once"
    )


def test_one_node_given_twice_is_refused():
    nodes = (h100_node(0), h100_node(1, name="h100-a-01"))
    assert _refusal(request(nodes=nodes)).message == (
        "the node h100-a-01 is given two ranks of one replica"
    )


def test_a_model_that_starts_with_a_dash_would_be_a_flag_and_is_refused():
    refusal = _refusal(request(source="--trust-remote-code"))
    assert refusal.message == (
        "the model '--trust-remote-code' starts with '-' and would be read as a flag"
    )


def test_a_served_name_with_a_newline_is_refused():
    refusal = _refusal(request(served_name="llama\nrm -rf /"))
    assert (
        refusal.message
        == "the served name 'llama\\nrm -rf /' is empty or holds a control character"
    )


def test_vllm_on_a_cpu_node_is_refused():
    node = h100_node(gpus=(), adapters=(), fabric=None)
    refusal = _refusal(request(nodes=(node,), tensor_parallel=1))
    assert refusal.sentence() == (
        "vllm needs cards and h100-a-01 gives it none: serve a GGUF file with llama.cpp, or "
        "unquantised weights with vLLM, on a CPU node"
    )


def test_llama_cpp_across_two_nodes_is_refused():
    refusal = _refusal(request(nodes=two_h100_nodes(), engine="llama.cpp"))
    assert refusal.message == "llama.cpp runs on one node, and this launch spans 2"


def test_an_unknown_engine_is_refused():
    refusal = _refusal(request(engine="tgi"))
    assert refusal.sentence() == "unknown engine 'tgi': use one of vllm, sglang, llama.cpp, sim"


def test_the_sim_engine_is_refused_on_a_real_node():
    refusal = _refusal(request(engine="sim"))
    assert refusal.message == (
        "the sim engine runs only on simulated nodes, and h100-a-01 is a real one"
    )


def test_the_rendezvous_port_cannot_be_the_http_port():
    refusal = _refusal(request(nodes=two_h100_nodes(), rendezvous_port=8000))
    assert refusal.message == (
        "port 8000 on h100-a-01 cannot be both the HTTP port and the rendezvous port"
    )


def test_a_port_out_of_range_is_refused():
    assert _refusal(request(nodes=(h100_node(http_port=70000),))).message == (
        "h100-a-01's port 70000 is not a TCP port"
    )


def test_a_memory_share_above_one_is_refused():
    assert _refusal(request(gpu_memory_utilization=1.5)).message == (
        "a GPU memory share of 1.5 is not between 0 and 1"
    )


def test_build_launch_validates_first():
    with pytest.raises(BadInput, match="tensor parallel 4"):
        build_launch(request(tensor_parallel=4))


def test_sglang_before_0_5_10_is_refused_as_it_cannot_serve_the_replicas_certificate():
    from dataclasses import replace

    from llmgw_core.engines.identity import EngineIdentity

    old = replace(h100_node(), engine_version="0.5.3")
    tls = EngineIdentity.make("r")
    req = request(nodes=(old,), engine="sglang", tensor_parallel=8, tls=tls)
    assert _refusal(req).sentence() == (
        "SGLang 0.5.3 on h100-a-01 takes no certificate (--ssl-certfile came in 0.5.10), and"
        " llmgw serves every engine over HTTPS with its own: install SGLang 0.5.10 or later"
        " there"
    )
    current = replace(h100_node(), engine_version="0.5.23")
    validate_launch(request(nodes=(current,), engine="sglang", tensor_parallel=8, tls=tls))
