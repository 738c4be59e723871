"""What the fabric results mean: rail pairing, verdicts by ratio, the matrix plan,
all_reduce against the slowest node, and the warnings NCCL's transport earns."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from llmgw_core.fabric.nccl import parse_all_reduce_perf, parse_nccl_transport
from llmgw_core.fabric.verdicts import (
    AdapterEnd,
    judge_all_reduce,
    judge_rail,
    node_fabric_gbps,
    pair_rails,
    plan_matrix,
    transport_warnings,
    verdict_for_ratio,
)

HCAS = ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3"]


def adapters(*, down: str | None = None, rate: float = 400.0) -> dict[str, AdapterEnd]:
    return {
        name: AdapterEnd(name=name, state="DOWN" if name == down else "ACTIVE", rate_gbps=rate)
        for name in HCAS
    }


def gbits_output(average_gbps: float, device: str) -> str:
    return (
        f" Device         : {device}\n"
        " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n"
        f" 8388608    5000             0.00               {average_gbps:.2f}                0.005\n"
    )


@pytest.mark.parametrize(
    ("ratio", "verdict"),
    [
        (1.0, "pass"),
        (0.90, "pass"),
        (0.899, "warn"),
        (0.75, "warn"),
        (0.749, "fail"),
        (0.6, "fail"),
    ],
)
def test_a_rail_passes_at_90_percent_and_warns_from_75(ratio: float, verdict: str) -> None:
    assert verdict_for_ratio(ratio) == verdict


def test_rails_pair_by_position_in_the_fabric_list() -> None:
    pairs, decided = pair_rails("h100-a", HCAS, adapters(), "h100-b", HCAS, adapters(), 400)
    assert decided == []
    assert [(p.rail, p.adapter_a.name, p.adapter_b.name) for p in pairs] == [
        (0, "mlx5_0", "mlx5_0"),
        (1, "mlx5_1", "mlx5_1"),
        (2, "mlx5_2", "mlx5_2"),
        (3, "mlx5_3", "mlx5_3"),
    ]
    assert {p.rated_gbps for p in pairs} == {400}


def test_a_down_adapter_fails_its_rail_without_a_test() -> None:
    pairs, decided = pair_rails(
        "h100-a", HCAS, adapters(), "h100-b", HCAS, adapters(down="mlx5_2"), 400
    )
    assert [p.rail for p in pairs] == [0, 1, 3]
    assert len(decided) == 1
    assert decided[0].verdict == "fail"
    assert decided[0].reason == "down: mlx5_2 on h100-b is DOWN"


def test_a_missing_adapter_fails_its_rail() -> None:
    short = {name: end for name, end in adapters().items() if name != "mlx5_3"}
    _pairs, decided = pair_rails("h100-a", HCAS, adapters(), "h100-b", HCAS, short)
    assert decided[0].reason == "down: h100-b has no adapter mlx5_3"
    assert decided[0].rated_gbps == 400


def test_rails_pair_by_position_even_when_the_names_differ() -> None:
    ends_b = {f"mlx5_{i + 4}": AdapterEnd(name=f"mlx5_{i + 4}", rated_gbps=200) for i in range(3)}
    pairs, decided = pair_rails("a", HCAS, adapters(), "b", list(ends_b), ends_b)
    assert [(p.adapter_a.name, p.adapter_b.name, p.rated_gbps) for p in pairs] == [
        ("mlx5_0", "mlx5_4", 200),
        ("mlx5_1", "mlx5_5", 200),
        ("mlx5_2", "mlx5_6", 200),
    ]
    assert [r.reason for r in decided] == ["down: b has no rail 3"]


def test_a_port_that_trained_slower_is_still_judged_against_its_rated_speed() -> None:
    slow = AdapterEnd(name="mlx5_5", state="ACTIVE", rate_gbps=200, rated_gbps=400)
    pairs, _ = pair_rails("a", ["mlx5_5"], {"mlx5_5": slow}, "b", ["mlx5_5"], {"mlx5_5": slow})
    assert pairs[0].rated_gbps == 400


def test_a_rail_at_60_percent_fails_with_its_ratio() -> None:
    pairs, _ = pair_rails("h100-a", HCAS, adapters(), "h100-b", HCAS, adapters(), 400)
    result = judge_rail(pairs[3], gbits_output(241.0, "mlx5_3"), gbits_output(240.0, "mlx5_3"))
    assert result.verdict == "fail"
    assert result.measured_gbps == pytest.approx(240.0)
    assert result.ratio == pytest.approx(0.6)
    assert result.reason == "240.0 of 400 Gb/s (60%)"
    assert result.row()["ratio"] == 0.6
    assert "BW average[Gb/sec]" in result.raw_client


def test_the_captured_roce_run_passes_a_400_gbps_rail(hardware_dir: Path) -> None:
    server = (hardware_dir / "ib_write_bw_h200-node_roce-cx7_server-side.txt").read_text()
    pairs, _ = pair_rails("h200-a", ["mlx5_0"], adapters(), "h200-b", ["mlx5_0"], adapters(), 400)
    result = judge_rail(pairs[0], server, "")
    assert result.verdict == "pass"
    assert result.ratio == pytest.approx(0.972, abs=0.001)


def test_an_unreachable_server_fails_the_rail_and_says_so() -> None:
    pairs, _ = pair_rails("h100-a", HCAS, adapters(), "h100-b", HCAS, adapters(), 400)
    result = judge_rail(pairs[0], "", " Couldn't connect to 10.0.0.7:18515\n")
    assert result.verdict == "fail"
    assert result.reason.startswith("unreachable: h100-b could not reach h100-a on mlx5_0")


@pytest.mark.parametrize("count", [2, 3, 4, 5, 8])
def test_the_matrix_tests_every_pair_once_and_no_node_twice_at_a_time(count: int) -> None:
    nodes = [f"n{i}" for i in range(count)]
    waves = plan_matrix(nodes, max_pairs=2)
    planned = [pair for wave in waves for pair in wave]
    assert sorted(planned) == sorted(itertools.combinations(nodes, 2))
    for wave in waves:
        assert len(wave) <= 2
        busy = [node for pair in wave for node in pair]
        assert len(busy) == len(set(busy))


def test_the_gcp_all_reduce_is_judged_against_eight_200g_rails(hardware_dir: Path) -> None:
    run = parse_all_reduce_perf(
        (hardware_dir / "all_reduce_perf_h100-80gb_2node-16gpu_gcp-a3mega.txt").read_text()
    )
    judged = judge_all_reduce(run, slowest_node_gbps=8 * 200)
    assert judged.node_count == 2
    assert judged.internode_gbs == pytest.approx(180.71)
    assert judged.expected_gbs == 200
    assert judged.verdict == "pass"
    assert judged.reason == "180.7 of 200 GB/s per node across 2 nodes (90%)"


def test_the_sharp_all_reduce_fails_against_one_hdr_rail(hardware_dir: Path) -> None:
    run = parse_all_reduce_perf(
        (
            hardware_dir / "nccl-debug-info_all_reduce_perf_a100-pcie_2node_ib-hdr_sharp-plugin.txt"
        ).read_text()
    )
    judged = judge_all_reduce(run, slowest_node_gbps=200)
    assert judged.verdict == "fail"
    assert judged.ratio == pytest.approx(6.44 / 25)


def test_a_single_node_all_reduce_never_touched_the_fabric(hardware_dir: Path) -> None:
    run = parse_all_reduce_perf(
        (
            hardware_dir
            / "nccl-debug-info_all_reduce_perf_a100-sxm4-80gb_2gpu_container_socket-fallback.txt"
        ).read_text()
    )
    judged = judge_all_reduce(run, slowest_node_gbps=1600)
    assert judged.verdict == "untested"
    assert judged.reason == "one node: busbw 192.43 GB/s never crossed the fabric"


def nccl(network: str, *adapters_used: str, nodes: int = 2) -> list[str]:
    listing = " ".join(f"[{i}]{name}:1/IB" for i, name in enumerate(adapters_used))
    out = [
        f"h:1:2 [0] NCCL INFO comm 0x1 rank 0 nRanks 16 nNodes {nodes} localRanks 8 localRank 0 MNNVL 0"
    ]
    if adapters_used:
        out.append(f"h:1:2 [0] NCCL INFO NET/IB : Using {listing} [RO]; OOB eth0:10.0.0.1<0>")
    out.append(f"h:1:2 [0] NCCL INFO Using network {network}")
    return out


def test_a_multi_node_replica_on_socket_is_warned_loudly() -> None:
    shards = {
        "h100-a": parse_nccl_transport(nccl("Socket")),
        "h100-b": parse_nccl_transport(nccl("Socket")),
    }
    warnings = transport_warnings("llama-70b-1", shards, HCAS)
    assert len(warnings) == 1
    assert warnings[0].startswith(
        "llama-70b-1: NCCL fell back to TCP sockets on h100-a, h100-b — it runs, slowly"
    )


def test_a_single_node_replica_on_socket_is_not_warned(hardware_dir: Path) -> None:
    name = "nccl-debug-info_all_reduce_perf_a100-sxm4-80gb_2gpu_container_socket-fallback.txt"
    shard = parse_nccl_transport((hardware_dir / name).read_text().splitlines())
    assert transport_warnings("one-node", {"a100": shard}, None) == []


def test_a_shard_on_an_adapter_outside_its_fabric_is_warned() -> None:
    shards = {"h100-a": parse_nccl_transport(nccl("IB", "mlx5_0", "mlx5_bond_0"))}
    warnings = transport_warnings("r1", shards, HCAS)
    assert warnings == [
        "r1: shard h100-a uses mlx5_bond_0, outside its fabric (mlx5_0, mlx5_1, mlx5_2, mlx5_3); "
        "pin NCCL_IB_HCA with '=' to the fabric's adapters"
    ]


def test_a_replica_on_its_fabric_with_ib_has_no_warning() -> None:
    shards = {n: parse_nccl_transport(nccl("IB", *HCAS)) for n in ("h100-a", "h100-b")}
    assert transport_warnings("r1", shards, HCAS) == []


def test_a_node_puts_the_sum_of_its_rails_on_the_fabric_and_a_down_rail_adds_nothing() -> None:
    ends = adapters(down="mlx5_1")
    assert node_fabric_gbps(HCAS, ends, 400) == 1200
    assert node_fabric_gbps(HCAS, ends, 400, {"mlx5_3": 240.0}) == 1040
    assert node_fabric_gbps(["mlx5_9"], {}) is None


def with_qps(output: str, local: tuple[int, ...], remote: tuple[int, ...]) -> str:
    """ib_write_bw's output with the queue-pair lines each side prints before its table."""
    lines = [f" local address: LID 0x11 QPN {qpn:#06x} PSN 0x8c2a1d RKey 0x1fff00" for qpn in local]
    lines += [
        f" remote address: LID 0x2a QPN {qpn:#06x} PSN 0x41b2e0 RKey 0x1ffe00" for qpn in remote
    ]
    return "\n".join(lines) + "\n" + output


def test_a_server_half_that_ran_with_a_strangers_client_is_not_measured() -> None:
    pairs, _ = pair_rails("h100-a", HCAS, adapters(), "h100-b", HCAS, adapters(), 400)
    # Another user's ib_write_bw reached the server's port first (QPNs 0x300…) and sent at 390.
    server = with_qps(gbits_output(390.0, "mlx5_0"), (0x101, 0x102), (0x300, 0x301))
    client = with_qps(gbits_output(120.0, "mlx5_0"), (0x201, 0x202), (0x101, 0x102))
    result = judge_rail(pairs[0], server, client)
    assert result.verdict == "fail"
    assert result.measured_gbps is None
    assert result.reason == (
        "not measured: the server half on h100-a ran with a peer that is not h100-b's client "
        "(another user may have reached its port first)"
    )


def test_a_client_left_without_a_result_is_not_replaced_by_what_the_server_measured() -> None:
    pairs, _ = pair_rails("h100-a", HCAS, adapters(), "h100-b", HCAS, adapters(), 400)
    server = with_qps(gbits_output(390.0, "mlx5_0"), (0x101,), (0x300,))
    result = judge_rail(pairs[0], server, " Couldn't connect to 10.0.0.7:18515\n")
    assert result.verdict == "fail"
    assert result.reason.startswith("unreachable: h100-b could not reach h100-a on mlx5_0")


def test_the_servers_figure_counts_when_its_queue_pairs_are_the_clients() -> None:
    pairs, _ = pair_rails("h100-a", HCAS, adapters(), "h100-b", HCAS, adapters(), 400)
    server = with_qps(gbits_output(388.0, "mlx5_0"), (0x101, 0x102), (0x201, 0x202))
    client = with_qps("", (0x202, 0x201), (0x102, 0x101))  # exchanged, then printed no table
    result = judge_rail(pairs[0], server, client)
    assert (result.verdict, result.measured_gbps) == ("pass", pytest.approx(388.0))
