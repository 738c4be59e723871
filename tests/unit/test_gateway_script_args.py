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
