"""The console's contract: what a screen reaches of the app and the feed is declared, and checked.

Screens reach the app through `Guarded.console_app` (the `ConsoleApp` protocol) and
the feed through the `FleetFeed` protocol, which names every call a screen
makes. mypy checks `llmgw_tui/` against both: a screen that reaches for an
attribute neither declares fails here, as does an `attr-defined` ignore or a
`getattr` probe standing in for a declaration.
"""

from __future__ import annotations

import re
from pathlib import Path

from type_check import run_mypy

CONSOLE = Path(__file__).resolve().parents[2] / "llmgw_tui"


def test_mypy_finds_nothing_a_screen_reaches_that_the_contract_does_not_declare(tmp_path: Path):
    done = run_mypy(CONSOLE, tmp_path / "cache")
    assert done.returncode == 0, done.stdout + done.stderr


def test_no_screen_silences_or_probes_what_it_reaches():
    probes = re.compile(
        r"type: ignore\[attr-defined\]|getattr\((self\.app|feed|self\.console_app)\b"
    )
    found = [
        f"{path.relative_to(CONSOLE)}:{number}: {line.strip()}"
        for path in sorted(CONSOLE.rglob("*.py"))
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if probes.search(line)
    ]
    assert found == []
