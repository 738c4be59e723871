"""A node's part in a launch, read from the facts the agent reports for the demo's hardware.

The facts come from the agent's own discovery over the simulated nodes'
captures (the hardware profiles the demo fleet runs on), validated by the
console's models, as they would arrive over SSH.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from engine_nodes import LLAMA_70B, flag

from llmgw_agent.discover import collect_facts
from llmgw_agent.sim.profiles import write_profile
from llmgw_core.engines import LaunchRequest, build_launch, launch_node
from llmgw_core.errors import BadInput
from llmgw_core.facts import NodeFacts, parse_facts
from llmgw_core.inventory import parse_inventory


@pytest.fixture
def node_facts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Facts of a simulated node of a given profile, as the agent reports them."""
    monkeypatch.setenv("LLMGW_AGENT_STATE", str(tmp_path / "state"))

    def read(kind: str, name: str, **options) -> tuple[Path, NodeFacts]:
        capture = write_profile(kind, tmp_path / name, **options)
        return capture, parse_facts(collect_facts(str(capture)))

    return read


def _spec(text: str, name: str):
    return parse_inventory(text).node_spec(name)


def _h100_pair(node_facts):
    specs, facts = [], []
    for index in (1, 2):
        name = f"h100-a-0{index}"
        capture, found = node_facts("hgx-h100", name, mgmt_address=f"10.20.0.{10 + index}")
        inventory = (
            f"nodes:\n  - name: {name}\n    host: 127.0.0.1\n    replay: {capture}\n"
            "    fabrics: [{name: ib-a, hcas: [mlx5_0, mlx5_3, mlx5_4, mlx5_5, mlx5_6, "
            "mlx5_9, mlx5_10, mlx5_11]}]\n"
        )
        specs.append(_spec(inventory, name))
        facts.append(found)
    return specs, facts


def test_an_h100_node_on_ib_a_reads_its_cards_adapters_address_and_engine(node_facts):
    (spec, _), (facts, _) = _h100_pair(node_facts)
    node = launch_node(
        spec, facts, engine="vllm", rank=0, gpu_ids=["0", "1"], http_port=8000, fabric="ib-a"
    )
    assert node.address == "10.20.0.11"
    assert node.interface == "eno1"
    assert [gpu.id for gpu in node.gpus] == ["0", "1"]
    assert {gpu.compute_capability for gpu in node.gpus} == {"9.0"}
    assert node.adapters[0].name == "mlx5_0"
    assert node.adapters[0].link_layer == "InfiniBand"
    assert [a.name for a in node.adapters][-1] == "mlx5_11"
    assert node.engine_version == "0.19.0"
    assert node.program == ("/opt/llm/venv/bin/vllm",)
    assert node.simulated


def test_llama_3_3_70b_over_two_demo_h100_nodes_with_nccl_debug(node_facts):
    specs, facts = _h100_pair(node_facts)
    nodes = tuple(
        launch_node(
            spec,
            found,
            engine="vllm",
            rank=rank,
            gpu_ids=[str(n) for n in range(8)],
            http_port=8000,
            fabric="ib-a",
        )
        for rank, (spec, found) in enumerate(zip(specs, facts, strict=True))
    )
    plan = build_launch(
        LaunchRequest(
            engine="vllm",
            source=LLAMA_70B,
            served_name="llama-70b",
            nodes=nodes,
            context=32768,
            tensor_parallel=8,
            pipeline_parallel=2,
            extra_env={"NCCL_DEBUG": "INFO"},
        )
    )
    assert plan.executor == "mp"  # the demo nodes report vLLM 0.19.0: multiprocessing across nodes
    hcas = "=mlx5_0,mlx5_3,mlx5_4,mlx5_5,mlx5_6,mlx5_9,mlx5_10,mlx5_11"
    for shard in plan.shards:
        for command in shard.commands:
            assert command.env["NCCL_IB_HCA"] == hcas
            assert command.env["NCCL_DEBUG"] == "INFO"
            assert command.env["NCCL_SOCKET_IFNAME"] == "=eno1"
    assert flag(plan.shards[1].main.argv, "--master-addr") == "10.20.0.11"
    assert "--headless" in plan.shards[1].main.argv


def test_a_mig_instance_is_read_with_its_uuid(node_facts):
    capture, facts = node_facts("a100-mig", "a100-mig-01")
    spec = _spec(
        f"nodes: [{{name: a100-mig-01, host: 127.0.0.1, replay: {capture}}}]", "a100-mig-01"
    )
    mig = next(gpu for gpu in facts.gpus if gpu.is_mig)
    node = launch_node(spec, facts, engine="vllm", rank=0, gpu_ids=[mig.id], http_port=8000)
    (gpu,) = node.gpus
    assert gpu.is_mig
    assert gpu.uuid == mig.uuid
    assert gpu.compute_capability == "8.0"
    assert node.adapters == ()


def test_a_cpu_node_runs_its_llama_server(node_facts):
    capture, facts = node_facts("cpu", "cpu-01")
    spec = _spec(f"nodes: [{{name: cpu-01, host: 127.0.0.1, replay: {capture}}}]", "cpu-01")
    node = launch_node(spec, facts, engine="llama.cpp", rank=0, gpu_ids=[], http_port=8080)
    assert node.program == ("/usr/local/bin/llama-server",)
    assert node.engine_version == "b6500"
    assert node.gpus == ()


def test_the_inventorys_engine_location_wins_over_what_the_node_found(node_facts):
    _capture, facts = node_facts("hgx-h100", "h100-a-01")
    inventory = (
        "nodes:\n  - name: h100-a-01\n    host: 127.0.0.1\n"
        "    engines: {sglang: {python: /opt/sglang/bin/python3.11}}\n"
    )
    node = launch_node(
        _spec(inventory, "h100-a-01"), facts, engine="sglang", rank=0, gpu_ids=["0"], http_port=1
    )
    assert node.program == ("/opt/sglang/bin/python3.11", "-m", "sglang.launch_server")
    assert node.engine_version == "0.5.23"
    assert not node.simulated


def test_a_replayed_node_runs_for_real_the_engine_its_inventory_names(node_facts):
    """The demo's CPU node with `--engine vllm=PATH`: vLLM runs as written, on this machine's
    network (the capture's `eno1` and address are not here); llama.cpp stays simulated."""
    capture, facts = node_facts("cpu", "cpu-01")
    inventory = (
        f"nodes:\n  - name: cpu-01\n    host: 127.0.0.1\n    replay: {capture}\n"
        "    engines: {vllm: {bin: /opt/venv/bin/vllm}}\n"
    )
    spec = _spec(inventory, "cpu-01")
    real = launch_node(spec, facts, engine="vllm", rank=0, gpu_ids=[], http_port=8000)
    assert (real.replayed, real.simulated, real.program) == (True, False, ("/opt/venv/bin/vllm",))
    assert (real.address, real.interface) == ("127.0.0.1", None)
    sim = launch_node(spec, facts, engine="llama.cpp", rank=0, gpu_ids=[], http_port=8001)
    assert (sim.replayed, sim.simulated) == (True, True)
    assert sim.interface == facts.host.mgmt_interface
    request = LaunchRequest(
        engine="vllm", source="/models/tiny", served_name="tiny", nodes=(real,), context=512,
        planned_context=512, tensor_parallel=1, pipeline_parallel=1, gpu_memory_utilization=None,
        cpu_kv_cache_gib=1,
    )  # fmt: skip
    (shard,) = build_launch(request).shards
    assert shard.real and shard.start_args("tiny-1")["real"] is True
    assert not any(name.endswith("SOCKET_IFNAME") for name in shard.main.env)


def test_a_card_the_node_does_not_have_is_refused(node_facts):
    _capture, facts = node_facts("l40s", "l40s-01")
    spec = _spec("nodes: [{name: l40s-01, host: 127.0.0.1}]", "l40s-01")
    with pytest.raises(BadInput, match="l40s-01 has no GPU 9 \\(it has 0, 1, 2, 3"):
        launch_node(spec, facts, engine="vllm", rank=0, gpu_ids=["9"], http_port=8000)


def test_a_fabric_the_node_is_not_on_is_refused(node_facts):
    (spec, _), (facts, _) = _h100_pair(node_facts)
    with pytest.raises(BadInput) as refused:
        launch_node(
            spec, facts, engine="vllm", rank=0, gpu_ids=["0"], http_port=8000, fabric="ib-b"
        )
    assert refused.value.message == (
        "h100-a-01 is not on fabric ib-b (the inventory puts it on ib-a)"
    )


def test_an_adapter_left_out_is_missing_from_nccl_ib_hca_and_the_rest_keep_their_order(node_facts):
    (spec, _), (facts, _) = _h100_pair(node_facts)
    node = launch_node(
        spec,
        facts,
        engine="vllm",
        rank=0,
        gpu_ids=["0"],
        http_port=8000,
        fabric="ib-a",
        left_out=frozenset({"mlx5_5"}),
    )
    assert [adapter.name for adapter in node.adapters] == [
        "mlx5_0",
        "mlx5_3",
        "mlx5_4",
        "mlx5_6",
        "mlx5_9",
        "mlx5_10",
        "mlx5_11",
    ]


def test_an_engine_listens_on_its_nodes_management_address_unless_told_otherwise(node_facts):
    from llmgw_core.engines.from_fleet import engine_bind

    _capture, facts = node_facts("hgx-h100", "n1", mgmt_address="10.20.0.11")
    real = _spec("nodes:\n  - {name: n1, host: gpu-n1}\n", "n1")
    assert engine_bind(real, facts) == "10.20.0.11"
    told = _spec("nodes:\n  - {name: n1, host: gpu-n1, engine_bind: 0.0.0.0}\n", "n1")
    assert engine_bind(told, facts) == "0.0.0.0"
    replayed = _spec("nodes:\n  - {name: n1, host: 127.0.0.1, replay: /x}\n", "n1")
    assert engine_bind(replayed, facts) == "127.0.0.1"  # the sim lives on this machine
    unknown = facts.model_copy(
        update={"host": facts.host.model_copy(update={"mgmt_address": None})}
    )
    assert engine_bind(real, unknown) == "0.0.0.0"
