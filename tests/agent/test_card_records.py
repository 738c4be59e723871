"""Every discovery path builds its card records in one place, so each has every key."""

from __future__ import annotations

import pytest

from llmgw_agent.discover.records import CARD_KEYS, MIG_KEYS, card_record, mig_record
from llmgw_agent.discover.smi import parse_query_gpu_csv, parse_smi_list

CSV = (
    "index, name, uuid, memory.total [MiB], memory.used [MiB]\n"
    "0, NVIDIA L40S, GPU-8f1c2d3e-0000-1111-2222-333344445555, 46068 MiB, 1 MiB\n"
)


def test_a_card_read_from_csv_has_every_key_of_the_record_and_no_migs():
    (card,) = parse_query_gpu_csv(CSV)
    assert tuple(card) == CARD_KEYS
    assert (card["name"], card["memory_mib"], card["migs"], card["fabric"]) == (
        "NVIDIA L40S",
        46068,
        [],
        None,
    )


def test_a_card_known_only_from_nvidia_smi_l_still_has_every_key():
    (listed,) = parse_smi_list("GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-0a1b2c3d-aaaa)\n")
    card = card_record(listed["index"], listed["name"], uuid=listed["uuid"])
    assert tuple(card) == CARD_KEYS
    assert card["mig_pending"] is None and card["processes"] == []


def test_a_mig_record_keeps_what_its_source_knows():
    mig = mig_record(index=0, profile="3g.40gb")
    assert tuple(mig) == MIG_KEYS
    assert (mig["profile"], mig["uuid"]) == ("3g.40gb", None)


def test_a_parser_that_misspells_a_key_is_stopped_at_once():
    with pytest.raises(TypeError, match="a card record has no key memory_total"):
        card_record(0, "NVIDIA H100", memory_total=81559)
