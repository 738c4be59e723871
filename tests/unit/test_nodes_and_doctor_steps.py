"""What the `nodes` and `doctor` steps say, from the values they are given (no fleet)."""

from __future__ import annotations

import pytest
from rich.console import Console

from llmgw_core.errors import LlmgwError
from llmgw_core.script.steps.doctor import checks_of
from llmgw_core.script.steps.nodes import few_names, render_nodes


def test_five_names_are_shown_and_the_rest_counted():
    names = [f"gb200-r1-t{i:02d}" for i in range(1, 9)]
    assert few_names(names) == (
        "gb200-r1-t01, gb200-r1-t02, gb200-r1-t03, gb200-r1-t04, gb200-r1-t05 and 3 more"
    )
    assert few_names(names[:2]) == "gb200-r1-t01, gb200-r1-t02"


def test_a_node_row_names_its_nvlink_domain_as_the_fleet_screen_does():
    row = {
        "name": "gb200-r1-t01",
        "state": "ready",
        "reason": None,
        "gpus": 4,
        "classes": ["gb200-186g"],
        "fabrics": [],
        "nvlink_domain": {
            "cluster_uuid": "4f2c9a1e-7b3d-4c55-9e61-0a8d2b7c3f10",
            "clique_id": 32766,
        },
        "agent_version": "0.1.0",
    }
    console = Console(width=120, record=True)
    console.print(render_nodes({"counts": {"ready": 1}, "nodes": [row]}))
    assert "4f2c9a1e/32766" in console.export_text()


def test_a_doctor_answer_without_checks_is_refused_with_a_sentence():
    with pytest.raises(LlmgwError, match="no list of checks"):
        checks_of({"status": "fine"})


def test_a_doctor_check_without_a_fix_says_an_empty_fix():
    (check,) = checks_of({"checks": [{"check": "imex", "status": "warn", "message": "down"}]})
    assert check == {"check": "imex", "status": "warn", "message": "down", "fix": ""}
