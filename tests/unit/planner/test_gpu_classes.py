"""The GPU class table: the memory CUDA sees, and MIG instance labels."""

from __future__ import annotations

import pytest

from llmgw_core.errors import BadInput
from llmgw_core.planner.gpu_classes import gpu_class, known_labels, parse_mig_label


def test_an_h100_gives_cuda_the_79_19_gib_vllm_logs():
    card = gpu_class("h100-80g")
    assert card.memory_gib == 79.19
    assert card.compute_capability == 9.0
    assert card.nvlink


def test_whole_cards_are_the_frame_buffer_less_the_driver_reservation():
    # nvidia-smi -q on a GB200 tray: 189471 MiB total, 742 MiB reserved.
    assert gpu_class("gb200-186g").memory_gib == 184.31
    assert gpu_class("b200-180g").memory_gib == 178.35
    assert gpu_class("l40s-48g").memory_gib == 44.39


def test_pcie_cards_have_no_nvlink():
    for label in ("l40s-48g", "l4-24g", "t4-16g"):
        assert not gpu_class(label).nvlink, label


def test_a_mig_instance_is_a_class_of_its_own_with_the_instance_memory():
    instance = gpu_class("a100-80g-mig-3g.40gb")
    assert instance.is_mig
    assert instance.mig_profile == "3g.40gb"
    assert instance.memory_gib == 39.25
    assert instance.compute_capability == 8.0
    assert not instance.nvlink


def test_an_h100_1g_10gb_instance_has_the_9984_mib_the_card_reports():
    assert gpu_class("h100-80g-mig-1g.10gb").memory_gib == 9.75


def test_a_compute_instance_prefix_is_dropped_from_a_mig_label():
    assert parse_mig_label("h200-141g-mig-1c.3g.71gb") == ("h200-141g", "3g.71gb")
    assert gpu_class("h200-141g-mig-2c.3g.71gb") == gpu_class("h200-141g-mig-3g.71gb")


def test_an_unknown_profile_of_a_known_card_is_sized_from_its_name():
    assert gpu_class("b200-180g-mig-1g.23gb").memory_gib == pytest.approx(23 * 0.975, abs=0.01)


def test_an_unknown_class_is_refused_naming_the_known_ones():
    with pytest.raises(BadInput) as error:
        gpu_class("h900-1t")
    assert "unknown GPU class 'h900-1t'" in error.value.sentence()
    assert "h100-80g" in error.value.sentence()


def test_every_known_class_has_positive_memory_and_a_compute_capability():
    for label in known_labels():
        card = gpu_class(label)
        assert card.memory_gib > 10 and card.compute_capability >= 7.0, label
