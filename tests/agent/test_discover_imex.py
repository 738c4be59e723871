"""`nvidia-imex-ctl -N` against every real capture, old and new formats."""

from __future__ import annotations

import pytest

from llmgw_agent.discover.imex import imex_channels, parse_imex_nodes


@pytest.mark.parametrize(
    ("filename", "nodes", "first", "version"),
    [
        ("nvidia-imex-ctl-N_gh200_1node_domain-up.txt", 1, "10.136.206.48", None),
        ("nvidia-imex-ctl-N_gh200_2node_domain-up.txt", 2, "10.136.206.47", None),
        (
            "nvidia-imex-ctl-N_p6e-gb200_18node_nvl72_domain-up_AWSDOC.txt",
            18,
            "172.31.48.81",
            "570.172",
        ),
    ],
)
def test_every_imex_capture_gives_the_domain_state_and_its_nodes(
    hardware_dir, filename, nodes, first, version
):
    imex = parse_imex_nodes((hardware_dir / filename).read_text())
    assert imex["state"] == "UP"
    assert len(imex["nodes"]) == nodes
    assert imex["nodes"][0]["address"] == first
    assert {n["state"] for n in imex["nodes"]} == {"READY"}
    assert imex["nodes"][0]["version"] == version
    assert imex["connectivity_ok"] is True


def test_double_digit_node_indices_are_read(hardware_dir):
    imex = parse_imex_nodes(
        (hardware_dir / "nvidia-imex-ctl-N_p6e-gb200_18node_nvl72_domain-up_AWSDOC.txt").read_text()
    )
    assert [n["index"] for n in imex["nodes"]] == list(range(18))
    assert imex["nodes"][17]["address"] == "172.31.56.47"


def test_a_disconnected_cell_or_a_down_domain_is_reported():
    text = (
        "Nodes:\nNode #0   - 10.0.0.1   - READY\nNode #1   - 10.0.0.2   - UNAVAILABLE\n\n"
        " Nodes From\\To  0  1\n       0        C  D\n       1        N  C\nDomain State: DOWN\n"
    )
    imex = parse_imex_nodes(text)
    assert imex["state"] == "DOWN"
    assert imex["nodes"][1]["state"] == "UNAVAILABLE"
    assert imex["connectivity_ok"] is False


def test_wrapper_ready_lines_are_not_nodes():
    imex = parse_imex_nodes(
        "READY\nNodes:\nNode #0   - 10.0.0.1   - READY\nDomain State: UP\nREADY\n"
    )
    assert len(imex["nodes"]) == 1


def test_the_channel_device_is_found_under_a_capture_root(tmp_path):
    assert imex_channels(tmp_path) == []
    (tmp_path / "dev" / "nvidia-caps-imex-channels").mkdir(parents=True)
    (tmp_path / "dev" / "nvidia-caps-imex-channels" / "channel0").write_text("")
    assert imex_channels(tmp_path) == ["channel0"]
