"""Start-up: heavy imports with the collector paused, pydantic's plugin lookup off unless asked."""

from __future__ import annotations

import gc
import os
from pathlib import Path

import pytest

from llmgw_core.script.registry import load_step
from llmgw_core.startup import loading_modules
from llmgw_tui.cli import main


def test_the_collector_is_on_again_once_a_step_has_loaded():
    assert gc.isenabled()
    assert load_step("plan") is not None
    assert gc.isenabled()


def test_a_collector_the_caller_turned_off_stays_off():
    gc.disable()
    try:
        with loading_modules():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_the_collector_is_on_again_when_an_import_fails():
    with pytest.raises(ModuleNotFoundError), loading_modules():
        import llmgw_core.no_such_module  # noqa: F401
    assert gc.isenabled()


def test_the_cli_turns_pydantic_plugins_off_unless_the_user_set_the_variable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    missing = str(tmp_path / "missing.yaml")
    monkeypatch.delenv("PYDANTIC_DISABLE_PLUGINS", raising=False)
    assert main(["--run", missing]) == 2

    assert os.environ["PYDANTIC_DISABLE_PLUGINS"] == "__all__"
    monkeypatch.setenv("PYDANTIC_DISABLE_PLUGINS", "")
    assert main(["--run", missing]) == 2
    assert os.environ["PYDANTIC_DISABLE_PLUGINS"] == ""


PLUGIN_PROBE = """
import os, sys
from llmgw_tui.cli import before_any_model
before_any_model()
from pydantic import BaseModel

class Probe(BaseModel):
    cards: int

assert Probe(cards="8").cards == 8
from pydantic.plugin._schema_validator import create_schema_validator
print(os.environ["PYDANTIC_DISABLE_PLUGINS"], "importlib.metadata" in sys.modules)
"""


def run_probe(**env: str) -> str:
    import subprocess
    import sys

    child_env = {k: v for k, v in os.environ.items() if k != "PYDANTIC_DISABLE_PLUGINS"}
    done = subprocess.run(
        [sys.executable, "-c", PLUGIN_PROBE],
        env={**child_env, **env},
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return done.stdout.strip()


def test_with_plugins_off_pydantic_validates_without_importing_its_plugin_lookup():
    assert run_probe() == "__all__ False"


def test_a_user_who_turns_plugins_back_on_gets_pydantic_s_own_lookup():
    assert run_probe(PYDANTIC_DISABLE_PLUGINS="") == "True"
