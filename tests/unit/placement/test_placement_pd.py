"""Prefill and decode placed together on the demo fleet's real facts: one NVLink domain, else
one fabric's passing rails, never two fabrics, TCP only when allowed, the reason said."""

from __future__ import annotations

from demo_fleet_facts import on_two_fabrics
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llmgw_core.engines.from_fleet import fabric_adapters
from llmgw_core.facts import RailVerdict
from llmgw_core.placement import Want
from llmgw_core.placement_pd import PdPlacement, PdRefused, PdWant, place_disaggregated
from llmgw_core.planner.pools_live import live_nodes

AT = 1_796_000_000.0


def _fleet(demo_facts, specs=None):
    snapshot, demo_specs = demo_facts
    specs = specs or demo_specs
    views = live_nodes(snapshot, specs, {})
    adapters = {
        spec.name: fabric_adapters(spec.fabrics[0].hcas, snapshot.nodes[spec.name].facts)
        for spec in specs
        if spec.fabrics
    }
    return views, adapters


def _verdict(peer: str, adapter: str, verdict: str, gbps: float) -> RailVerdict:
    return RailVerdict(
        peer=peer,
        adapter=adapter,
        verdict=verdict,
        ratio=gbps / 400,
        measured_gbps=gbps,
        rated_gbps=400,
        measured_at=AT,
    )


def _pd(gpu_class: str, cards: int, prefill: int = 2, decode: int = 2, **more) -> PdWant:
    return PdWant(Want(gpu_class, cards), Want(gpu_class, cards), prefill, decode, **more)


def test_two_and_two_workers_of_a_70b_on_the_h100_pair_carry_kv_over_ib_a_rails(demo_facts):
    views, adapters = _fleet(demo_facts)
    found = place_disaggregated(_pd("h100-80g", 4), views, adapters)
    assert isinstance(found, PdPlacement)
    assert found.transport == "infiniband" and found.interconnect == "ib-a"
    assert found.nodes == ("h100-a-01", "h100-a-02")
    cards = [(p.nodes[0].node, p.nodes[0].gpu_ids) for p in (*found.prefill, *found.decode)]
    assert len({(node, card) for node, ids in cards for card in ids}) == 16  # no card twice
    assert [a.name for a in found.rails["h100-a-01"]] == [f"mlx5_{i}" for i in range(8)]
    assert (
        found.path().startswith("KV over mlx5_0, mlx5_1") and "(InfiniBand, ib-a)" in found.path()
    )


def test_inside_the_nvl72_rack_the_kv_goes_over_nvlink_and_no_rail_is_named(demo_facts):
    views, adapters = _fleet(demo_facts)
    found = place_disaggregated(_pd("gb200-186g", 4), views, adapters)
    assert isinstance(found, PdPlacement)
    assert found.transport == "nvlink" and found.rails == {}
    assert len(found.nodes) == 4 and "gb200-r1-t07" not in found.nodes  # a tray kept out
    assert found.path() == f"KV over NVLink inside domain {found.interconnect}"


def test_a_service_that_fits_one_node_keeps_its_kv_inside_it(demo_facts):
    views, adapters = _fleet(demo_facts)
    found = place_disaggregated(_pd("h100-80g", 2, 1, 1), views, adapters)
    assert isinstance(found, PdPlacement)
    assert found.transport == "node" and found.nodes == (found.interconnect,)


def test_a_rail_that_failed_its_fabric_test_is_left_out_of_the_transfer_with_the_reason(
    demo_facts,
):
    views, adapters = _fleet(demo_facts)
    verdicts = {
        "h100-a-01": [_verdict("h100-a-02", f"mlx5_{i}", "pass", 370.0) for i in range(8)]
        + [_verdict("h100-a-02", "mlx5_3", "fail", 240.0)],
        "h100-a-02": [_verdict("h100-a-01", f"mlx5_{i}", "pass", 380.0) for i in range(8)],
    }
    verdicts["h100-a-01"] = [
        v for v in verdicts["h100-a-01"] if not (v.adapter == "mlx5_3" and v.verdict == "pass")
    ]
    found = place_disaggregated(_pd("h100-80g", 4), views, adapters, verdicts)
    assert isinstance(found, PdPlacement)
    assert "mlx5_3" not in [a.name for a in found.rails["h100-a-01"]]
    assert len(found.rails["h100-a-02"]) == 8
    assert found.warnings == (
        "mlx5_3 on h100-a-01 is left out of the KV transfer's devices: its fabric test measured"
        " 60% of its rate with h100-a-02 at 2026-11-30 00:53 UTC",
    )
    assert found.measured_gbps == 7 * 370.0  # the slower node's passing rails together


def test_a_node_whose_every_rail_failed_is_no_place_for_a_worker(demo_facts):
    views, adapters = _fleet(demo_facts)
    verdicts = {"h100-a-02": [_verdict("h100-a-01", f"mlx5_{i}", "fail", 10.0) for i in range(8)]}
    refused = place_disaggregated(_pd("h100-80g", 8, 1, 1), views, adapters, verdicts)
    assert isinstance(refused, PdRefused)
    assert "ib-a: h100-a-02: every rail failed its last fabric test" in refused.reasons


def test_sides_that_fit_only_across_two_fabrics_are_refused_unless_tcp_is_allowed(demo_facts):
    _, specs = demo_facts
    split = on_two_fabrics(specs)
    views, adapters = _fleet(demo_facts, split)
    want = _pd("h100-80g", 8, 1, 1)
    refused = place_disaggregated(want, views, adapters)
    assert isinstance(refused, PdRefused) and refused.tcp_would_fit
    sentence = refused.sentence(want)
    assert sentence.startswith(
        "no interconnect has room for 1 prefill (8 h100-80g) and 1 decode (8 h100-80g) together:"
    )
    assert "ib-a: room for 0 of 1 decode replicas (8 h100-80g)" in sentence
    assert "the KV cache never crosses two (allow_tcp: true sends it over TCP" in sentence
    allowed = place_disaggregated(_pd("h100-80g", 8, 1, 1, allow_tcp=True), views, adapters)
    assert isinstance(allowed, PdPlacement) and allowed.transport == "tcp"
    assert allowed.path() == "KV over TCP on the management network (allow_tcp): slow"


def test_no_room_anywhere_says_so_without_offering_tcp(demo_facts):
    views, adapters = _fleet(demo_facts)
    refused = place_disaggregated(_pd("h100-80g", 8, 2, 2), views, adapters)
    assert isinstance(refused, PdRefused) and not refused.tcp_would_fit
    assert refused.reasons == ("ib-a: room for 0 of 2 decode replicas (8 h100-80g)",)


_CLASSES = st.sampled_from(["h100-80g", "gb200-186g", "l40s-48g"])


@settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    gpu_class=_CLASSES,
    prefill_cards=st.sampled_from([1, 2, 4, 8]),
    decode_cards=st.sampled_from([1, 2, 4, 8]),
    prefill=st.integers(1, 4),
    decode=st.integers(1, 4),
    claimed=st.dictionaries(
        st.sampled_from(["h100-a-01", "h100-a-02", "gb200-r1-t01", "gb200-r1-t02", "l40s-01"]),
        st.sets(st.integers(0, 7), max_size=8),
        max_size=3,
    ),
    failed=st.sets(st.integers(0, 7), max_size=8),
    allow_tcp=st.booleans(),
)
def test_both_sides_never_share_a_card_nor_cross_two_interconnects(
    demo_facts, gpu_class, prefill_cards, decode_cards, prefill, decode, claimed, failed, allow_tcp
):
    snapshot, specs = demo_facts
    claims = {node: {str(i): "other" for i in ids} for node, ids in claimed.items()}
    views = live_nodes(snapshot, specs, claims)
    _, adapters = _fleet(demo_facts)
    verdicts = {"h100-a-01": [_verdict("h100-a-02", f"mlx5_{i}", "fail", 100.0) for i in failed]}
    want = PdWant(
        Want(gpu_class, prefill_cards), Want(gpu_class, decode_cards), prefill, decode, allow_tcp
    )
    found = place_disaggregated(want, views, adapters, verdicts)
    if isinstance(found, PdRefused):
        assert not (found.tcp_would_fit and allow_tcp)
        assert found.sentence(want).startswith("no interconnect has room for")
        return
    placements = (*found.prefill, *found.decode)
    assert len(found.prefill) == prefill and len(found.decode) == decode
    cards = [
        (p.node, card) for placement in placements for p in placement.nodes for card in p.gpu_ids
    ]
    assert len(cards) == len(set(cards)), "a card given twice"
    assert not any(card in claims.get(node, {}) for node, card in cards), "a claimed card given"
    by_name = {view.name: view.node for view in views}
    if found.transport == "tcp":
        assert allow_tcp
    elif found.transport == "node":
        assert len(found.nodes) == 1
    elif found.transport == "nvlink":
        assert len({by_name[n].nvlink_domain.key for n in found.nodes}) == 1
    else:
        assert {by_name[n].fabric for n in found.nodes} == {found.interconnect}
        for node, rails in found.rails.items():
            names = {a.name for a in rails}
            assert rails and names <= {a.name for a in adapters[node]}
            if node == "h100-a-01" and "h100-a-02" in found.nodes:
                assert not names & {f"mlx5_{i}" for i in failed}
