"""nvidia-smi parsing against every real capture: XML, `-q` text, `-L` and CSV."""

from __future__ import annotations

import pytest

from llmgw_agent.discover.assemble import build_facts, join_listing
from llmgw_agent.discover.classes import card_class, compute_capability, mig_profile
from llmgw_agent.discover.fabric import fabric_verdict, nvlink_domain
from llmgw_agent.discover.smi import (
    SmiParseError,
    parse_fabric_text,
    parse_query_gpu_csv,
    parse_smi_list,
    parse_smi_text,
    parse_smi_xml,
)

ZERO = "00000000-0000-0000-0000-000000000000"

XML_FILES = {
    # file: (cards, name, class, MIG mode, fabric state, clique, verdict)
    "nvidia-smi-q-x_h100-80gb-hbm3_8gpu_hgx.xml": (
        8,
        "NVIDIA H100 80GB HBM3",
        "h100-80g",
        "disabled",
        "Completed",
        0,
        "local",
    ),
    "nvidia-smi-q-x_b200_8gpu_hgx.xml": (
        8,
        "NVIDIA B200",
        "b200-180g",
        "disabled",
        "Completed",
        0,
        "local",
    ),
    "nvidia-smi-q-x_gb200_4gpu_nvl72-tray.xml": (
        4,
        "NVIDIA GB200",
        "gb200-186g",
        "disabled",
        "Completed",
        2,
        "joined",
    ),
    "nvidia-smi-q-x_gb300_4gpu_nvl72-tray.xml": (
        4,
        "NVIDIA GB300",
        "gb300-288g",
        "disabled",
        "Completed",
        32766,
        "joined",
    ),
    "nvidia-smi-q-x_l40s_1gpu_pcie.xml": (1, "NVIDIA L40S", "l40s-48g", None, None, None, None),
    "nvidia-smi-q-x_t4_1gpu_pcie.xml": (1, "Tesla T4", "t4-16g", None, None, None, None),
    "nvidia-smi-q-x_a100-sxm4-40gb_1gpu_nomig.xml": (
        1,
        "NVIDIA A100-SXM4-40GB",
        "a100-40g",
        "disabled",
        None,
        None,
        None,
    ),
    "nvidia-smi-q-x_a100-sxm4-40gb_mig-2x3g.20gb.xml": (
        1,
        "NVIDIA A100-SXM4-40GB",
        "a100-40g",
        "enabled",
        None,
        None,
        None,
    ),
    "nvidia-smi-q-x_a100-sxm4-80gb_mig-4x1g.20gb.xml": (
        1,
        "NVIDIA A100-SXM4-80GB",
        "a100-80g",
        "enabled",
        None,
        None,
        None,
    ),
}


def _facts(smi, listing=()):
    return build_facts(smi, list(listing), None, [], None, [], {}, {}, {}, "test", "0", [])


@pytest.mark.parametrize("filename", sorted(XML_FILES))
def test_every_xml_capture_gives_its_cards_class_mig_mode_and_fabric(hardware_dir, filename):
    count, name, label, mig, state, clique, verdict = XML_FILES[filename]
    smi = parse_smi_xml((hardware_dir / filename).read_text())
    facts = _facts(smi)
    assert len(facts["cards"]) == count
    card = facts["cards"][0]
    assert (card["name"], card["class"], card["mig_mode"]) == (name, label, mig)
    if state is None:
        assert card["fabric"] is None
    else:
        assert (card["fabric"]["state"], card["fabric"]["clique_id"]) == (state, clique)
        assert card["fabric"]["verdict"] == verdict
    assert card["memory_mib"] > 10000
    assert smi["driver_version"]


def test_an_h100_hgx_with_a_zero_cluster_uuid_is_no_nvlink_domain(hardware_dir):
    facts = _facts(
        parse_smi_xml((hardware_dir / "nvidia-smi-q-x_h100-80gb-hbm3_8gpu_hgx.xml").read_text())
    )
    assert facts["cards"][0]["fabric"]["cluster_uuid"] == ZERO
    assert facts["nvlink_domain"] is None
    assert [g["label"] for g in facts["gpus"]] == [str(i) for i in range(8)]
    assert facts["cards"][0]["compute_capability"] == "9.0"


def test_a_gb200_tray_is_in_one_nvlink_domain_with_healthy_full_bandwidth(hardware_dir):
    facts = _facts(
        parse_smi_xml((hardware_dir / "nvidia-smi-q-x_gb200_4gpu_nvl72-tray.xml").read_text())
    )
    assert facts["nvlink_domain"] == {
        "cluster_uuid": "00000001-0000-0000-0000-000000000001",
        "clique_id": 2,
    }
    card = facts["cards"][0]
    assert card["fabric"]["health"]["summary"] == "Healthy"
    assert card["fabric"]["health"]["bandwidth"] == "Full"
    assert card["fabric"]["health"]["route_unhealthy"] is False
    assert card["fabric"]["health"]["incorrect_configuration"] is None
    assert card["platform"]["tray_index"] == 4
    assert card["platform"]["peer_type"] == "Switch Connected"
    assert sorted(c["platform"]["module_id"] for c in facts["cards"]) == [1, 2, 3, 4]
    assert card["compute_capability"] == "10.0"


def test_gb300_says_none_where_gb200_says_na_and_both_read_as_no_misconfiguration(hardware_dir):
    smi = parse_smi_xml((hardware_dir / "nvidia-smi-q-x_gb300_4gpu_nvl72-tray.xml").read_text())
    assert smi["cards"][0]["fabric"]["health"]["incorrect_configuration"] is None
    assert smi["cards"][0]["pci_bus_id"].startswith("00000008:")
    assert _facts(smi)["nvlink_domain"]["clique_id"] == 32766


def test_the_570_schema_has_fabric_health_without_a_summary(hardware_dir):
    smi = parse_smi_xml((hardware_dir / "nvidia-smi-q-x_a100-sxm4-40gb_1gpu_nomig.xml").read_text())
    # state N/A on this PCIe-less VM: no fabric at all, whatever the schema.
    assert smi["cards"][0]["fabric"] is None
    assert smi["driver_version"] == "570.148.08"


def test_b200_health_summary_is_read_while_bandwidth_is_na(hardware_dir):
    smi = parse_smi_xml((hardware_dir / "nvidia-smi-q-x_b200_8gpu_hgx.xml").read_text())
    health = smi["cards"][0]["fabric"]["health"]
    assert (health["summary"], health["bandwidth"], health["access_timeout_recovery"]) == (
        "Healthy",
        None,
        False,
    )


def test_mig_devices_without_uuid_take_their_profile_from_sms_and_memory(hardware_dir):
    smi = parse_smi_xml(
        (hardware_dir / "nvidia-smi-q-x_a100-sxm4-40gb_mig-2x3g.20gb.xml").read_text()
    )
    facts = _facts(smi)
    assert [(g["id"], g["label"], g["class"], g["uuid"]) for g in facts["gpus"]] == [
        (1000, "0/mig0", "a100-40g-mig-3g.20gb", None),
        (1001, "0/mig1", "a100-40g-mig-3g.20gb", None),
    ]
    assert all(g["utilization_pct"] is None for g in facts["gpus"])
    assert [g["memory_mib"] for g in facts["gpus"]] == [19968, 19968]


def test_mig_devices_are_joined_with_nvidia_smi_l_for_uuid_and_profile(hardware_dir):
    smi = parse_smi_xml(
        (hardware_dir / "nvidia-smi-q-x_a100-sxm4-80gb_mig-4x1g.20gb.xml").read_text()
    )
    listing = parse_smi_list(
        (hardware_dir / "nvidia-smi-L_a100-sxm4-80gb_4gpu_gpu0-mig-4x1g.20gb.txt").read_text()
    )
    facts = _facts(smi, listing)
    assert facts["cards"][0]["uuid"] == "GPU-513536b6-7d19-9063-b049-1e69664bb298"
    gpus = facts["gpus"]
    assert [g["label"] for g in gpus] == ["0/mig0", "0/mig1", "0/mig2", "0/mig3"]
    assert gpus[0]["uuid"] == "MIG-ce861fb0-a248-58ce-a9a8-f9adbc22a66a"
    assert {g["class"] for g in gpus} == {"a100-80g-mig-1g.20gb"}
    assert [g["gpu_instance_id"] for g in gpus] == [3, 4, 5, 6]


def test_the_xml_path_and_the_l_path_agree_on_cards_and_mig_instances(hardware_dir):
    xml = parse_smi_xml(
        (hardware_dir / "nvidia-smi-q-x_a100-sxm4-80gb_mig-4x1g.20gb.xml").read_text()
    )
    listing = parse_smi_list(
        (hardware_dir / "nvidia-smi-L_a100-sxm4-80gb_4gpu_gpu0-mig-4x1g.20gb.txt").read_text()
    )
    from_xml = _facts(xml, listing)
    from_list = _facts(None, listing)
    for key in ("id", "label", "uuid", "class", "mig_profile", "card_index"):
        assert [g[key] for g in from_xml["gpus"]] == [g[key] for g in from_list["gpus"]][:4]
    assert from_xml["cards"][0]["name"] == from_list["cards"][0]["name"]


def test_the_h100_xml_and_the_h100_list_agree_on_names_classes_and_indices(hardware_dir):
    xml = _facts(
        parse_smi_xml((hardware_dir / "nvidia-smi-q-x_h100-80gb-hbm3_8gpu_hgx.xml").read_text())
    )
    listed = _facts(
        None,
        parse_smi_list((hardware_dir / "nvidia-smi-L_h100-80gb-hbm3_8gpu_no-mig.txt").read_text()),
    )
    assert [(c["index"], c["name"], c["class"]) for c in xml["cards"]] == [
        (c["index"], c["name"], c["class"]) for c in listed["cards"]
    ]
    assert listed["cards"][7]["uuid"] == "GPU-c674bee4-9599-7385-18a5-ee64430a859a"


def test_a_node_with_only_gpu_0_in_mig_mode_shows_instances_and_whole_cards(hardware_dir):
    listing = parse_smi_list(
        (hardware_dir / "nvidia-smi-L_a100-sxm4-80gb_4gpu_gpu0-mig-4x1g.20gb.txt").read_text()
    )
    facts = _facts(None, listing)
    assert [g["label"] for g in facts["gpus"]] == [
        "0/mig0",
        "0/mig1",
        "0/mig2",
        "0/mig3",
        "1",
        "2",
        "3",
    ]
    assert [g["id"] for g in facts["gpus"]] == [1000, 1001, 1002, 1003, 1, 2, 3]
    assert facts["gpus"][4]["mig_profile"] is None


@pytest.mark.parametrize(
    ("filename", "profiles"),
    [
        ("nvidia-smi-L_a100-sxm4-80gb_1gpu_mig-7x1g.10gb.txt", ["1g.10gb"] * 7),
        (
            "nvidia-smi-L_h100-80gb-hbm3_mig-4-instances.txt",
            ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"],
        ),
        (
            "nvidia-smi-L_h200_mig-5-instances-with-ci-profiles.txt",
            ["1c.3g.71gb", "2c.3g.71gb", "2g.35gb", "1g.18gb", "1g.18gb"],
        ),
    ],
)
def test_every_mig_listing_gives_its_profiles_in_order(hardware_dir, filename, profiles):
    listing = parse_smi_list((hardware_dir / filename).read_text())
    assert [m["profile"] for m in listing[0]["migs"]] == profiles
    assert [m["index"] for m in listing[0]["migs"]] == list(range(len(profiles)))
    assert all(m["uuid"].startswith("MIG-") for m in listing[0]["migs"])


def test_compute_instance_profiles_keep_the_card_class_in_their_label(hardware_dir):
    listing = parse_smi_list(
        (hardware_dir / "nvidia-smi-L_h200_mig-5-instances-with-ci-profiles.txt").read_text()
    )
    facts = _facts(None, listing)
    assert facts["gpus"][0]["class"] == "h200-141g-mig-1c.3g.71gb"
    assert facts["gpus"][0]["memory_mib"] == 71 * 1024


def test_the_text_query_of_a_mig_h100_infers_each_instance_profile(hardware_dir):
    smi = parse_smi_text(
        (hardware_dir / "nvidia-smi-q-text_h100-80gb-hbm3_mig-enabled.txt").read_text()
    )
    facts = _facts(smi)
    assert smi["driver_version"] == "590.48.01"
    assert [g["mig_profile"] for g in facts["gpus"]] == ["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"]
    assert [g["gpu_instance_id"] for g in facts["gpus"]] == [2, 3, 9, 10]
    # The same machine's -L names the same profiles.
    listing = parse_smi_list(
        (hardware_dir / "nvidia-smi-L_h100-80gb-hbm3_mig-4-instances.txt").read_text()
    )
    assert [m["profile"] for m in listing[0]["migs"]] == [g["mig_profile"] for g in facts["gpus"]]
    assert facts["cards"][0]["fabric"]["verdict"] == "local"


def test_the_535_text_query_has_fabric_state_and_status_only(hardware_dir):
    smi = parse_smi_text(
        (hardware_dir / "nvidia-smi-q-text_h100-80gb-hbm3_8gpu_driver535.txt").read_text()
    )
    assert len(smi["cards"]) == 8
    fabric = smi["cards"][0]["fabric"]
    assert (fabric["state"], fabric["status"], fabric["clique_id"], fabric["cluster_uuid"]) == (
        "Completed",
        "Success",
        None,
        None,
    )
    assert smi["cards"][0]["uuid"] == "GPU-566e6f65-c38e-b12f-4824-6944218668b9"
    assert _facts(smi)["nvlink_domain"] is None


def test_completed_with_insufficient_resources_is_not_joined(hardware_dir):
    fabric = parse_fabric_text(
        (hardware_dir / "nvidia-smi-q-text_fabric-snippet_insufficient-resources.txt").read_text()
    )
    assert (fabric["state"], fabric["status"]) == ("Completed", "Insufficient Resources")
    assert fabric_verdict(fabric) == "not-joined"
    assert nvlink_domain([fabric]) is None


def test_an_unhealthy_summary_with_full_bandwidth_is_unhealthy(hardware_dir):
    fabric = parse_fabric_text(
        (hardware_dir / "nvidia-smi-q-text_fabric-snippet_gb200_unhealthy.txt").read_text()
    )
    assert (fabric["health"]["summary"], fabric["health"]["bandwidth"]) == ("Unhealthy", "Full")
    assert fabric["clique_id"] == 2
    assert fabric_verdict(fabric) == "unhealthy"
    assert nvlink_domain([fabric, fabric]) == {
        "cluster_uuid": "dc6e40c4-d722-4357-9ba6-5291dd461278",
        "clique_id": 2,
    }


def test_the_query_gpu_csv_reads_bracketed_and_bare_na_alike(hardware_dir):
    cards = parse_query_gpu_csv(
        (
            hardware_dir / "nvidia-smi-query-gpu-csv_h100-80gb-hbm3_1gpu-vm_with-fabric-fields.csv"
        ).read_text()
    )
    card = cards[0]
    assert (card["name"], card["memory_mib"], card["compute_capability"]) == (
        "NVIDIA H100 80GB HBM3",
        81559,
        "9.0",
    )
    assert card["fabric"]["status"] == "Success"
    assert card["fabric"]["health"]["summary"] is None
    assert fabric_verdict(card["fabric"]) == "local"
    assert card["power_w"] == pytest.approx(69.85)


def test_broken_xml_is_refused_with_a_sentence():
    with pytest.raises(SmiParseError, match="not XML"):
        parse_smi_xml("<nvidia_smi_log><gpu>")


def test_class_labels_use_the_size_the_card_is_sold_with():
    assert card_class("NVIDIA GB200", 189471) == "gb200-186g"
    assert card_class("NVIDIA H200", 143771) == "h200-141g"
    assert card_class("NVIDIA L40S", 46068) == "l40s-48g"
    assert card_class("NVIDIA H100 80GB HBM3", 81559) == "h100-80g"
    assert compute_capability("NVIDIA L40S") == "8.9"
    assert mig_profile("NVIDIA A100-SXM4-80GB", 14, 19968) == "1g.20gb"


def test_a_listing_joins_cards_by_uuid_before_index():
    cards = [
        {
            "index": 0,
            "name": "NVIDIA A100-SXM4-80GB",
            "uuid": "GPU-b",
            "migs": [],
            "memory_mib": 81920,
        }
    ]
    listing = [
        {"index": 0, "name": "x", "uuid": "GPU-a", "migs": []},
        {
            "index": 1,
            "name": "x",
            "uuid": "GPU-b",
            "migs": [{"index": 0, "profile": "7g.80gb", "uuid": "MIG-1"}],
        },
    ]
    joined = join_listing(cards, listing)
    assert joined[0]["migs"][0]["uuid"] == "MIG-1"


def test_processes_on_a_mig_card_land_on_their_instance(tmp_path):
    from llmgw_agent.sim.profiles import write_profile

    capture = write_profile("a100-mig", tmp_path / "a100")
    xml = (capture / "nvidia-smi-q-x.xml").read_text()
    process = (
        "<processes>\n\t\t\t<process_info>\n\t\t\t\t<gpu_instance_id>5</gpu_instance_id>\n"
        "\t\t\t\t<compute_instance_id>0</compute_instance_id>\n\t\t\t\t<pid>4242</pid>\n"
        "\t\t\t\t<type>C</type>\n\t\t\t\t<process_name>python3</process_name>\n"
        "\t\t\t\t<used_memory>17000 MiB</used_memory>\n\t\t\t</process_info>\n\t\t</processes>"
    )
    xml = xml.replace("<processes>\n\t\t</processes>", process, 1)
    smi = parse_smi_xml(xml)
    listing = parse_smi_list((capture / "nvidia-smi-L.txt").read_text())
    gpus = {g["label"]: g for g in _facts(smi, listing)["gpus"]}
    assert gpus["0/mig1"]["processes"] == [{"pid": 4242, "name": "python3", "used_mib": 17000}]
    assert gpus["0/mig0"]["processes"] == []


def test_a_reading_with_non_ascii_or_four_hundred_digits_is_no_reading():
    from llmgw_agent.discover.fields import number, whole

    assert number("19968 MiB") == 19968.0 and whole("3.97 W") == 4
    assert number("\u0661\u0669\u0669\u0666\u0668 MiB") is None  # Arabic-Indic 19968
    assert whole("9" * 400) is None  # infinite as a float: no reading, never an exception
