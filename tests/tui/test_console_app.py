"""`LlmgwApp` keeps `ConsoleApp`, the contract screens reach the app through, for mypy and at
run time; and the contract names exactly what the screens reach of the app."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from textual.signal import Signal
from type_check import run_mypy

from llmgw_tui.contract import ConsoleApp

REPO_ROOT = Path(__file__).resolve().parents[2]
CONSOLE = REPO_ROOT / "llmgw_tui"

CHECKED = """\
from textual.signal import Signal

from llmgw_core.views.fleet import FleetSummary
from llmgw_tui.app import LlmgwApp
from llmgw_tui.contract import ConsoleApp
from llmgw_tui.feed.protocol import FleetFeed


def given_to_a_screen(app: LlmgwApp) -> ConsoleApp:
    return app


class WithoutFailures:
    feed: FleetFeed
    fleet: FleetSummary | None
    fleet_changed: Signal[FleetSummary]


class WithAnotherSignal(WithoutFailures):
    fleet_failed: Signal[int]


def without_failures(app: WithoutFailures) -> ConsoleApp:
    return app  # refused: no fleet_failed


def with_another_signal(app: WithAnotherSignal) -> ConsoleApp:
    return app  # refused: fleet_failed publishes no sentence
"""


def _members(protocol: type) -> set[str]:
    """What a protocol declares (`typing.get_protocol_members` from Python 3.13)."""
    declared = set(vars(protocol)) | set(getattr(protocol, "__annotations__", {}))
    return {name for name in declared if not name.startswith("_")}


def test_mypy_takes_the_app_as_the_contract_and_refuses_an_app_short_of_it(tmp_path: Path):
    checked = tmp_path / "checked.py"
    checked.write_text(CHECKED)
    done = run_mypy(checked, tmp_path / "cache")
    refused = {n for n, line in enumerate(CHECKED.splitlines(), 1) if "# refused" in line}
    errors = re.findall(r"^\S*checked\.py:(\d+): error: ", done.stdout, re.MULTILINE)
    assert sorted(int(line) for line in errors) == sorted(refused), done.stdout + done.stderr


def test_an_app_has_every_member_the_contract_names(make_app):
    app = make_app()
    missing = sorted(name for name in _members(ConsoleApp) if not hasattr(app, name))
    assert missing == []
    assert isinstance(app, ConsoleApp)
    assert app.fleet is None  # until the first snapshot
    assert isinstance(app.fleet_changed, Signal) and isinstance(app.fleet_failed, Signal)
    assert app.console_app is app


def test_the_contract_names_exactly_what_the_screens_reach_of_the_app():
    reached: set[str] = set()
    for path in sorted(CONSOLE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Attribute)
                and node.value.attr == "console_app"
            ):
                reached.add(node.attr)
    assert reached == _members(ConsoleApp) == {"feed", "fleet", "fleet_changed", "fleet_failed"}
