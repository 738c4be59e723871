"""The fleet summaries the console draws, from facts the real agent parses out of real captures."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from llmgw_agent.discover import collect_facts
from llmgw_core.views.fleet import domain_name, fleet_summary, racks_summary
from llmgw_core.views.node import class_counts, device_rows, node_summary, nvlink_matrix, tray_state


def replay_facts(tmp_path: Path, hardware_dir: Path, xml: str, topo: str | None = None) -> Any:
    """The agent's facts for a capture, read in place through a replay directory of links."""
    replay = tmp_path / xml
    replay.mkdir()
    (replay / "nvidia-smi-q-x.xml").symlink_to(hardware_dir / xml)
    if topo:
        (replay / "nvidia-smi-topo-m.txt").symlink_to(hardware_dir / topo)
    return collect_facts(replay=str(replay))


@pytest.fixture
def h100(tmp_path: Path, hardware_dir: Path) -> Any:
    return replay_facts(
        tmp_path,
        hardware_dir,
        "nvidia-smi-q-x_h100-80gb-hbm3_8gpu_hgx.xml",
        "topo-m_h100-80gb-hbm3_8gpu_8nic-mlx5.txt",
    )


@pytest.fixture
def gb200_tray(tmp_path: Path, hardware_dir: Path) -> Any:
    return replay_facts(tmp_path, hardware_dir, "nvidia-smi-q-x_gb200_4gpu_nvl72-tray.xml")


@pytest.fixture
def a100_mig(tmp_path: Path, hardware_dir: Path) -> Any:
    return replay_facts(tmp_path, hardware_dir, "nvidia-smi-q-x_a100-sxm4-80gb_mig-4x1g.20gb.xml")


def test_an_idle_hgx_h100_shows_8_of_8_h100_80g_cards_free(h100):
    counts = class_counts(h100)
    assert [(c.gpu_class, c.free, c.total) for c in counts] == [("h100-80g", 8, 8)]


def test_a_card_holding_memory_for_a_process_is_not_free(h100):
    busy = copy.deepcopy(h100)
    busy["gpus"][3]["processes"] = [{"pid": 4242, "name": "vllm", "used_mib": 70000}]
    assert [(c.free, c.total) for c in class_counts(busy)] == [(7, 8)]


def test_the_h100_nvlink_matrix_reads_nv18_between_every_pair(h100):
    matrix = nvlink_matrix(h100)
    assert matrix.labels[0] == "GPU0" and len(matrix.labels) == 8
    assert matrix.cells[0][0] == "X"
    assert {matrix.cells[a][b] for a in range(8) for b in range(8) if a != b} == {"NV18"}


def test_each_h100_card_names_its_numa_node_and_nearest_adapter(h100):
    rows = device_rows(h100)
    assert (rows[0].numa_node, rows[0].nearest_nic) == (0, "mlx5_0")


def test_one_machine_nvswitch_is_no_nvlink_domain_so_the_hgx_is_an_island(h100, gb200_tray):
    racks = racks_summary([("h100-a", h100), ("tray-01", gb200_tray)])
    assert racks.islands == ("h100-a",)
    assert [t.node for t in racks.racks[0].trays] == ["tray-01"]


def test_a_gb200_tray_is_in_domain_00000001_clique_2_and_joined(gb200_tray):
    assert domain_name(gb200_tray["nvlink_domain"]) == "00000001/2"
    assert tray_state(gb200_tray) == ("joined", None)
    rack = racks_summary([("tray-01", gb200_tray)]).racks[0]
    assert (rack.joined_gpus, rack.total_gpus) == (4, 4)


def test_a_tray_with_insufficient_resources_is_not_joined_and_says_so(gb200_tray):
    tray = copy.deepcopy(gb200_tray)
    fabric = tray["cards"][2]["fabric"]
    fabric.update(status="Insufficient Resources", verdict="not-joined")
    state, reason = tray_state(tray)
    assert state == "not-joined"
    assert reason == "GPU2 fabric Completed / Insufficient Resources"
    rack = racks_summary([("tray-01", gb200_tray), ("tray-02", tray)]).racks[0]
    assert (rack.joined_gpus, rack.total_gpus) == (4, 8)


def test_a_tray_at_degraded_bandwidth_is_drawn_degraded_with_the_bandwidth(gb200_tray):
    tray = copy.deepcopy(gb200_tray)
    tray["cards"][1]["fabric"]["health"]["bandwidth"] = "Degraded"
    tray["cards"][1]["fabric"]["verdict"] = "degraded"
    assert tray_state(tray) == ("degraded", "GPU1 fabric Healthy, bandwidth Degraded")


def test_mig_instances_are_listed_as_card_slash_mig_with_no_utilisation(a100_mig):
    rows = device_rows(a100_mig)
    assert [r.label for r in rows] == ["0/mig0", "0/mig1", "0/mig2", "0/mig3"]
    assert {r.gpu_class for r in rows} == {"a100-80g-mig-1g.20gb"}
    assert all(r.is_mig and r.utilisation_pct is None for r in rows)


def test_a_node_without_facts_yet_shows_its_state_and_reason_and_no_cards():
    summary = node_summary("gpu-a-01", "unreachable", "ssh: connection refused", None)
    assert (summary.state, summary.reason, summary.classes) == (
        "unreachable",
        "ssh: connection refused",
        (),
    )


def test_a_fleet_summary_lists_nodes_in_inventory_order_with_a_page_each(h100, gb200_tray):
    class Node:
        def __init__(self, name: str, facts: Any) -> None:
            self.name, self.state, self.reason, self.facts = name, "ready", None, facts

    fleet = fleet_summary({"b": Node("tray-01", gb200_tray), "a": Node("h100-a", h100)})
    assert [n.name for n in fleet.nodes] == ["tray-01", "h100-a"]
    assert fleet.details["tray-01"].nvlink_domain == "00000001/2"


def test_validated_facts_models_give_the_same_summary_as_the_agent_json(gb200_tray):
    from llmgw_core.facts import parse_facts

    model = parse_facts(gb200_tray, "tray-01")
    assert class_counts(model) == class_counts(gb200_tray)
    assert tray_state(model) == tray_state(gb200_tray)


def test_the_demo_nvl72_rack_holds_18_trays_with_the_not_joined_one_in_red_and_its_reason(tmp_path):
    from llmgw_agent.sim.profiles import write_profile
    from llmgw_core.fleet.sim.demo import demo_nodes

    pairs = [
        (
            node.name,
            collect_facts(
                replay=str(write_profile(node.profile, tmp_path / node.name, **node.options))
            ),
        )
        for node in demo_nodes()
    ]
    racks = racks_summary(pairs)
    assert len(racks.racks) == 1
    rack = racks.racks[0]
    assert rack.domain == "4f2c9a1e/32766"
    assert len(rack.trays) == 18 and (rack.joined_gpus, rack.total_gpus) == (68, 72)
    states = {t.node: (t.state, t.reason) for t in rack.trays if t.state != "joined"}
    assert states == {
        "gb200-r1-t07": ("degraded", "GPU0 fabric Limited Capacity, bandwidth Degraded"),
        "gb200-r1-t13": ("not-joined", "GPU0 fabric Completed / Insufficient Resources"),
    }
    assert racks.islands == ("a100-mig-01", "cpu-01", "h100-a-01", "h100-a-02", "l40s-01")


def test_an_unreachable_node_keeps_its_cards_on_show_but_offers_none_free(h100):
    summary = node_summary("h100-a", "unreachable", "ssh: timed out", h100, fabrics=("ib-a",))
    assert [(c.gpu_class, c.free, c.total) for c in summary.classes] == [("h100-80g", 0, 8)]


def test_fleet_totals_count_ready_nodes_free_gpus_and_name_the_nodes_not_ready(h100, gb200_tray):
    from llmgw_core.views.fleet import fleet_totals

    class Node:
        def __init__(self, name: str, state: str, reason: str | None, facts: Any) -> None:
            self.name, self.state, self.reason, self.facts = name, state, reason, facts

    fleet = fleet_summary(
        [
            Node("h100-a", "ready", None, h100),
            Node("tray-01", "refused", "host key changed", gb200_tray),
        ]
    )
    totals = fleet_totals(fleet)
    assert (totals.nodes, totals.ready, totals.gpus_free, totals.gpus_total) == (2, 1, 8, 12)
    assert totals.not_ready == (("tray-01", "refused", "host key changed"),)


def test_a_rail_below_its_rated_speed_is_flagged_and_the_node_page_names_a_tray_kept_out(tmp_path):
    from llmgw_agent.sim.profiles import write_profile
    from llmgw_core.views.node import adapter_rows, node_detail

    h100 = collect_facts(
        replay=str(write_profile("hgx-h100", tmp_path / "h", degraded_rail="mlx5_5"))
    )
    slow = [(a.name, a.rate_gbps, a.rated_gbps) for a in adapter_rows(h100) if a.below_rated]
    assert slow == [("mlx5_5", 200.0, 400.0)]
    tray = collect_facts(
        replay=str(
            write_profile(
                "gb200-tray",
                tmp_path / "t",
                tray=13,
                cluster_uuid="4f2c9a1e-7b3d-4c55-9e61-0a8d2b7c3f10",
                clique_id=32766,
                state="not-joined",
            )
        )
    )
    detail = node_detail(node_summary("t13", "ready", None, tray), tray)
    assert (
        detail.fabric_problem == "NVLink not-joined: GPU0 fabric Completed / Insufficient Resources"
    )
    assert {d.fabric for d in detail.devices} == {"not-joined"}
