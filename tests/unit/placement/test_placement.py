"""Placement on the demo fleet's real facts: which nodes and cards, and why not the others."""

from __future__ import annotations

from dataclasses import replace

from demo_fleet_facts import on_two_fabrics

from llmgw_core.fleet.state import FleetState, NodeState
from llmgw_core.inventory import NodeSpec
from llmgw_core.placement import Want, explain, place
from llmgw_core.planner.pools_live import link_matrix, live_nodes


def _views(demo_facts, claims=None, specs=None, states=None):
    snapshot, demo_specs = demo_facts
    if states:
        snapshot = FleetState(taken_at=snapshot.taken_at, nodes={**snapshot.nodes, **states})
    return live_nodes(snapshot, specs or demo_specs, claims or {})


def _reasons(verdicts):
    return {v.node: v.reason for v in verdicts}


def test_four_cards_of_one_h100_node_are_free_ones_joined_by_nvlink(demo_facts):
    views = _views(demo_facts, {"h100-a-01": {"0": "other", "1": "other"}})
    placed = place(Want("h100-80g", 4), views)
    assert placed is not None
    (node,) = placed.nodes
    assert node.node == "h100-a-01" and node.rank == 0
    assert node.gpu_ids == ("2", "3", "4", "5")  # 0 and 1 are claimed
    matrix = link_matrix(demo_facts[0].nodes["h100-a-01"].facts)
    assert all(matrix[int(a)][int(b)] == 18 for a in node.gpu_ids for b in node.gpu_ids if a != b)


def test_a_node_whose_cards_are_claimed_says_by_which_replica(demo_facts):
    claimed = {str(i): "llama-70b" for i in range(6)}
    views = _views(demo_facts, {"h100-a-01": claimed})
    want = Want("h100-80g", 4)
    reasons = _reasons(explain(want, views))
    assert reasons["h100-a-01"] == (
        "free cards: 2 of its 8 h100-80g devices are free, this way needs 4 (held by llama-70b)"
    )
    assert reasons["h100-a-02"].startswith("chosen: rank 0 on 0, 1, 2, 3")


def test_two_nodes_of_eight_go_on_fabric_ib_a(demo_facts):
    placed = place(Want("h100-80g", 8, nodes=2), _views(demo_facts))
    assert placed is not None
    assert placed.fabric == "ib-a" and placed.nvlink_domain is None
    assert [(n.node, n.rank) for n in placed.nodes] == [("h100-a-01", 0), ("h100-a-02", 1)]


def test_a_replica_never_spans_two_fabrics(demo_facts):
    _, specs = demo_facts
    split = on_two_fabrics(specs)
    views = _views(demo_facts, specs=split)
    want = Want("h100-80g", 8, nodes=2)
    assert place(want, views) is None
    reasons = _reasons(explain(want, views))
    assert reasons["h100-a-01"].startswith("fabric: too few nodes with room share an interconnect")
    assert "1 on ib-a" in reasons["h100-a-01"] and "1 on ib-b" in reasons["h100-a-02"]


def test_across_trays_the_replica_stays_inside_the_nvlink_domain_and_off_the_trays_kept_out(
    demo_facts,
):
    views = _views(demo_facts)
    want = Want("gb200-186g", 4, nodes=16)
    placed = place(want, views)
    assert placed is not None
    assert placed.nvlink_domain == "4f2c9a1e-7b3d-4c55-9e61-0a8d2b7c3f10"
    names = [n.node for n in placed.nodes]
    assert len(names) == 16 and "gb200-r1-t13" not in names and "gb200-r1-t07" not in names
    reasons = _reasons(explain(want, views, placed))
    assert reasons["gb200-r1-t13"] == (
        "domain: its cards have not joined the NVLink domain (Insufficient Resources), "
        "and it is on no fabric"
    )
    assert reasons["gb200-r1-t07"].startswith("domain: its NVLink bandwidth is degraded")


def test_seventeen_trays_do_not_fit_in_a_domain_of_sixteen_usable(demo_facts):
    assert place(Want("gb200-186g", 4, nodes=17), _views(demo_facts)) is None


def test_a_mig_replica_takes_exactly_one_instance(demo_facts):
    views = _views(demo_facts)
    placed = place(Want("a100-80g-mig-3g.40gb", 1), views)
    assert placed is not None and placed.nodes[0].gpu_ids == ("1000",)
    reasons = _reasons(explain(Want("a100-80g-mig-3g.40gb", 2), views))
    assert reasons["a100-mig-01"] == (
        "MIG: a a100-80g-mig-3g.40gb instance serves a replica alone, and this way needs 2 devices"
    )


def test_cards_without_nvlink_give_no_tensor_parallel_group(demo_facts):
    reasons = _reasons(explain(Want("l40s-48g", 2), _views(demo_facts)))
    assert (
        reasons["l40s-01"] == "NVLink: no 2 free l40s-48g cards share NVLink (the most that do: 1)"
    )
    split = place(Want("l40s-48g", 2, nvlink_inside=False), _views(demo_facts))
    assert split is not None and split.nodes[0].node == "l40s-01"


def test_a_gguf_in_ram_goes_to_the_cpu_node(demo_facts):
    views = _views(demo_facts)
    placed = place(Want(None, 0, ram_gib=16.0), views)
    assert placed is not None and placed.nodes[0].node == "cpu-01" and placed.nodes[0].gpu_ids == ()
    reasons = _reasons(explain(Want(None, 0, ram_gib=900.0), views))
    assert reasons["cpu-01"] == "memory: 461 GB of its RAM is usable, the replica needs 900.0"


def test_a_node_holding_the_model_is_preferred_but_not_required(demo_facts):
    views = _views(demo_facts)
    second = next(v for v in views if v.name == "h100-a-02")
    held = tuple(
        replace(v, models=frozenset({"meta-llama/Llama-3.3-70B-Instruct"})) if v is second else v
        for v in views
    )
    want = Want("h100-80g", 4, models=("meta-llama/Llama-3.3-70B-Instruct",))
    placed = place(want, held)
    assert (
        placed is not None and placed.nodes[0].node == "h100-a-02" and placed.nodes[0].holds_model
    )
    busy = {"h100-a-02": {str(i): "other" for i in range(8)}}
    fallback = place(
        want,
        tuple(
            replace(v, models=frozenset({"meta-llama/Llama-3.3-70B-Instruct"}))
            if v.name == "h100-a-02"
            else v
            for v in _views(demo_facts, busy)
        ),
    )
    assert fallback is not None and fallback.nodes[0].node == "h100-a-01"


def test_an_unreachable_node_is_explained_with_its_reason(demo_facts):
    lost = NodeState(name="h100-a-01", state="unreachable", reason="connection refused")
    views = _views(demo_facts, states={"h100-a-01": lost})
    reasons = _reasons(explain(Want("h100-80g", 8, nodes=2), views))
    assert reasons["h100-a-01"] == "unreachable: it is unreachable: connection refused"
    assert place(Want("h100-80g", 8, nodes=2), views) is None


def test_a_node_not_in_the_inventory_fabric_stands_alone(demo_facts):
    _, specs = demo_facts
    bare = [NodeSpec(name=s.name, host=s.host) if s.name == "h100-a-02" else s for s in specs]
    reasons = _reasons(explain(Want("h100-80g", 8, nodes=2), _views(demo_facts, specs=bare)))
    assert (
        reasons["h100-a-02"] == "fabric: it is on no InfiniBand/RoCE fabric and in no NVLink domain"
    )


def test_a_tray_whose_imex_is_down_is_kept_out_of_the_domain(demo_facts):
    from llmgw_core.facts import Imex

    snapshot, _ = demo_facts
    tray = snapshot.nodes["gb200-r1-t02"]
    down = tray.model_copy(
        update={"facts": tray.facts.model_copy(update={"imex": Imex(state="DOWN")})}
    )
    views = _views(demo_facts, states={"gb200-r1-t02": down})
    want = Want("gb200-186g", 4, nodes=2)
    placed = place(want, views)
    assert [n.node for n in placed.nodes] == ["gb200-r1-t01", "gb200-r1-t03"]
    reasons = _reasons(explain(want, views, placed))
    assert reasons["gb200-r1-t02"] == (
        "domain: IMEX is down, so its cards cannot share memory across nodes, and it is on no fabric"
    )


def test_a_small_replica_fills_a_node_already_in_use_and_leaves_a_whole_one_free(demo_facts):
    views = _views(demo_facts, {"h100-a-01": {str(i): "llama-70b" for i in range(4)}})
    placed = place(Want("h100-80g", 4), views)
    assert placed is not None
    assert placed.nodes[0].node == "h100-a-01" and placed.nodes[0].gpu_ids == ("4", "5", "6", "7")


def test_no_room_is_said_in_one_line_with_the_nodes_of_the_right_class_first(demo_facts):
    from llmgw_core.placement import want_summary

    views = _views(demo_facts, {"h100-a-01": {str(i): "llama-70b" for i in range(4)}})
    line = want_summary(explain(Want("h100-80g", 8, nodes=2), views))
    assert line == (
        "h100-a-01: free cards: 4 of its 8 h100-80g devices are free, this way needs 8 "
        "(held by llama-70b); h100-a-02: fabric: too few nodes with room share an interconnect "
        "with it (1 on ib-a; 2 needed); 21 other nodes: another class"
    )


def test_vllm_on_the_cpu_node_takes_as_many_numa_nodes_as_it_has_ranks(demo_facts):
    # The demo's CPU node reports two NUMA nodes of 256 GiB: two ranks fit, four do not.
    views = _views(demo_facts)
    two = place(Want(None, 0, ram_gib=300.0, numa_nodes=2), views)
    assert two is not None and two.nodes[0].node == "cpu-01"
    verdicts = explain(Want(None, 0, ram_gib=300.0, numa_nodes=4), views)
    assert _reasons(verdicts)["cpu-01"] == (
        "NUMA: it has 2 NUMA nodes, and this way puts a rank on each of 4"
    )
