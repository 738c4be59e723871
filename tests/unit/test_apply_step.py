"""`apply`'s document, inline or in a file: every mistake one sentence and exit 2, nothing run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from llmgw_core.script.runner import run_script

MODEL = "catalog:meta-llama/Llama-3.1-8B-Instruct"


def _run(tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str) -> tuple[int, str]:
    script = tmp_path / "script.yaml"
    script.write_text(text, encoding="utf-8")
    code = run_script(str(script), as_json=True, inventory=None, demo=False)
    out, _ = capsys.readouterr()
    lines = [json.loads(line) for line in out.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0]["ok"] is False
    return code, lines[0]["error"]


@pytest.mark.parametrize(
    ("service", "said"),
    [
        ("{name: chat}", "service.model is required"),
        (f"{{name: chat, model: {MODEL}, contxt: 8192}}", "service.contxt is not a known argument"),
        (
            f"{{name: chat, model: {MODEL}, replicas: -1}}",
            "service.replicas must be from 0 to 64",
        ),
        (f"{{name: chat, model: {MODEL}, replicas: yes}}", "replicas is true, not a number"),
        (f"{{name: 'a/b', model: {MODEL}}}", "service.name String should match pattern"),
        (f"{{name: chat, model: {MODEL}, env: {{HF_TOKEN: x}}}}", None),
    ],
)
def test_an_inline_document_is_checked_before_anything_runs(tmp_path, capsys, service, said):
    code, error = _run(tmp_path, capsys, f"steps:\n  - apply: {{service: {service}}}\n")
    assert code == 2
    if said is not None:
        assert said in error, error


def test_neither_or_both_of_service_and_file_is_refused(tmp_path, capsys):
    code, error = _run(tmp_path, capsys, "steps:\n  - apply: {dry_run: true}\n")
    assert code == 2 and "give either service (the document) or file" in error


@pytest.mark.parametrize(
    ("text", "said"),
    [
        (None, "the service file"),
        ("steps: []\n", "is not a service document: its top is one key, `service:`"),
        ("service: {name: chat}\n", "service: model is required"),
        ("service: [\n", "not valid YAML"),
        (f"service: {{name: chat, model: {MODEL}, replicas: 2, replicas: 3}}\n", "given twice"),
    ],
)
def test_a_service_file_that_is_missing_or_wrong_is_one_sentence(tmp_path, capsys, text, said):
    if text is not None:
        (tmp_path / "chat.yaml").write_text(text, encoding="utf-8")
    code, error = _run(tmp_path, capsys, "steps:\n  - apply: {file: chat.yaml}\n")
    assert code == 2, error
    assert said in error, error


@pytest.mark.parametrize(
    ("args", "said"),
    [
        ("{}", "give either service (its name or its document) or file"),
        ("{service: 'not a name'}", "service must be a service's name or its document"),
        ("{service: chat, file: chat.yaml}", "give either service"),
        ("{service: chat, duration_s: 0}", "duration_s Input should be greater than 0"),
        ("{service: chat, interval_s: 0.01}", "interval_s Input should be greater than or equal"),
        (
            f"{{service: {{name: chat, model: {MODEL}, replicas: {{min: 2, max: 1}}}}}}",
            "min (2) is more than max (1)",
        ),
    ],
)
def test_keeps_arguments_are_checked_before_anything_runs(tmp_path, capsys, args, said):
    code, error = _run(tmp_path, capsys, f"steps:\n  - keep: {args}\n")
    assert code == 2
    assert said in error, error


def test_keep_given_a_missing_file_says_so_before_any_connection(tmp_path, capsys):
    code, error = _run(tmp_path, capsys, "steps:\n  - keep: {file: gone.yaml}\n")
    assert code == 2 and "the service file" in error and "gone.yaml" in error
