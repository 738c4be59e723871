"""RDMA adapters against every real capture: sysfs, ibstat, ibstatus, ibv_devinfo."""

from __future__ import annotations

import pytest

from llmgw_agent.discover.ib import (
    parse_ibstat,
    parse_ibstatus,
    parse_ibv_devinfo,
    rated_speeds,
    read_sysfs,
    roce_gid_index,
)


def test_the_sysfs_tree_of_an_h100_node_gives_eight_ndr_rails_and_a_roce_bond(hardware_dir):
    adapters = read_sysfs(hardware_dir / "sysfs-class-infiniband_h100-node")
    assert [a["name"] for a in adapters] == [
        "mlx5_0",
        "mlx5_1",
        "mlx5_4",
        "mlx5_5",
        "mlx5_6",
        "mlx5_7",
        "mlx5_8",
        "mlx5_9",
        "mlx5_bond_0",
    ]
    rails = [a for a in adapters if a["link_layer"] == "InfiniBand"]
    assert len(rails) == 8
    assert {(a["state"], a["phys_state"], a["rate_gbps"], a["hca_type"]) for a in rails} == {
        ("ACTIVE", "LinkUp", 400.0, "MT4129")
    }
    bond = adapters[-1]
    assert (bond["link_layer"], bond["rate_gbps"], bond["hca_type"]) == (
        "Ethernet",
        200.0,
        "MT41692",
    )
    assert bond["gid_index"] is None  # no gids/ in the capture: unknown, not guessed


@pytest.mark.parametrize(
    ("filename", "count", "kinds"),
    [
        (
            "ibstat_h100-node_8x-cx7-ndr400-ib_plus_bf3-bond-eth.txt",
            9,
            {("MT4129", 400.0, "InfiniBand"), ("MT41692", 200.0, "Ethernet")},
        ),
        (
            "ibstat_h100-node_12hca_roce-eth_400g-and-100g.txt",
            12,
            {("MT4129", 400.0, "Ethernet"), ("MT4125", 100.0, "Ethernet")},
        ),
        (
            "ibstat_a100-node_9x-cx6-hdr200_ib-and-eth.txt",
            9,
            {("MT4126", 200.0, "Ethernet"), ("MT4126", 200.0, "InfiniBand")},
        ),
        ("ibstat_a100-azure_8x-cx6_ibpanic-stderr.txt", 8, {("MT4124", 200.0, "InfiniBand")}),
    ],
)
def test_every_ibstat_capture_gives_its_ports_rates_and_link_layers(
    hardware_dir, filename, count, kinds
):
    adapters = parse_ibstat((hardware_dir / filename).read_text())
    assert len(adapters) == count
    assert {(a["hca_type"], a["rate_gbps"], a["link_layer"]) for a in adapters} == kinds
    assert all(a["state"] == "ACTIVE" for a in adapters)


def test_ibstat_lists_hcas_in_lexicographic_order_and_we_keep_it(hardware_dir):
    adapters = parse_ibstat(
        (hardware_dir / "ibstat_h100-node_12hca_roce-eth_400g-and-100g.txt").read_text()
    )
    assert [a["name"] for a in adapters][:3] == ["mlx5_0", "mlx5_1", "mlx5_10"]


def test_blocks_before_an_ibpanic_line_are_kept(hardware_dir):
    text = (hardware_dir / "ibstat_a100-azure_8x-cx6_ibpanic-stderr.txt").read_text()
    assert "ibpanic:" in text
    adapters = parse_ibstat(text)
    assert adapters[-1]["name"] == "mlx5_7"


def test_ibstatus_reads_rate_state_and_the_odd_40g_ethernet_port(hardware_dir):
    adapters = parse_ibstatus((hardware_dir / "ibstatus_a100-azure_8x-hdr200.txt").read_text())
    assert len(adapters) == 9
    assert adapters[0]["rate_gbps"] == 200.0 and adapters[0]["state"] == "ACTIVE"
    assert {(a["rate_gbps"], a["link_layer"]) for a in adapters} == {
        (200.0, "InfiniBand"),
        (40.0, "Ethernet"),
    }


def test_ibv_devinfo_reports_roce_by_link_layer_even_with_an_infiniband_transport(hardware_dir):
    path = hardware_dir / "ibv_devinfo_h200-node_10x-cx7-roce_plus_cx6dx-bond.txt"
    text = path.read_text()
    assert "transport:\t\t\tInfiniBand (0)" in text or "InfiniBand (0)" in text
    adapters = parse_ibv_devinfo(text)
    assert len(adapters) == 11
    assert {a["link_layer"] for a in adapters} == {"Ethernet"}
    assert {a["state"] for a in adapters} == {"ACTIVE"}
    assert all(a["rate_gbps"] is None for a in adapters)  # no -v, no speed
    bond = next(a for a in adapters if a["name"] == "mlx5_bond_0")
    assert bond["hca_type"] == "MT4127"
    assert {a["fw_version"] for a in adapters} >= {"28.42.1000", "28.39.2048"}


def test_a_rail_slower_than_its_siblings_is_rated_at_theirs():
    adapters = [
        {
            "name": f"mlx5_{i}",
            "port": 1,
            "state": "ACTIVE",
            "rate_gbps": 400.0,
            "hca_type": "MT4129",
            "link_layer": "InfiniBand",
        }
        for i in range(4)
    ]
    adapters[3]["rate_gbps"] = 200.0
    rated = rated_speeds(adapters)
    assert rated["mlx5_3:1"] == 400.0


def test_the_roce_v2_gid_index_is_the_ipv4_mapped_v2_entry(tmp_path):
    port = tmp_path / "ports" / "1"
    entries = [
        ("IB/RoCE v1", "fe80:0000:0000:0000:a288:c2ff:fee3:142a"),
        ("RoCE v2", "fe80:0000:0000:0000:a288:c2ff:fee3:142a"),
        ("IB/RoCE v1", "0000:0000:0000:0000:0000:ffff:0a28:000b"),
        ("RoCE v2", "0000:0000:0000:0000:0000:ffff:0a28:000b"),
    ]
    for index, (kind, gid) in enumerate(entries):
        (port / "gid_attrs" / "types").mkdir(parents=True, exist_ok=True)
        (port / "gids").mkdir(parents=True, exist_ok=True)
        (port / "gid_attrs" / "types" / str(index)).write_text(kind + "\n")
        (port / "gids" / str(index)).write_text(gid + "\n")
    assert roce_gid_index(port) == 3


def test_a_garbled_port_line_of_ibv_devinfo_drops_that_port_and_keeps_the_others():
    # What the fuzzer of tests/badinput made of a real capture: `port:` with two numbers.
    text = (
        "hca_id: mlx5_0\n        fw_ver:  28.42.1000\n        vendor_part_id:  4129\n"
        "                port:   1\n                        state:  PORT_ACTIVE (4)\n"
        "                        link_layer:  Ethernet\n\n"
        "hca_id: mlx5_1\n        fw_ver:  28.42.1000\n        vendor_part_id:  4129\n"
        "                port:0   1\n                        state:  PORT_ACTIVE (4)\n"
        "                        link_layer:  InfiniBand\n"
    )
    adapters = parse_ibv_devinfo(text)
    assert [(a["name"], a["port"], a["link_layer"]) for a in adapters] == [
        ("mlx5_0", 1, "Ethernet")
    ]


def test_a_sysfs_value_written_with_non_ascii_digits_is_no_value(tmp_path):
    from llmgw_agent.discover.ib import _read, rate_gbps

    (tmp_path / "rate").write_text("\u0664\u0660\u0660 Gb/sec (4X NDR)\n")  # Arabic-Indic 400
    assert _read(tmp_path / "rate") is None
    assert rate_gbps("\u0664\u0660\u0660 Gb/sec") is None
    assert rate_gbps("400 Gb/sec (4X NDR)") == 400.0
