"""Fabric verdicts kept by the agent: recorded over the wire, reported in the facts, replaced."""

from __future__ import annotations

from pathlib import Path

from agent_process import AgentClient, agent_env

_FAILED = {
    "peer": "h100-a-02",
    "adapter": "mlx5_5",
    "rail": 5,
    "verdict": "fail",
    "ratio": 0.6,
    "measured_gbps": 240.0,
    "rated_gbps": 400.0,
    "measured_at": 1_790_000_000.0,
}


def _kept(agent: AgentClient) -> dict[tuple[str, str], dict]:
    rails = agent.request("fabric.verdicts")["result"]["rails"]
    return {(row["peer"], row["adapter"]): row for row in rails}


def test_a_recorded_failing_rail_is_in_the_facts_with_its_ratio_and_time(
    agent: AgentClient,
) -> None:
    reply = agent.request("fabric.record", {"rails": [_FAILED]})
    assert reply["result"]["recorded"] == 1
    facts = agent.request("facts")["result"]
    assert facts["rail_verdicts"] == [_FAILED]


def test_a_later_passing_test_replaces_the_failed_verdict(agent: AgentClient) -> None:
    agent.request("fabric.record", {"rails": [_FAILED]})
    passed = {**_FAILED, "verdict": "pass", "ratio": 0.97, "measured_at": 1_790_000_600.0}
    agent.request("fabric.record", {"rails": [passed]})
    assert _kept(agent) == {("h100-a-02", "mlx5_5"): passed}


def test_verdicts_outlive_the_agent_that_recorded_them(
    agent: AgentClient, state_dir: Path, tmp_path: Path
) -> None:
    agent.request("fabric.record", {"rails": [_FAILED]})
    agent.close()
    again = AgentClient(agent_env(state_dir), stderr_path=tmp_path / "again.stderr")
    try:
        assert _kept(again)[("h100-a-02", "mlx5_5")]["verdict"] == "fail"
    finally:
        again.close()


def test_a_verdict_without_a_time_is_stamped_when_recorded(agent: AgentClient) -> None:
    row = {key: value for key, value in _FAILED.items() if key != "measured_at"}
    agent.request("fabric.record", {"rails": [row]})
    assert _kept(agent)[("h100-a-02", "mlx5_5")]["measured_at"] > 1_700_000_000


def test_names_that_are_not_node_or_adapter_names_are_refused_and_nothing_is_kept(
    agent: AgentClient,
) -> None:
    for bad in (
        {**_FAILED, "adapter": "../../etc/passwd"},
        {**_FAILED, "peer": "a/b"},
        {**_FAILED, "peer": ""},
        {**_FAILED, "verdict": "great"},
        {**_FAILED, "ratio": "60%"},
        {**_FAILED, "ratio": True},
        {**_FAILED, "rail": -1},
        "mlx5_5",
    ):
        reply = agent.request("fabric.record", {"rails": [_FAILED, bad]})
        assert reply["error"]["code"] == "bad_args", bad
    assert agent.request("fabric.record", {})["error"]["code"] == "bad_args"
    assert _kept(agent) == {}
