"""ib_write_bw output read into Gb/s: the captured RoCE server side, both unit variants,
duration mode, CPU warnings between rows, and runs that printed no table."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmgw_core.fabric.perftest import parse_ib_write_bw, to_gbps

CLIENT_GBITS_DURATION = """\
---------------------------------------------------------------------------------------
                    RDMA_Write BW Test
 Dual-port       : OFF          Device         : mlx5_3
 Number of qps   : 2            Transport type : IB
 Connection type : RC           Using SRQ      : OFF
 TX depth        : 128
 CQ Moderation   : 1
 Mtu             : 4096[B]
 Link type       : IB
 Max inline data : 0[B]
 rdma_cm QPs     : OFF
 Data ex. method : Ethernet
---------------------------------------------------------------------------------------
 local address: LID 0x11 QPN 0x0101 PSN 0x8c2a1d RKey 0x1fff00 VAddr 0x007f1a2b000000
 remote address: LID 0x2a QPN 0x0207 PSN 0x41b2e0 RKey 0x1ffe00 VAddr 0x007f9c3d000000
---------------------------------------------------------------------------------------
 #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]
Conflicting CPU frequency values detected: 1500.000000 != 3000.000000. CPU Frequency is not max.
 WARNING: BW peak won't be measured in this run.
 1048576    1123456          0.00               392.84                0.046830
---------------------------------------------------------------------------------------
"""

CLIENT_MIB = """\
 #bytes     #iterations    BW peak[MiB/sec]    BW average[MiB/sec]   MsgRate[Mpps]
 8388608    5000             23301.50            23288.12                  0.002911
"""


@pytest.fixture
def roce_server(hardware_dir: Path) -> str:
    return (hardware_dir / "ib_write_bw_h200-node_roce-cx7_server-side.txt").read_text()


def test_the_captured_roce_server_side_reads_388_7_gbps_on_mlx5_0(roce_server: str) -> None:
    run = parse_ib_write_bw(roce_server)
    assert run.side == "server"
    assert run.device == "mlx5_0"
    assert run.link_type == "Ethernet"
    assert run.gid_index == 3
    assert run.mtu_bytes == 4096
    assert run.unit == "MB/sec"
    assert [row.size_bytes for row in run.rows] == [65536]
    assert run.average_gbps == pytest.approx(388.73, abs=0.01)
    assert run.rows[0].peak_gbps == pytest.approx(388.91, abs=0.01)
    assert run.failure is None


def test_perftest_megabytes_are_two_to_the_twentieth_bytes(roce_server: str) -> None:
    """MsgRate × message size = BW in 2^20-byte units, as the capture shows."""
    row = parse_ib_write_bw(roce_server).rows[0]
    assert row.msg_rate_mpps * 1e6 * row.size_bytes * 8 / 1e9 == pytest.approx(
        row.average_gbps, rel=1e-4
    )
    assert to_gbps(119.2093, "MiB/sec") == pytest.approx(1.0, rel=1e-5)


def test_report_gbits_in_duration_mode_reads_the_average_and_no_peak() -> None:
    run = parse_ib_write_bw(CLIENT_GBITS_DURATION)
    assert run.side == "client"
    assert run.device == "mlx5_3"
    assert run.link_type == "IB"
    assert run.qps == 2
    assert run.unit == "Gb/sec"
    assert run.duration_mode
    assert run.average_gbps == pytest.approx(392.84)
    assert run.rows[0].peak_gbps is None
    assert any("Conflicting CPU frequency" in warning for warning in run.warnings)


def test_newer_perftest_mib_per_second_converts_to_gbps() -> None:
    run = parse_ib_write_bw(CLIENT_MIB)
    assert run.unit == "MiB/sec"
    assert run.average_gbps == pytest.approx(23288.12 * 8 * 2**20 / 1e9)


def test_the_largest_message_size_is_the_figure_when_several_were_run() -> None:
    text = (
        " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]\n"
        " 65536      5000             371.20            370.95                  0.707550\n"
        " 8388608    5000             394.01            393.90                  0.005869\n"
        " 1048576    5000             390.40            390.12                  0.046506\n"
    )
    assert parse_ib_write_bw(text).average_gbps == pytest.approx(393.90)


def test_a_client_that_cannot_reach_its_server_is_unreachable() -> None:
    text = (
        " Couldn't connect to 10.0.0.7:18516\n"
        "Unable to open file descriptor for socket connection Unable to init the socket connection\n"
    )
    run = parse_ib_write_bw(text)
    assert run.failure == "unreachable"
    assert run.rows == ()
    assert run.error_lines[0] == "Couldn't connect to 10.0.0.7:18516"


def test_a_port_that_is_down_is_reported_down() -> None:
    run = parse_ib_write_bw(" Port number 1 state is Down\n Couldn't set the link layer\n")
    assert run.failure == "down"


def test_output_with_no_table_and_no_known_error_keeps_its_last_lines() -> None:
    run = parse_ib_write_bw("something odd\nthen a crash\n")
    assert run.failure == "no-result"
    assert run.error_lines == ("something odd", "then a crash")


def test_each_side_names_its_queue_pairs_and_its_peers() -> None:
    run = parse_ib_write_bw(CLIENT_GBITS_DURATION)
    assert (run.local_qpns, run.remote_qpns) == ((0x0101,), (0x0207,))
