"""The path inside a node: NCCL's channel lines read against the node's topology."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmgw_core.fabric.nccl import parse_nccl_transport, path_kind
from llmgw_core.fabric.paths import inside_path, shm_warning, transport_label
from llmgw_core.fabric.verdicts import transport_warnings

NV18 = {str(a): {str(b): "NV18" for b in range(8) if b != a} for a in range(8)}
PCIE = {  # two PCIe switches under two host bridges, as the demo's L40S box
    "0": {"1": "PIX", "2": "SYS", "3": "SYS"},
    "1": {"0": "PIX", "2": "SYS", "3": "SYS"},
    "2": {"0": "SYS", "1": "SYS", "3": "PIX"},
    "3": {"0": "SYS", "1": "SYS", "2": "PIX"},
}


def _lines(*channels: str, network: str = "Socket", nodes: int = 1) -> list[str]:
    """One node's INFO lines: the network NCCL loaded, the communicator, the channels."""
    prefix = "gpu-node-7:5120:5188 [0] NCCL INFO "
    said = [
        "NCCL version 2.21.5+cuda12.4",
        prefix + f"Using network {network}",
        prefix + f"comm 0x55d0 rank 0 nRanks 4 nNodes {nodes} localRanks 4 localRank 0 MNNVL 0",
    ]
    return said + [prefix + channel for channel in channels]


@pytest.mark.parametrize(
    ("via", "kind"),
    [
        ("P2P/CUMEM", "p2p"),
        ("P2P/CUMEM/read", "p2p"),
        ("P2P/IPC/read", "p2p"),
        ("P2P/direct pointer/read", "p2p"),
        ("P2P/indirect/2[2]", "p2p"),
        ("P2P/MNNVL", "mnnvl"),
        ("SHM/direct/direct", "shm"),
        ("SHM/direct", "shm"),
        ("NET/IB/0/GDRDMA", "net"),
        ("NET/IBext_v8/0(7)/GDRDMA", "net"),
    ],
)
def test_every_way_nccl_names_has_its_kind(via: str, kind: str):
    assert path_kind(via) == kind


def test_a_one_node_replica_on_nvlink_reads_nvlink_and_never_its_unused_socket_plugin():
    transport = parse_nccl_transport(
        _lines(
            "Channel 00/0 : 0[4] -> 1[5] via P2P/CUMEM",
            "Channel 01/0 : 0[4] -> 1[5] via P2P/CUMEM",
            "Channel 00/0 : 1[5] -> 2[6] via P2P/CUMEM",
        )
    )
    assert transport.network == "Socket"  # NCCL loaded it; nothing went over it
    assert [(p.src_card, p.dst_card) for p in transport.paths] == [(4, 5), (5, 6)]
    inside = inside_path(transport, NV18)
    assert inside is not None and dict(inside.pairs) == {"nvlink": 2}
    assert transport_label(transport, inside, node_count=1) == "NVLink"


def test_pcie_cards_read_p2p_under_one_switch_and_host_memory_across_bridges_unwarned():
    transport = parse_nccl_transport(
        _lines(
            "Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM",
            "Channel 00 : 1[1] -> 2[2] via SHM/direct/direct",
            "Channel 00/0 : 2[2] -> 3[3] via P2P/CUMEM",
        )
    )
    inside = inside_path(transport, PCIE)
    assert inside is not None and dict(inside.pairs) == {"pcie_p2p": 2, "shm": 1}
    assert transport_label(transport, inside, 1) == "PCIe P2P + host memory (SHM)"
    assert inside.shm_on_nvlink == ()
    assert transport_warnings("r", {"node": transport}, None, 1, {"node": PCIE}) == []


def test_nvlink_cards_joined_through_host_memory_are_named_in_a_warning():
    transport = parse_nccl_transport(
        _lines(
            "Channel 00 : 0[0] -> 1[1] via SHM/direct/direct",
            "Channel 01 : 0[0] -> 1[1] via SHM/direct/direct",
            "Channel 00 : 1[1] -> 0[0] via SHM/direct/direct",
            "Channel 00 : 2[2] -> 3[3] via SHM/direct",  # NCCL's master after 2.30: the shorter form
        )
    )
    inside = inside_path(transport, NV18)
    assert inside is not None and inside.shm_on_nvlink == ((0, 1), (2, 3))
    assert transport_label(transport, inside, 1) == "host memory (SHM)"
    (warning,) = transport_warnings("chat", {"h100-a-01": transport}, None, 1, {"h100-a-01": NV18})
    assert warning == shm_warning("chat", "h100-a-01", inside)
    assert warning.startswith(
        "chat: on h100-a-01, NCCL joined NVLink cards (0–1, 2–3) through host memory (SHM)"
    )
    assert "NCCL_P2P_DISABLE" in warning and "ACS" in warning and "IOMMU" in warning


def test_without_the_topology_a_p2p_pair_is_said_so_not_guessed():
    transport = parse_nccl_transport(_lines("Channel 00/0 : 0[0] -> 1[1] via P2P/IPC"))
    inside = inside_path(transport, None)
    assert inside is not None and transport_label(transport, inside, 1) == "P2P (link not known)"


def test_an_old_nccl_that_printed_bus_ids_still_reads_its_paths():
    transport = parse_nccl_transport(
        _lines("Channel 00 : 11[3e000] -> 9[1b000] via P2P/direct pointer")
    )
    (path,) = transport.paths
    assert (path.src, path.dst, path.src_card, path.dst_card) == (11, 9, None, None)
    assert transport_label(transport, inside_path(transport, NV18), 1) == "P2P (link not known)"


def test_two_nodes_read_the_inside_path_and_the_network_between_them():
    transport = parse_nccl_transport(
        _lines(
            "Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM",
            "Channel 00/0 : 7[7] -> 8[0] [send] via NET/IB/0/GDRDMA",
            network="IB",
            nodes=2,
        )
    )
    inside = inside_path(transport, NV18)
    assert transport_label(transport, inside, 2) == "NVLink + IB + GDR"


def test_trays_of_one_nvlink_domain_read_mnnvl_alone():
    transport = parse_nccl_transport(
        _lines(
            "Channel 00/0 : 0[0] -> 1[1] via P2P/MNNVL",
            "Channel 00/0 : 3[3] -> 4[0] via P2P/MNNVL",
            network="IB",
            nodes=2,
        )
    )
    inside = inside_path(transport, NV18)
    assert transport_label(transport, inside, 2) == "NVLink across trays (MNNVL)"


def test_the_captured_two_card_run_reads_a_one_node_p2p_path_not_socket(hardware_dir: Path):
    text = (
        hardware_dir
        / "nccl-debug-info_all_reduce_perf_a100-sxm4-80gb_2gpu_container_socket-fallback.txt"
    ).read_text()
    transport = parse_nccl_transport(text.splitlines())
    assert transport.network == "Socket" and transport.nodes == 1
    assert {p.via for p in transport.paths} == {"P2P/direct pointer/read"}
    a100_nv12 = {"0": {"1": "NV12"}, "1": {"0": "NV12"}}
    assert transport_label(transport, inside_path(transport, a100_nv12), 1) == "NVLink"
