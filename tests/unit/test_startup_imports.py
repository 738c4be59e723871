"""What a headless script loads: only the steps it names, and nothing of SSH or the console for a plan.

Each script runs through `llmgw-tui`'s own `main` in a fresh interpreter,
which then reports the packages it had loaded, so the rule holds for the
whole path a user takes, not for one module at a time.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

_RUN_AND_LIST = """
import json, sys
from llmgw_tui.cli import main
code = main(sys.argv[1:])
print(json.dumps({"exit": code, "modules": sorted(sys.modules)}), file=sys.stderr)
"""

PLAN_SCRIPT = """
fleet:
  - {name: dgx, count: 2, gpu: h100-80g, gpus: 8, fabric: ib-a}
steps:
  - plan: {model: catalog:meta-llama/Llama-3.3-70B-Instruct, context: 32768}
"""


def _run_cli(tmp_path: Path, script: str, *flags: str) -> tuple[int, list[str], str]:
    path = tmp_path / "script.yaml"
    path.write_text(script, encoding="utf-8")
    done = subprocess.run(
        [sys.executable, "-c", _RUN_AND_LIST, "--run", str(path), *flags],
        capture_output=True,
        text=True,
        check=False,
        cwd=tmp_path,
        timeout=120,
    )
    report = json.loads(done.stderr.strip().splitlines()[-1])
    return report["exit"], report["modules"], done.stdout


def _loaded(modules: list[str], package: str) -> bool:
    return any(m == package or m.startswith(package + ".") for m in modules)


def test_a_plan_against_a_described_fleet_never_loads_textual_ssh_or_the_hub(tmp_path):
    code, modules, out = _run_cli(tmp_path, PLAN_SCRIPT, "--json")
    line = json.loads(out.splitlines()[0])
    assert code == 0 and line["step"] == "plan" and line["ok"] is True
    for package in ("textual", "asyncssh", "huggingface_hub", "httpx", "gguf", "llmgw_tui.app"):
        assert not _loaded(modules, package), f"a plan script loaded {package}"


def test_a_plan_printed_for_people_still_never_loads_textual_or_asyncssh(tmp_path):
    code, modules, out = _run_cli(tmp_path, PLAN_SCRIPT)
    assert code == 0 and "Llama-3.3-70B-Instruct" in out
    assert not _loaded(modules, "textual") and not _loaded(modules, "asyncssh")


def test_a_script_loads_only_the_steps_it_names(tmp_path):
    code, modules, _ = _run_cli(tmp_path, PLAN_SCRIPT, "--json")
    steps = {m.rsplit(".", 1)[1] for m in modules if m.startswith("llmgw_core.script.steps.")}
    assert code == 0
    assert steps == {"plan"}


def test_a_misspelt_step_still_lists_every_known_step(tmp_path):
    code, _, out = _run_cli(tmp_path, "steps:\n  - nodse: {}\n", "--json")
    error = json.loads(out)["error"]
    assert code == 2
    assert "line 2: unknown step 'nodse'" in error
    for name in ("nodes", "plan", "serve", "fabric-test", "estimate"):
        assert name in error


def test_the_console_loads_only_its_first_screen_and_no_pydantic_or_ssh_before_drawing():
    code = "import json, sys; import llmgw_tui.app; print(json.dumps(sorted(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=120
    )
    modules = json.loads(done.stdout)
    for package in ("pydantic", "asyncssh", "huggingface_hub", "httpx", "llmgw_core.fleet"):
        assert not _loaded(modules, package), f"the console's start loaded {package}"
    # Loaded with the first snapshot, the first `:` or palette, or a live fleet: not to draw.
    for module in ("llmgw_core.views", "llmgw_tui.feed", "llmgw_tui.commands"):
        assert not _loaded(modules, module), f"the console's start loaded {module}"
    screens = {m.rsplit(".", 1)[1] for m in modules if m.startswith("llmgw_tui.screens.")}
    assert screens == {"fleet"}
