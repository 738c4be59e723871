"""An agent's facts with a hostile value anywhere: refused in a sentence, or read and drawn.

Real facts (the agent's discovery on each simulated hardware profile, built
from real captures) get one value at any depth replaced by a hostile one:
NaN, an infinity, a huge or negative number, a wrong type, a deep nesting.
`parse_facts` must refuse it in one sentence naming the field, or take it —
and then the planner's node, the fleet summary and the node page must be
built from it without an exception.
"""

from __future__ import annotations

import copy
import json
import math
import os
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from json_paths import json_paths, put

from llmgw_core.errors import BadInput
from llmgw_core.facts import parse_facts
from llmgw_core.fleet.state import NodeState
from llmgw_core.planner.pools_live import live_node, planner_fleet
from llmgw_core.views.node import node_detail, node_summary

PROFILES = ("hgx-h100", "gb200-tray", "a100-mig", "l40s", "cpu")
HOSTILE: list[Any] = [
    math.nan, math.inf, -math.inf, 1e308, 10**400, -(2**70), -1, 0, "", "x", True, None,
    [], {}, [1, "a"], {"a": [1]},
]  # fmt: skip


@pytest.fixture(scope="module")
def real_facts(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    from llmgw_agent.discover import collect_facts
    from llmgw_agent.sim.profiles import PROFILES as KNOWN
    from llmgw_agent.sim.profiles import write_profile

    root = tmp_path_factory.mktemp("facts-fuzz")
    os.environ.setdefault("LLMGW_AGENT_STATE", str(root / "state"))
    found = {}
    for kind in PROFILES:
        if kind in KNOWN:
            found[kind] = json.loads(
                json.dumps(collect_facts(str(write_profile(kind, root / kind))))
            )
    return found


@settings(
    max_examples=250,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    kind=st.integers(min_value=0),
    pick=st.integers(min_value=0),
    value=st.sampled_from(range(len(HOSTILE))),
)
def test_hostile_facts_are_refused_in_a_sentence_or_read_and_drawn(real_facts, kind, pick, value):  # fmt: skip
    raw = copy.deepcopy(list(real_facts.values())[kind % len(real_facts)])
    paths = json_paths(raw, items=4)
    put(raw, paths[pick % len(paths)], copy.deepcopy(HOSTILE[value]))
    try:
        facts = parse_facts(raw, "n1")
    except BadInput as exc:
        assert exc.sentence().startswith("n1 sent facts") and "\n" not in exc.sentence()
        return
    state = NodeState(name="n1", state="ready", facts=facts)
    view = live_node("n1", state)
    planner_fleet([view]).pools()
    summary = node_summary("n1", state.state, None, facts)
    node_detail(summary, facts)
