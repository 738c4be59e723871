"""The contract between agent and console: real agent output through the core's models.

The agent is run as a node runs it (`python3 -S -m llmgw_agent doctor --replay
DIR --facts --json`, nothing but agent/ on the path) on every simulated
profile, and what it prints must validate as `NodeFacts`.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from llmgw_agent.sim.profiles import PROFILES, write_profile
from llmgw_core.errors import BadInput
from llmgw_core.facts import NodeFacts, parse_facts

AGENT_DIR = Path(__file__).resolve().parents[2] / "agent"


def _agent_facts(capture: Path, state: Path) -> dict:
    done = subprocess.run(
        [
            sys.executable,
            "-S",
            "-m",
            "llmgw_agent",
            "doctor",
            "--replay",
            str(capture),
            "--facts",
            "--json",
        ],
        capture_output=True,
        text=True,
        env={
            "PYTHONPATH": str(AGENT_DIR),
            "LLMGW_AGENT_STATE": str(state),
            "PATH": "/usr/bin:/bin",
        },
        cwd="/",
        timeout=60,
        check=True,
    )
    return json.loads(done.stdout)


@pytest.mark.parametrize("kind", PROFILES)
def test_the_agents_facts_for_every_profile_validate_in_the_console(tmp_path, kind):
    options = {"gb200-tray": {"state": "degraded"}, "hgx-h100": {"degraded_rail": "mlx5_3"}}.get(
        kind, {}
    )
    capture = write_profile(kind, tmp_path / kind, **options)
    facts = parse_facts(_agent_facts(capture, tmp_path / "state"), kind)
    assert isinstance(facts, NodeFacts)
    assert facts.errors == ()
    assert (
        len(facts.gpus)
        == {"hgx-h100": 8, "gb200-tray": 4, "a100-mig": 6, "l40s": 4, "cpu": 0}[kind]
    )
    if kind == "a100-mig":
        mig = facts.gpus[0]
        assert (mig.id, mig.label, mig.gpu_class, mig.is_mig) == (
            1000,
            "0/mig0",
            "a100-80g-mig-3g.40gb",
            True,
        )
        assert mig.utilization_pct is None
    if kind == "gb200-tray":
        assert facts.nvlink_domain is not None
        assert facts.cards[0].fabric is not None and facts.cards[0].fabric.verdict == "degraded"
        assert facts.imex is not None and len(facts.imex.nodes) == 18


def test_facts_missing_a_required_field_are_refused_with_the_field_named(tmp_path):
    raw = _agent_facts(write_profile("l40s", tmp_path / "l40s"), tmp_path / "state")
    del raw["cards"][0]["class"]
    with pytest.raises(
        BadInput, match=r"node-7 sent facts the console cannot read: cards\.0\.class"
    ):
        parse_facts(raw, "node-7")


def test_facts_are_frozen_snapshots(tmp_path):
    facts = parse_facts(_agent_facts(write_profile("cpu", tmp_path / "cpu"), tmp_path / "state"))
    with pytest.raises(ValueError):
        facts.host.cpus = 1  # type: ignore[misc]


@pytest.mark.parametrize("value", [float("nan"), float("inf"), 10**400, 2**60])
@pytest.mark.parametrize("where", ["memory_mib", "memory_used_mib"])
def test_a_number_no_hardware_reports_is_refused_naming_the_field(tmp_path, value, where):
    raw = _agent_facts(write_profile("hgx-h100", tmp_path / "capture"), tmp_path / "state")
    raw["gpus"][0][where] = value
    with pytest.raises(BadInput) as refused:
        parse_facts(raw, node="h100-a-01")
    assert refused.value.message.startswith(
        f"h100-a-01 sent facts the console cannot read: gpus.0.{where}: "
    )
