"""Which ways serve tries, and the launch they become: sized, refused, and the environment built."""

from __future__ import annotations

import pytest

from llmgw_core.catalog import catalog_model
from llmgw_core.engines import build_launch
from llmgw_core.errors import BadInput, DoesNotFit
from llmgw_core.placement import place
from llmgw_core.planner.plan import plan
from llmgw_core.planner.pools_live import live_nodes, planner_fleet
from llmgw_core.serve.args import ServeFields
from llmgw_core.serve.choice import Overrides, choices, way_layout
from llmgw_core.serve.launch import free_port_on, launch_request, replica_name

LLAMA = "catalog:meta-llama/Llama-3.3-70B-Instruct"


def _setup(demo_facts, model=LLAMA, context=32768, **plan_args):
    snapshot, specs = demo_facts
    views = live_nodes(snapshot, specs)
    fleet = planner_fleet(views)
    info = catalog_model(model)
    return views, fleet, info, plan(info, fleet, context=context, **plan_args)


def test_the_plan_best_way_is_tried_first_then_the_fallbacks(demo_facts):
    _, fleet, info, the_plan = _setup(demo_facts)
    tried = choices(the_plan, info, fleet, Overrides(gpu_class="h100-80g"), fallbacks=1)
    assert [(c.engine, c.label) for c in tried] == [
        ("vllm", "4 × h100-80g"),
        ("sglang", "4 × h100-80g"),
    ]
    assert tried[0].tensor_parallel == 4 and tried[0].cards_per_node == 4


def test_two_nodes_of_eight_are_forced_and_sized_with_the_planners_rules(demo_facts):
    _, fleet, info, the_plan = _setup(demo_facts)
    (forced,) = choices(
        the_plan, info, fleet, Overrides(gpu_class="h100-80g", gpus=8, nodes=2), fallbacks=0
    )
    assert forced.label == "2 nodes × 8 × h100-80g"
    assert (forced.tensor_parallel, forced.pipeline_parallel, forced.nodes) == (8, 2, 2)
    assert 10 < forced.per_card_gib < 20


def test_a_width_the_kv_heads_refuse_cannot_be_forced(demo_facts):
    _, fleet, info, the_plan = _setup(demo_facts)
    with pytest.raises(BadInput, match="cannot be split 12 wide"):
        choices(
            the_plan, info, fleet, Overrides(gpu_class="h100-80g", gpus=12, nodes=1), fallbacks=0
        )


def test_a_forced_layout_too_small_for_the_model_does_not_fit(demo_facts):
    _, fleet, info, the_plan = _setup(demo_facts)
    with pytest.raises(DoesNotFit, match=r"needs .* GB a card of 71 usable"):
        choices(
            the_plan, info, fleet, Overrides(gpu_class="h100-80g", gpus=1, nodes=1), fallbacks=0
        )


def test_a_class_with_no_way_says_what_the_plan_would_do(demo_facts):
    _, fleet, info, the_plan = _setup(demo_facts)
    with pytest.raises(DoesNotFit, match=r"no way that fits with class a100-80g-mig-3g\.40gb"):
        choices(the_plan, info, fleet, Overrides(gpu_class="a100-80g-mig-3g.40gb"), fallbacks=0)


def test_four_pcie_cards_take_the_70b_model_split_over_pcie_without_asking_for_nvlink(
    demo_facts,
):
    views, fleet, info, the_plan = _setup(demo_facts)
    (choice,) = choices(the_plan, info, fleet, Overrides(gpu_class="l40s-48g"), fallbacks=0)
    assert (choice.tensor_parallel, choice.over_pcie) == (4, True)
    assert choice.want().nvlink_inside is False
    placement = place(choice.want(), views)
    assert placement is not None and placement.nodes[0].gpu_ids == ("0", "1", "2", "3")


def test_the_two_node_launch_names_exactly_ib_a_adapters_on_both_ranks(demo_facts):
    views, fleet, info, the_plan = _setup(demo_facts)
    (forced,) = choices(
        the_plan, info, fleet, Overrides(gpu_class="h100-80g", gpus=8, nodes=2), fallbacks=0
    )
    placement = place(forced.want(), views)
    snapshot, specs = demo_facts
    request = launch_request(
        forced,
        placement,
        {s.name: s for s in specs},
        {n: snapshot.nodes[n].facts for n in ("h100-a-01", "h100-a-02")},
        served_name="llama",
        context=32768,
        concurrency=1,
        http_ports={"h100-a-01": 8000, "h100-a-02": 8000},
        rendezvous_port=29500,
        extra_env={"NCCL_DEBUG": "INFO"},
    )
    launch = build_launch(request)
    hcas = "=" + ",".join(f"mlx5_{i}" for i in range(8))
    for shard in launch.shards:
        env = shard.main.env
        assert env["NCCL_IB_HCA"] == hcas and env["NCCL_DEBUG"] == "INFO"
        assert "NCCL_MNNVL_ENABLE" not in env
    assert launch.head.node == "h100-a-01" and launch.head.health_url.endswith("/health")


def test_a_replica_name_comes_from_the_model():
    assert replica_name("meta-llama/Llama-3.3-70B-Instruct") == "llama-3-3-70b-instruct"
    assert replica_name("/models/qwen2.5-14b-instruct-q4_k_m.gguf") == "qwen2-5-14b-instruct-q4-k-m"


def test_the_next_free_port_skips_every_running_shards():
    assert free_port_on({8000, 8001, 8003}, 8000) == 8002
    assert free_port_on(set(), 8000) == 8000


def test_a_secret_never_shows_in_the_spec_a_shard_keeps(demo_facts):
    from llmgw_core.serve.launch import shard_spec

    views, fleet, info, the_plan = _setup(demo_facts)
    (way,) = choices(the_plan, info, fleet, Overrides(gpu_class="h100-80g"), fallbacks=0)
    placement = place(way.want(), views)
    snapshot, specs = demo_facts
    launch = build_launch(
        launch_request(
            way,
            placement,
            {s.name: s for s in specs},
            {"h100-a-01": snapshot.nodes["h100-a-01"].facts},
            served_name="llama",
            context=32768,
            concurrency=1,
            http_ports={"h100-a-01": 8000},
            rendezvous_port=None,
            extra_env={},
            secret_env={"HF_TOKEN": "hf_secret"},
        )
    )
    (shard,) = launch.shards
    # The engine gets it in its environment, through the shard's secret_env only.
    assert shard.start_args("llama")["secret_env"] == {"HF_TOKEN": "hf_secret"}
    assert "HF_TOKEN" not in shard.main.env
    assert "hf_secret" not in " ".join(shard.main.argv)
    kept = shard_spec({"name": "llama"}, shard)
    assert "hf_secret" not in str(kept)
    assert "hf_secret" not in str(shard.start_args("llama")["commands"])


@pytest.mark.parametrize(
    "model",
    [
        "catalog:meta-llama/Llama-3.1-8B-Instruct",
        LLAMA,
        "catalog:meta-llama/Meta-Llama-3.1-405B",
        "catalog:deepseek-ai/DeepSeek-V3",
    ],
)
def test_every_way_the_plan_lists_is_the_way_its_record_serves(demo_facts, model):
    """The wizard serves the way it listed from the way's record (`way_layout`): a way
    over several nodes is asked for by its cards on each node, not all its cards."""
    _, fleet, info, the_plan = _setup(demo_facts, model=model, context=8192)
    assert the_plan.options
    nodes_seen = set()
    for way in the_plan.options:
        record = way.as_dict()
        # What the wizard sends is a valid `serve` (a CPU node's way names no cards).
        ServeFields(model=model, **way_layout(record))
        (chosen,) = choices(the_plan, info, fleet, Overrides(**way_layout(record)), fallbacks=0)
        assert (chosen.label, chosen.engine, chosen.artifact) == (
            way.label(),
            way.engine,
            way.artifact,
        )
        assert chosen.nodes == way.nodes
        assert chosen.cards_per_node * chosen.nodes == (0 if way.on_cpu else way.cards)
        nodes_seen.add(way.nodes)
    if "405B" in model or "DeepSeek" in model:
        assert max(nodes_seen) > 1, nodes_seen  # listed over several nodes (or trays)
