"""NCCL's own word on its transport, and all_reduce_perf tables, read from the captures."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmgw_core.fabric.nccl import parse_all_reduce_perf, parse_nccl_transport
from llmgw_core.fabric.verdicts import replica_transport, transport_warnings

SHARP = "nccl-debug-info_all_reduce_perf_a100-pcie_2node_ib-hdr_sharp-plugin.txt"
SOCKET = "nccl-debug-info_all_reduce_perf_a100-sxm4-80gb_2gpu_container_socket-fallback.txt"
GCP = "all_reduce_perf_h100-80gb_2node-16gpu_gcp-a3mega.txt"

RAY_LINES = [
    "(RayWorkerWrapper pid=2817, ip=10.0.0.12) h100-b:2817:2901 [0] NCCL INFO NET/IB : "
    "Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE [RO]; OOB eth0:10.0.0.12<0>",
    "(RayWorkerWrapper pid=2817, ip=10.0.0.12) NCCL version 2.21.5+cuda12.4",
    "(RayWorkerWrapper pid=2817) h100-b:2817:2901 [0] NCCL INFO Using network IB",
    "(RayWorkerWrapper pid=2817) h100-b:2817:2901 [0] NCCL INFO comm 0x5581 rank 1 nRanks 16 "
    "nNodes 2 localRanks 8 localRank 0 MNNVL 0",
    "(RayWorkerWrapper pid=2817) h100-b:2817:2901 [0] NCCL INFO Channel 00/0 : 0[0] -> 8[0] "
    "[receive] via NET/IB/0(8)/GDRDMA",
]


def lines(hardware_dir: Path, name: str) -> list[str]:
    return (hardware_dir / name).read_text().splitlines()


def test_the_sharp_log_is_ib_through_the_ibext_v8_plugin_with_gdr(hardware_dir: Path) -> None:
    transport = parse_nccl_transport(lines(hardware_dir, SHARP))
    assert transport.version == "2.21.5"
    assert transport.cuda_version == "12.4"
    assert transport.network == "IBext_v8"
    assert transport.network_kind == "ib"
    assert [(a.name, a.port, a.link_layer, a.sharp) for a in transport.adapters] == [
        ("mlx5_0", 1, "IB", True)
    ]
    assert transport.gpudirect is True
    assert transport.mnnvl is False
    assert transport.nodes == 2
    assert transport.hosts == ("test1", "test2")
    assert transport.label == "IB (IBext_v8) + GDR"


def test_the_container_log_fell_back_to_socket(hardware_dir: Path) -> None:
    transport = parse_nccl_transport(lines(hardware_dir, SOCKET))
    assert transport.version == "2.20.5"
    assert transport.network == "Socket"
    assert transport.network_kind == "socket"
    assert transport.ib_found is False
    assert transport.adapters == ()
    assert transport.socket_interfaces == ("eth0",)
    assert transport.gpudirect is None
    assert transport.nodes == 1
    assert transport.label == "Socket (TCP)"


def test_ray_worker_prefixes_do_not_hide_the_transport() -> None:
    transport = parse_nccl_transport(RAY_LINES)
    assert transport.version == "2.21.5"
    assert transport.network == "IB"
    assert [(a.name, a.link_layer) for a in transport.adapters] == [
        ("mlx5_0", "IB"),
        ("mlx5_1", "RoCE"),
    ]
    assert transport.gpudirect is True
    assert transport.nodes == 2
    assert transport.hosts == ("h100-b",)
    assert transport.label == "IB + GDR"


def test_network_channels_without_gdrdma_mean_staging_through_host_memory() -> None:
    transport = parse_nccl_transport(
        [
            "n1:1:2 [0] NCCL INFO Using network IB",
            "n1:1:2 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[0] [send] via NET/IB/1",
        ]
    )
    assert transport.gpudirect is False
    assert transport.label == "IB without GDR"


def test_mnnvl_on_and_warn_lines_with_a_timestamp_are_read() -> None:
    transport = parse_nccl_transport(
        [
            "gb-0:11:12 [0] NCCL INFO comm 0x1 rank 0 nRanks 8 nNodes 2 localRanks 4 localRank 0 MNNVL 1",
            "[2026-01-02 10:11:12] gb-0:11:12 [0] NCCL WARN NET/IB : unable to open device",
        ]
    )
    assert transport.mnnvl is True
    assert transport.warnings == ("NET/IB : unable to open device",)
    assert transport.label == "MNNVL"


def test_a_log_without_nccl_lines_says_nothing() -> None:
    transport = parse_nccl_transport(["INFO 01-02 vLLM API server version 0.10.2"])
    assert transport.network is None
    assert transport.label == "unknown"


def test_the_gcp_all_reduce_has_31_sizes_on_two_hosts_and_its_footer(hardware_dir: Path) -> None:
    run = parse_all_reduce_perf((hardware_dir / GCP).read_text())
    assert run.hosts == ("ztan-mig-235z", "ztan-mig-gq73")
    assert run.rank_count == 16
    assert len(run.rows) == 31
    assert run.avg_busbw_gbs == pytest.approx(70.742)
    largest = run.largest
    assert largest is not None
    assert largest.size_bytes == 8589934592
    assert largest.out_of_place_us == 47535
    assert largest.out_of_place_algbw_gbs == pytest.approx(180.71)
    assert largest.out_of_place_busbw_gbs == pytest.approx(338.82)
    assert largest.in_place_busbw_gbs == pytest.approx(337.35)


@pytest.mark.parametrize("name", [GCP, SHARP, SOCKET])
def test_busbw_is_algbw_times_2_n_minus_1_over_n_in_every_capture(
    hardware_dir: Path, name: str
) -> None:
    run = parse_all_reduce_perf((hardware_dir / name).read_text())
    ranks = run.rank_count
    for row in run.rows:
        if row.out_of_place_algbw_gbs >= 1:
            expected = row.out_of_place_algbw_gbs * 2 * (ranks - 1) / ranks
            assert row.out_of_place_busbw_gbs == pytest.approx(expected, rel=0.01, abs=0.01)


def test_the_sharp_run_keeps_rows_and_footer_around_its_nccl_lines(hardware_dir: Path) -> None:
    run = parse_all_reduce_perf((hardware_dir / SHARP).read_text())
    assert run.hosts == ("test1", "test2")
    assert len(run.rows) == 28
    assert run.avg_busbw_gbs == pytest.approx(2.36313)
    assert run.transport.network == "IBext_v8"


def test_the_socket_run_is_one_host_with_three_sizes(hardware_dir: Path) -> None:
    run = parse_all_reduce_perf((hardware_dir / SOCKET).read_text())
    assert run.hosts == ("3767c65d25c4",)
    assert [row.size_bytes for row in run.rows] == [134217728, 268435456, 536870912]
    assert run.avg_busbw_gbs == pytest.approx(179.465)
    assert run.transport.network_kind == "socket"


def test_mpirun_tags_and_na_wrong_counts_are_read() -> None:
    text = (
        "[1,0]<stdout>:#  Rank  0 Group  0 Pid   11 on nodea device  0 [0x81] NVIDIA H100\n"
        "[1,1]<stdout>:#  Rank  1 Group  0 Pid   12 on nodeb device  0 [0x81] NVIDIA H100\n"
        "[1,0]<stdout>:  1048576  262144  float  sum  -1  203.2  5.16  5.16  N/A  207.2  5.06  5.06  N/A\n"
    )
    run = parse_all_reduce_perf(text)
    assert run.hosts == ("nodea", "nodeb")
    assert run.rows[0].out_of_place_busbw_gbs == pytest.approx(5.16)


def sim_rank_lines(env: dict[str, str], node_rank: int) -> list[str]:
    """What the demo's sim engine prints for one rank of a 2-node, 16-card replica."""
    from llmgw_agent.sim.engine.lines import nccl_lines

    engine = {"nnodes": 2, "tp": 8, "pp": 2, "node_rank": node_rank}
    return nccl_lines({"NCCL_DEBUG": "INFO", **env}, f"h100-a-0{node_rank + 1}", 4242, engine)


def test_the_demo_replica_given_its_adapters_is_ib_with_gdr() -> None:
    env = {"NCCL_IB_HCA": "=" + ",".join(f"mlx5_{i}:1" for i in range(8))}
    shards = {f"rank{r}": parse_nccl_transport(sim_rank_lines(env, r)) for r in (0, 1)}
    for transport in shards.values():
        assert transport.label == "IB + GDR"
        assert [a.name for a in transport.adapters] == [f"mlx5_{i}" for i in range(8)]
        assert transport.nodes == 2
    hcas = [f"mlx5_{i}" for i in range(8)]
    assert transport_warnings("llama-70b", shards, hcas) == []


def test_the_demo_replica_with_no_adapters_given_is_socket_and_warned() -> None:
    shards = {f"rank{r}": parse_nccl_transport(sim_rank_lines({}, r)) for r in (0, 1)}
    assert {t.label for t in shards.values()} == {"Socket (TCP)"}
    assert {t.ib_found for t in shards.values()} == {False}
    warnings = transport_warnings("llama-70b", shards, [f"mlx5_{i}" for i in range(8)])
    assert len(warnings) == 1
    assert "NCCL fell back to TCP sockets on rank0, rank1" in warnings[0]


def test_a_replica_transport_is_read_shard_by_shard_with_its_warnings() -> None:
    logs = {"h100-a-01": sim_rank_lines({}, 0), "h100-a-02": sim_rank_lines({}, 1)}
    transports, warnings = replica_transport("r1", logs, ["mlx5_0"], node_count=2)
    assert {name: t.network for name, t in transports.items()} == {
        "h100-a-01": "Socket",
        "h100-a-02": "Socket",
    }
    assert warnings[0].startswith("r1: NCCL fell back to TCP sockets on h100-a-01, h100-a-02")
