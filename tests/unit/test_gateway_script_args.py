"""A gateway script with a wrong argument is refused, with its line, before anything runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmgw_core.script.runner import run_script


def _refusal(tmp_path: Path, capsys: pytest.CaptureFixture[str], step_line: str) -> str:
    script = tmp_path / "script.yaml"
    script.write_text(f"steps:\n  - {step_line}\n", encoding="utf-8")
    code = run_script(str(script), as_json=True, inventory=None, demo=False)
    (line,) = [json.loads(text) for text in capsys.readouterr().out.splitlines() if text]
    assert code == 2 and line["ok"] is False and line["step"] is None
    return line["error"]


def test_an_unknown_policy_is_refused_naming_the_three(tmp_path, capsys):
    error = _refusal(tmp_path, capsys, "gateway: {name: front, policy: fastest}")
    assert "line 2: step 'gateway': policy" in error
    assert "'round_robin', 'cache_aware' or 'power_of_two'" in error


def test_a_key_variable_that_is_not_a_name_is_refused(tmp_path, capsys):
    error = _refusal(tmp_path, capsys, "gateway: {name: front, api_key_env: '$KEY'}")
    assert "api_key_env" in error and "environment variable's name" in error


def test_asking_a_replica_and_a_gateway_at_once_is_refused(tmp_path, capsys):
    error = _refusal(tmp_path, capsys, "ask: {replica: a, gateway: front, prompt: hi}")
    assert "give either replica or gateway" in error


def test_a_model_without_a_gateway_is_refused(tmp_path, capsys):
    error = _refusal(tmp_path, capsys, "bench: {replica: a, model: llama}")
    assert "model is for a gateway" in error


KEY = "sk-team-0123456789abcdef"


@pytest.mark.parametrize(
    ("entry", "said"),
    [
        (
            "limits: {requests_per_s: -2}",
            "keys.0.limits.requests_per_s Input should be greater than 0",
        ),
        (
            "limits: {budget_tokens: .nan}",
            "keys.0.limits.budget_tokens Input should be a valid integer",
        ),
        (
            "limits: {requests_per_s: .inf}",
            "keys.0.limits.requests_per_s Input should be a finite number",
        ),
        (
            "limits: {concurrent: 0}",
            "keys.0.limits.concurrent Input should be greater than or equal to 1",
        ),
        (
            "limits: {tokens_per_min: '100'}",
            "keys.0.limits.tokens_per_min Input should be a valid integer",
        ),
        (
            "limits: {budget_tokens: 9, budget_per: week}",
            "keys.0.limits.budget_per Input should be 'day' or 'month'",
        ),
        ("limits: {concurrent: true}", "keys.0.limits.concurrent Input should be a valid integer"),
        ("limits: {priority: high}", "keys.0.limits.priority Extra inputs are not permitted"),
        (
            "limits: [1, 2]",
            "keys.0.limits Input should be a valid dictionary or instance of KeyLimits",
        ),
        ("weight: 0", "keys.0.weight Input should be greater than 0"),
        ("weight: .inf", "keys.0.weight Input should be a finite number"),
        ("weight: 5000", "keys.0.weight Input should be less than or equal to 1000"),
        ("priority: urgent", "keys.0.priority Input should be 'high', 'normal' or 'low'"),
    ],
)
def test_a_keys_files_bad_entry_ends_in_one_sentence_before_any_node_is_reached(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], entry: str, said: str
):
    keys = tmp_path / "keys.yaml"
    keys.write_text(f"keys:\n  - {{id: team, key: {KEY}, {entry}}}\n")
    keys.chmod(0o600)
    script = tmp_path / "script.yaml"
    # An inventory that names a node nobody can reach: the keys file is read first.
    inventory = tmp_path / "inventory.yaml"
    inventory.write_text("nodes:\n  - {name: far-01, host: 192.0.2.1}\n")
    script.write_text(f"steps:\n  - gateway: {{name: front, keys_file: {keys}, fair: {{}}}}\n")
    code = run_script(str(script), as_json=True, inventory=str(inventory), demo=False)
    lines = [json.loads(text) for text in capsys.readouterr().out.splitlines() if text]
    assert code == 2 and len(lines) == 1 and lines[0]["ok"] is False, lines
    assert lines[0]["error"] == f"keys file {keys}: {said}"
    assert KEY not in json.dumps(lines)


@pytest.mark.parametrize(
    ("fair", "said"),
    [
        ("{queue: 0}", "fair.queue"),
        ("{queue_timeout_s: -1}", "fair.queue_timeout_s"),
        ("{waiting: 1.5}", "fair.waiting"),
        ("{burst: 3}", "fair.burst"),
        ("yes", "fair"),
    ],
)
def test_a_bad_fair_is_refused_with_its_line(tmp_path, capsys, fair: str, said: str):
    error = _refusal(tmp_path, capsys, f"gateway: {{name: front, fair: {fair}}}")
    assert "line 2: step 'gateway': " + said in error
