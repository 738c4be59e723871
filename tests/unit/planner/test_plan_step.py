"""The `plan` step through the real runner, in process: arguments, failures, the tables."""

from __future__ import annotations

import json
from pathlib import Path

from rich.console import Console

from llmgw_core.script.runner import run_script
from llmgw_core.script.steps.plan_render import render

FLEET = """
fleet:
  - {name: dgx, count: 2, gpu: h100-80g, gpus: 8, fabric: ib-a}
  - {name: cpu1, gpus: 0, memory_gib: 512}
"""


def _run(tmp_path: Path, capsys, steps: str, fleet: str = FLEET) -> tuple[int, list[dict]]:
    script = tmp_path / "plan.yaml"
    script.write_text(fleet + "steps:\n" + steps, encoding="utf-8")
    code = run_script(str(script), as_json=True, inventory=None, demo=False)
    return code, [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_precision_plans_only_the_files_of_that_precision(tmp_path, capsys):
    code, lines = _run(
        tmp_path,
        capsys,
        "  - plan: {model: catalog:Qwen/Qwen2.5-14B-Instruct-GGUF, context: 8192, precision: q4_k_m}\n",
    )
    assert code == 0
    result = lines[0]["result"]
    assert [a["name"] for a in result["artifacts"]] == ["Q4_K_M"]
    assert {w["artifact"] for w in result["options"]} == {"Q4_K_M"}
    assert result["best"]["needs_download"] is True


def test_a_precision_the_model_does_not_have_is_bad_input(tmp_path, capsys):
    code, lines = _run(
        tmp_path,
        capsys,
        "  - plan: {model: catalog:meta-llama/Llama-3.1-8B-Instruct, precision: fp8}\n",
    )
    assert code == 2
    assert lines[0]["error"] == (
        "catalog:meta-llama/Llama-3.1-8B-Instruct has no fp8 files to plan: "
        "drop `format:` / `precision:` to plan every file it has"
    )


def test_the_context_defaults_to_what_the_model_was_trained_for(tmp_path, capsys):
    code, lines = _run(tmp_path, capsys, "  - plan: {model: catalog:Qwen/Qwen3-30B-A3B}\n")
    assert code == 0
    assert lines[0]["result"]["context"] == 40960
    assert lines[0]["result"]["shape"]["experts"] == 128


def test_an_unknown_catalog_model_names_the_known_ones(tmp_path, capsys):
    code, lines = _run(tmp_path, capsys, "  - plan: {model: catalog:acme/Nothing-1B}\n")
    assert code == 2
    assert lines[0]["error"].startswith(
        "the offline catalog has no model 'acme/Nothing-1B': use one of"
    )


def test_a_context_beyond_the_trained_one_is_bad_input(tmp_path, capsys):
    code, lines = _run(
        tmp_path, capsys, "  - plan: {model: catalog:Qwen/Qwen3-30B-A3B, context: 131072}\n"
    )
    assert code == 2
    assert "longer than the 40960 tokens the model was trained for" in lines[0]["error"]


def test_a_plan_that_fits_nowhere_draws_its_files_and_what_would_help(tmp_path, capsys):
    fleet = "fleet:\n  - {name: box, gpu: t4-16g, gpus: 1}\n"
    code, lines = _run(
        tmp_path,
        capsys,
        "  - plan: {model: catalog:meta-llama/Llama-3.3-70B-Instruct, context: 8192}\n",
        fleet,
    )
    assert code == 3
    console = Console(record=True, width=160)
    console.print(render(lines[0]["result"]))
    text = console.export_text()
    assert "original  131 GB  fits nowhere" in text
    assert "No file fits this fleet as it is." in text
