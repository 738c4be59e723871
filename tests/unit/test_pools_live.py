"""The planner's fleet built from live facts: one builder for the console and the steps."""

from __future__ import annotations

import pytest

from llmgw_core.fleet.state import FleetState, NodeState
from llmgw_core.planner.pools_live import live_nodes, planner_fleet
from llmgw_tui.offline_demo import offline_demo_state


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[FleetState, dict[str, tuple[str, ...]]]:
    return offline_demo_state(tmp_path_factory.mktemp("demo"))


def _pools(state: FleetState, fabrics: dict[str, tuple[str, ...]]) -> dict[str, object]:
    return {pool.describe(): pool for pool in planner_fleet(live_nodes(state, fabrics)).pools()}


def test_the_demo_fleet_as_the_planner_sees_it_pools_by_class_and_interconnect(demo):
    pools = _pools(*demo)
    h100 = pools["h100-80g on ib-a"]
    assert len(h100.nodes) == 2
    assert h100.nvlink_widths(free_only=True) == (8, 8)
    assert "a100-80g-mig-3g.40gb on a100-mig-01" in pools


def test_the_trays_that_have_not_joined_or_run_degraded_are_kept_out_of_the_nvlink_domain(demo):
    pools = _pools(*demo)
    domain = next(p for name, p in pools.items() if "NVLink domain" in name)
    assert len(domain.nodes) == 16
    names = {node.name for node in domain.nodes}
    assert {"gb200-r1-t07", "gb200-r1-t13"}.isdisjoint(names)


def test_the_two_whole_a100_cards_beside_the_mig_card_share_nvlink(demo):
    pools = _pools(*demo)
    assert pools["a100-80g on a100-mig-01"].nvlink_widths(free_only=True) == (2,)


def test_the_console_and_the_steps_build_the_same_fleet_from_fabric_names_or_specs(demo):
    from llmgw_core.inventory import Fabric, NodeSpec

    state, fabrics = demo
    specs = [
        NodeSpec(
            name=name,
            host="127.0.0.1",
            fabrics=tuple(Fabric(name=f, hcas=("mlx5_0",)) for f in fabrics[name]),
        )
        for name in state.nodes
    ]
    assert live_nodes(state, fabrics) == live_nodes(state, specs)


def _with_memory_held(state: FleetState, node: str, used_mib: int) -> FleetState:
    facts = state.nodes[node].facts
    assert facts is not None
    gpus = list(facts.gpus)
    gpus[0] = gpus[0].model_copy(update={"memory_used_mib": used_mib})
    held = facts.model_copy(update={"gpus": tuple(gpus)})
    nodes = dict(state.nodes)
    nodes[node] = NodeState(name=node, state="ready", facts=held)
    return state.model_copy(update={"nodes": nodes})


def test_a_card_holding_memory_is_busy_when_the_claims_were_not_read(demo):
    state, fabrics = demo
    held = _with_memory_held(state, "h100-a-01", 40_000)
    (view,) = [v for v in live_nodes(held, fabrics) if v.name == "h100-a-01"]
    assert view.node is not None
    assert [d.label for d in view.node.devices if d.busy] == ["0"]


def test_the_claims_say_which_cards_are_busy_when_they_were_read(demo):
    state, fabrics = demo
    held = _with_memory_held(state, "h100-a-01", 40_000)
    claims = {"h100-a-01": {"3": "llama-70b"}}
    (view,) = [v for v in live_nodes(held, fabrics, claims) if v.name == "h100-a-01"]
    assert view.node is not None
    assert [d.label for d in view.node.devices if d.busy] == ["3"]
    assert view.holders == {"3": "llama-70b"}


def test_a_node_not_ready_offers_no_node_to_the_planner(demo):
    state, fabrics = demo
    nodes = dict(state.nodes)
    nodes["l40s-01"] = NodeState(name="l40s-01", state="unreachable", reason="ssh: timed out")
    views = live_nodes(state.model_copy(update={"nodes": nodes}), fabrics)
    (view,) = [v for v in views if v.name == "l40s-01"]
    assert (view.ready, view.reason) == (False, "ssh: timed out")
    assert "l40s-01" not in {n.name for n in planner_fleet(views).nodes}
