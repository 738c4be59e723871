"""The simulated hardware profiles, read back through the real discovery parser."""

from __future__ import annotations

import pytest

from llmgw_agent.discover import collect_facts
from llmgw_agent.discover.smi import parse_smi_list, parse_smi_xml
from llmgw_agent.sim.profiles import PROFILES, ProfileError, write_profile


@pytest.fixture(autouse=True)
def _state(tmp_path, monkeypatch):
    monkeypatch.setenv("LLMGW_AGENT_STATE", str(tmp_path / "state"))


def _facts(tmp_path, kind, **options):
    return collect_facts(replay=str(write_profile(kind, tmp_path / kind, **options)))


def test_every_profile_is_read_without_a_discovery_error(tmp_path):
    for kind in PROFILES:
        facts = _facts(tmp_path, kind)
        assert facts["errors"] == [], kind
        assert facts["host"]["hostname"]


def test_an_hgx_h100_has_eight_nv18_cards_each_beside_its_own_ndr_rail(tmp_path):
    facts = _facts(tmp_path, "hgx-h100", hostname="h100-a1")
    assert [c["class"] for c in facts["cards"]] == ["h100-80g"] * 8
    assert {cell for row in facts["nvlink"].values() for cell in row.values()} == {"NV18"}
    assert [c["nearest_nic"] for c in facts["cards"]] == [f"mlx5_{i}" for i in range(8)]
    assert [c["numa_node"] for c in facts["cards"]] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert {(a["rate_gbps"], a["link_layer"], a["state"]) for a in facts["adapters"]} == {
        (400.0, "InfiniBand", "ACTIVE")
    }
    assert facts["nvlink_domain"] is None
    assert facts["cards"][0]["fabric"]["verdict"] == "local"
    assert facts["host"]["mgmt_interface"] == "eno1"
    assert facts["host"]["driver_version"] == "580.105.08"


def test_a_degraded_rail_links_at_hdr_while_its_siblings_stay_at_ndr(tmp_path):
    facts = _facts(tmp_path, "hgx-h100", degraded_rail="mlx5_3")
    rail = next(a for a in facts["adapters"] if a["name"] == "mlx5_3")
    assert (rail["rate_gbps"], rail["rated_gbps"], rail["state"]) == (200.0, 400.0, "ACTIVE")


def test_the_same_host_gets_the_same_uuids_every_time(tmp_path):
    first = write_profile("hgx-h100", tmp_path / "a", hostname="n1")
    second = write_profile("hgx-h100", tmp_path / "b", hostname="n1")
    other = write_profile("hgx-h100", tmp_path / "c", hostname="n2")
    text = (first / "nvidia-smi-L.txt").read_text()
    assert text == (second / "nvidia-smi-L.txt").read_text()
    assert text != (other / "nvidia-smi-L.txt").read_text()


@pytest.mark.parametrize(
    ("state", "verdict", "in_domain"),
    [
        ("joined", "joined", True),
        ("degraded", "degraded", True),
        ("not-joined", "not-joined", False),
    ],
)
def test_a_gb200_tray_is_joined_degraded_or_not_joined(tmp_path, state, verdict, in_domain):
    cluster = "5c0ffee0-1111-2222-3333-444455556666"
    facts = _facts(tmp_path, "gb200-tray", tray=7, cluster_uuid=cluster, clique_id=9, state=state)
    assert [c["class"] for c in facts["cards"]] == ["gb200-186g"] * 4
    assert {c["fabric"]["verdict"] for c in facts["cards"]} == {verdict}
    assert {c["platform"]["tray_index"] for c in facts["cards"]} == {7}
    assert facts["nvlink_domain"] == (
        {"cluster_uuid": cluster, "clique_id": 9} if in_domain else None
    )
    assert facts["imex"]["state"] == "UP"
    assert len(facts["imex"]["nodes"]) == 18
    assert facts["imex_channels"] == ["channel0"]
    assert facts["host"]["mgmt_address"] == facts["imex"]["nodes"][6]["address"]
    assert facts["host"]["arch"] == "aarch64"


def test_trays_of_one_rack_share_the_chassis_and_the_imex_node_list(tmp_path):
    one = _facts(tmp_path / "1", "gb200-tray", tray=1, rack="r9")
    two = _facts(tmp_path / "2", "gb200-tray", tray=2, rack="r9")
    assert (
        one["cards"][0]["platform"]["chassis_serial"]
        == two["cards"][0]["platform"]["chassis_serial"]
    )
    assert one["imex"]["nodes"] == two["imex"]["nodes"]
    assert one["nvlink_domain"] == two["nvlink_domain"]


def test_an_a100_node_mixes_mig_instances_an_empty_mig_card_and_whole_cards(tmp_path):
    facts = _facts(tmp_path, "a100-mig")
    assert [(g["label"], g["class"]) for g in facts["gpus"]] == [
        ("0/mig0", "a100-80g-mig-3g.40gb"),
        ("0/mig1", "a100-80g-mig-2g.20gb"),
        ("0/mig2", "a100-80g-mig-1g.10gb"),
        ("0/mig3", "a100-80g-mig-1g.10gb"),
        ("2", "a100-80g"),
        ("3", "a100-80g"),
    ]
    assert [g["id"] for g in facts["gpus"][:4]] == [1000, 1001, 1002, 1003]
    assert all(g["uuid"].startswith("MIG-") for g in facts["gpus"][:4])
    assert facts["cards"][1]["mig_mode"] == "enabled"
    assert "nothing can run" in facts["cards"][1]["out_of_placement"]


def test_the_generated_xml_without_its_listing_infers_the_same_mig_profiles(tmp_path):
    capture = write_profile("a100-mig", tmp_path / "a100")
    smi = parse_smi_xml((capture / "nvidia-smi-q-x.xml").read_text())
    listing = parse_smi_list((capture / "nvidia-smi-L.txt").read_text())
    from llmgw_agent.discover.classes import mig_profile

    inferred = [
        mig_profile(smi["cards"][0]["name"], m["sm_count"], m["memory_mib"])
        for m in smi["cards"][0]["migs"]
    ]
    assert inferred == [m["profile"] for m in listing[0]["migs"]]


def test_an_l40s_node_has_no_nvlink_and_two_roce_ports_with_a_gid_index(tmp_path):
    facts = _facts(tmp_path, "l40s")
    assert [c["class"] for c in facts["cards"]] == ["l40s-48g"] * 4
    assert not any(
        cell.startswith("NV") for row in facts["nvlink"].values() for cell in row.values()
    )
    assert [(a["name"], a["link_layer"], a["gid_index"]) for a in facts["adapters"]] == [
        ("mlx5_0", "Ethernet", 3),
        ("mlx5_1", "Ethernet", 3),
    ]
    assert all(c["fabric"] is None and c["mig_mode"] is None for c in facts["cards"])


def test_a_cpu_node_has_half_a_terabyte_and_no_gpu(tmp_path):
    facts = _facts(tmp_path, "cpu")
    assert facts["cards"] == [] and facts["gpus"] == []
    assert facts["host"]["memory_mib"] == 512 * 1024
    assert facts["host"]["cpu_only"] is True
    assert "llama.cpp" in facts["engines"]


def test_unknown_kinds_and_states_are_refused_with_the_choices(tmp_path):
    with pytest.raises(ProfileError, match="hgx-h100, gb200-tray"):
        write_profile("dgx-b300", tmp_path / "x")
    with pytest.raises(ProfileError, match="joined, degraded, not-joined"):
        write_profile("gb200-tray", tmp_path / "y", state="half")
