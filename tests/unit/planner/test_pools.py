"""Described fleets and the pools a replica may take its cards from."""

from __future__ import annotations

import pytest

from llmgw_core.errors import BadInput
from llmgw_core.planner.pools import described_fleet, nvlink_groups_from_matrix

MIXED = [
    {"name": "dgx", "count": 2, "gpu": "h100-80g", "gpus": 8, "fabric": "ib-a"},
    {"name": "cpu1", "gpus": 0, "memory_gib": 512},
    {"name": "nvl", "count": 18, "gpu": "gb200-186g", "gpus": 4, "nvlink_domain": "nvl72-a"},
    {"name": "a100m", "gpu": "a100-80g-mig-3g.40gb", "gpus": 2},
    {"name": "pcie", "gpu": "l40s-48g", "gpus": 4, "nvlink": False},
]


def _pools_by_name(entries):
    return {pool.describe(): pool for pool in described_fleet(entries).pools()}


def test_count_expands_a_line_into_numbered_nodes():
    fleet = described_fleet(MIXED)
    names = [node.name for node in fleet.nodes]
    assert names[:3] == ["dgx-1", "dgx-2", "cpu1"]
    assert "nvl-18" in names
    assert len(fleet.nodes) == 2 + 1 + 18 + 1 + 1


def test_pools_are_keyed_by_class_and_interconnect():
    pools = _pools_by_name(MIXED)
    assert set(pools) == {
        "h100-80g on ib-a",
        "CPU node cpu1",
        "gb200-186g in NVLink domain nvl72-a",
        "a100-80g-mig-3g.40gb on a100m",
        "l40s-48g on pcie",
    }
    assert len(pools["gb200-186g in NVLink domain nvl72-a"].nodes) == 18
    assert pools["h100-80g on ib-a"].spans_nodes
    assert not pools["l40s-48g on pcie"].spans_nodes


def test_two_fabrics_are_two_pools_even_for_one_class():
    pools = _pools_by_name(
        [
            {"name": "a", "count": 2, "gpu": "h100-80g", "gpus": 8, "fabric": "ib-a"},
            {"name": "b", "count": 2, "gpu": "h100-80g", "gpus": 8, "fabric": "ib-b"},
        ]
    )
    assert set(pools) == {"h100-80g on ib-a", "h100-80g on ib-b"}
    assert all(len(pool.nodes) == 2 for pool in pools.values())


def test_a_tray_not_joined_to_its_nvlink_domain_falls_back_to_its_fabric():
    pools = _pools_by_name(
        [
            {
                "name": "nvl",
                "count": 3,
                "gpu": "gb200-186g",
                "gpus": 4,
                "nvlink_domain": "nvl72-a",
                "fabric": "ib-c",
            },
            {
                "name": "lost",
                "gpu": "gb200-186g",
                "gpus": 4,
                "fabric": "ib-c",
                "nvlink_domain": {"name": "nvl72-a", "joined": False},
            },
            {
                "name": "noimex",
                "gpu": "gb200-186g",
                "gpus": 4,
                "nvlink_domain": {"name": "nvl72-a", "imex": "down"},
            },
        ]
    )
    assert [n.name for n in pools["gb200-186g in NVLink domain nvl72-a"].nodes] == [
        "nvl-1",
        "nvl-2",
        "nvl-3",
    ]
    assert [n.name for n in pools["gb200-186g on ib-c"].nodes] == ["lost"]
    assert not pools["gb200-186g on noimex"].spans_nodes


def test_a_pcie_box_has_no_nvlink_between_its_cards():
    pool = _pools_by_name(MIXED)["l40s-48g on pcie"]
    assert pool.nvlink_widths(free_only=False) == (1,)
    assert pool.card_counts(free_only=False) == (4,)


def test_mig_instances_are_devices_without_nvlink():
    pool = _pools_by_name(MIXED)["a100-80g-mig-3g.40gb on a100m"]
    node = pool.nodes[0]
    assert [d.label for d in node.devices] == ["0/mig0", "0/mig1"]
    assert pool.nvlink_widths(free_only=False) == (1,)


def test_busy_cards_count_against_what_is_free_now():
    pool = _pools_by_name(
        [{"name": "dgx", "count": 2, "gpu": "h100-80g", "gpus": 8, "fabric": "ib-a", "busy": 6}]
    )["h100-80g on ib-a"]
    assert pool.nodes_with(4, free_only=False) == 2
    assert pool.nodes_with(4, free_only=True) == 0
    assert pool.nodes_with(2, free_only=True) == 2


def test_free_is_the_other_way_to_say_busy():
    fleet = described_fleet([{"name": "dgx", "gpu": "h100-80g", "gpus": 8, "free": 3}])
    assert sum(not d.busy for d in fleet.nodes[0].devices) == 3


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        (
            {"name": "x", "gpu": "h100-80g", "gpus": 8, "colour": "red"},
            "fleet entry 1 (x): colour is not a known key",
        ),
        (
            {"name": "x", "gpu": "h900-1t", "gpus": 8},
            "fleet entry 1 (x): unknown GPU class 'h900-1t'",
        ),
        ({"name": "x", "gpus": 0}, "a CPU node needs `memory_gib:`"),
        (
            {"name": "x", "gpu": "h100-80g", "gpus": 8, "busy": 9},
            "free/busy must be between 0 and gpus (8)",
        ),
        ({"gpu": "h100-80g", "gpus": 8}, "fleet entry 1: name is required"),
    ],
)
def test_a_bad_fleet_entry_is_one_sentence(entry, message):
    with pytest.raises(BadInput) as error:
        described_fleet([entry])
    assert message in error.value.sentence()


def test_two_nodes_with_one_name_are_refused():
    with pytest.raises(BadInput, match="two nodes are named 'dgx-1'"):
        described_fleet(
            [
                {"name": "dgx", "count": 2, "gpu": "h100-80g", "gpus": 8},
                {"name": "dgx-1", "gpu": "h100-80g", "gpus": 8},
            ]
        )


def test_nvlink_groups_come_from_the_matrix_widest_first():
    # Two pairs joined by NVLink and one card alone (an odd PCIe box).
    links = [
        [0, 4, 0, 0, 0],
        [4, 0, 0, 0, 0],
        [0, 0, 0, 12, 0],
        [0, 0, 12, 0, 0],
        [0, 0, 0, 0, 0],
    ]
    assert nvlink_groups_from_matrix(links) == ((0, 1), (2, 3), (4,))


def test_the_cards_with_the_most_nvlink_between_them_are_chosen():
    from llmgw_core.planner.gpu_classes import gpu_class
    from llmgw_core.planner.pools import Device, Node

    card = gpu_class("a100-80g")
    links = [[0, 12, 2, 2], [12, 0, 2, 2], [2, 2, 0, 4], [2, 2, 4, 0]]
    node = Node(
        name="n",
        devices=tuple(Device(i, str(i), card) for i in range(4)),
        nvlink_groups=nvlink_groups_from_matrix(links),
    )
    assert node.choose_nvlink_cards("a100-80g", 2, links) == (0, 1)


def test_nodes_without_a_fabric_pool_by_class_but_are_never_spanned():
    pools = _pools_by_name(
        [{"name": "pcie", "count": 3, "gpu": "l40s-48g", "gpus": 4, "nvlink": False}]
    )
    pool = pools["l40s-48g on 3 nodes without a shared fabric"]
    assert len(pool.nodes) == 3
    assert not pool.spans_nodes
