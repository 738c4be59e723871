"""Which rails a replica uses after the fabric tests: left out, restored, overridden (pure)."""

from __future__ import annotations

from llmgw_core.fabric.rails import choose_rails, verdicts_to_record
from llmgw_core.fabric.verdicts import AdapterEnd, RailPair, judge_rail
from llmgw_core.facts import RailVerdict

A, B, C = "h100-a-01", "h100-a-02", "h100-a-03"
HCAS = [f"mlx5_{i}" for i in range(8)]
AT = 1_796_150_400.0  # 2026-12-01 18:40 UTC


def verdict(peer: str, adapter: str, kind: str, ratio: float | None, at: float = AT) -> RailVerdict:
    return RailVerdict(peer=peer, adapter=adapter, verdict=kind, ratio=ratio, measured_at=at)


def test_a_failed_rail_is_left_out_on_both_nodes_with_its_ratio_and_time():
    choice = choose_rails(
        [A, B],
        {A: HCAS, B: HCAS},
        {A: [verdict(B, "mlx5_5", "fail", 0.6)], B: [verdict(A, "mlx5_5", "fail", 0.6)]},
    )
    assert choice.adapters_left_out(A) == {"mlx5_5"} == choice.adapters_left_out(B)
    assert choice.warnings[0] == (
        "mlx5_5 on h100-a-01 is left out of NCCL_IB_HCA: its fabric test measured "
        "60% of its rate with h100-a-02 at 2026-12-01 18:40 UTC"
    )


def test_a_rail_never_tested_or_passing_or_warning_is_used():
    choice = choose_rails(
        [A, B],
        {A: HCAS, B: HCAS},
        {A: [verdict(B, "mlx5_1", "pass", 0.97), verdict(B, "mlx5_2", "warn", 0.8)]},
    )
    assert choice.left_out == () and choice.warnings == ()


def test_a_later_passing_test_restores_the_rail():
    kept = [verdict(B, "mlx5_5", "fail", 0.6), verdict(B, "mlx5_5", "pass", 0.97, at=AT + 600)]
    assert choose_rails([A, B], {A: HCAS, B: HCAS}, {A: kept}).left_out == ()
    # and the other way round: a failure after a pass puts it out again
    kept = [verdict(B, "mlx5_5", "pass", 0.97), verdict(B, "mlx5_5", "fail", 0.5, at=AT + 600)]
    assert choose_rails([A, B], {A: HCAS, B: HCAS}, {A: kept}).adapters_left_out(A) == {"mlx5_5"}


def test_a_failure_against_a_node_outside_the_replica_changes_nothing():
    choice = choose_rails([A, B], {A: HCAS, B: HCAS}, {A: [verdict(C, "mlx5_5", "fail", 0.6)]})
    assert choice.left_out == ()


def test_one_node_crosses_no_rail_so_nothing_is_left_out():
    choice = choose_rails([A], {A: HCAS}, {A: [verdict(B, "mlx5_5", "fail", 0.6)]})
    assert choice.left_out == () and choice.warnings == ()


def test_rails_all_uses_the_failed_rail_and_says_so():
    choice = choose_rails(
        [A, B], {A: HCAS, B: HCAS}, {A: [verdict(B, "mlx5_5", "fail", 0.6)]}, all_rails=True
    )
    assert choice.left_out == ()
    assert choice.warnings == (
        "mlx5_5 on h100-a-01 is used (rails: all) although its fabric test measured "
        "60% of its rate with h100-a-02 at 2026-12-01 18:40 UTC",
    )


def test_a_node_whose_every_rail_failed_keeps_them_rather_than_fall_back_to_tcp():
    choice = choose_rails(
        [A, B],
        {A: ["mlx5_0", "mlx5_1"], B: ["mlx5_0", "mlx5_1"]},
        {A: [verdict(B, "mlx5_0", "fail", None), verdict(B, "mlx5_1", "fail", 0.3)]},
    )
    assert choice.left_out == ()
    assert choice.warnings[0].startswith("every rail of h100-a-01 failed its last fabric test")
    assert "mlx5_0: failing with h100-a-02" in choice.warnings[0]


def test_a_port_named_in_the_inventory_matches_its_adapters_verdict():
    choice = choose_rails(
        [A, B],
        {A: ["mlx5_4:2", "mlx5_5:1"], B: ["mlx5_4:2", "mlx5_5:1"]},
        {A: [verdict(B, "mlx5_5", "fail", 0.6)]},
    )
    assert choice.adapters_left_out(A) == {"mlx5_5"}


def _row(measured_gbps: float, adapter: str = "mlx5_5"):
    end = AdapterEnd(name=adapter, state="ACTIVE", rate_gbps=400.0)
    pair = RailPair(rail=5, node_a=A, node_b=B, adapter_a=end, adapter_b=end, rated_gbps=400.0)
    output = (
        " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n"
        f" 8388608    5000             0.00               {measured_gbps:.2f}                0.005\n"
    )
    return judge_rail(pair, output, output)


def test_a_test_leaves_each_rails_verdict_on_both_of_its_nodes():
    rows = verdicts_to_record([_row(240.0)], AT)
    assert rows == {
        A: [
            {
                "peer": B,
                "adapter": "mlx5_5",
                "rail": 5,
                "verdict": "fail",
                "ratio": 0.6,
                "measured_gbps": 240.0,
                "rated_gbps": 400.0,
                "measured_at": AT,
            }
        ],
        B: [{**rows[A][0], "peer": A}],
    }
    kept = {n: [RailVerdict.model_validate(r) for r in found] for n, found in rows.items()}
    assert choose_rails([A, B], {A: HCAS, B: HCAS}, kept).adapters_left_out(B) == {"mlx5_5"}


def test_the_node_page_marks_an_adapter_whose_last_test_failed_and_not_one_that_passed():
    from llmgw_core.views.node import adapter_rows

    facts = {
        "adapters": [{"name": "mlx5_4"}, {"name": "mlx5_5"}],
        "rail_verdicts": [
            verdict(B, "mlx5_5", "fail", 0.6).model_dump(),
            verdict(B, "mlx5_4", "fail", 0.5).model_dump(),
            verdict(B, "mlx5_4", "pass", 0.97, at=AT + 60).model_dump(),
            {"peer": B, "adapter": "mlx5_4", "verdict": "unreadable"},
        ],
    }
    marks = {row.name: row.rail_failed for row in adapter_rows(facts)}
    assert marks == {
        "mlx5_4": None,
        "mlx5_5": "60% of its rate with h100-a-02 at 2026-12-01 18:40 UTC",
    }


def test_the_racks_view_lists_each_failed_rail_beside_the_islands():
    from llmgw_core.views.fleet import racks_summary

    failed = {"rail_verdicts": [verdict(B, "mlx5_5", "fail", 0.6).model_dump()]}
    passed = {"rail_verdicts": [verdict(A, "mlx5_5", "pass", 0.97).model_dump()]}
    racks = racks_summary([(A, failed), (B, passed)])
    assert racks.islands == (A, B)
    assert racks.failed_rails == (
        "h100-a-01 mlx5_5: 60% of its rate with h100-a-02 at 2026-12-01 18:40 UTC",
    )
