"""Textual's private members: where we reach them, and that they are still there.

`llmgw_tui/textual_hooks.py` and `widgets/table.py` are the only modules that
may touch a private member of Textual's; each use stands beside the public
API it stands in for. These tests fail when the pinned Textual moves one, or
when another module starts reaching one.
"""

from __future__ import annotations

import ast
import asyncio
import re
from pathlib import Path

import textual
from textual.app import App
from textual.message_pump import MessagePump
from textual.screen import Screen
from textual.widgets import DataTable

CONSOLE = Path(__file__).resolve().parents[2] / "llmgw_tui"
ALLOWED = {"textual_hooks.py", "widgets/table.py"}


def _textual_privates() -> set[str]:
    """Every `_name` Textual defines: its methods and the attributes it assigns."""
    names: set[str] = set()
    for path in Path(textual.__file__).parent.rglob("*.py"):
        text = path.read_text()
        names |= set(re.findall(r"def (_[a-z][a-z0-9_]*)", text))
        names |= set(re.findall(r"self\.(_[a-z][a-z0-9_]*)\s*(?::[^=\n]*)?=(?!=)", text))
    return names


def _ours() -> set[str]:
    """Every `_name` the console defines itself (methods, attributes it assigns, module names)."""
    names: set[str] = set()
    for path in CONSOLE.rglob("*.py"):
        text = path.read_text()
        names |= set(re.findall(r"def (_[a-z][a-z0-9_]*)", text))
        names |= set(re.findall(r"self\.(_[a-z][a-z0-9_]*)\s*(?::[^=\n]*)?=(?!=)", text))
        names |= set(re.findall(r"^\s*(_[a-z][a-z0-9_]*)\s*[:=]", text, re.MULTILINE))
    return names


def test_only_the_two_hook_modules_reach_textuals_private_members():
    theirs = _textual_privates() - _ours()
    found = []
    for path in sorted(CONSOLE.rglob("*.py")):
        where = path.relative_to(CONSOLE).as_posix()
        if where in ALLOWED:
            continue
        for node in ast.walk(ast.parse(path.read_text(), where)):
            if isinstance(node, ast.Attribute) and node.attr in theirs:
                found.append(f"{where}:{node.lineno}: .{node.attr}")
            if isinstance(node, ast.FunctionDef) and node.name in {
                "_on_message",
                "_handle_exception",
                "_render_cell",
            }:
                found.append(f"{where}:{node.lineno}: overrides {node.name}")
    assert found == []


def test_every_private_member_the_hooks_use_is_still_in_textual():
    """If the pinned Textual renames one, a hook stops working quietly: fail here instead."""
    for owner, name in (
        (MessagePump, "_on_message"),
        (App, "_handle_exception"),
        (App, "_get_screen"),
        (App, "_load_screen_css"),
        (Screen, "_refresh_layout"),
        (DataTable, "_render_cell"),
        (DataTable, "_get_row_renderables"),
        (DataTable, "_get_styles_to_render_cell"),
    ):
        assert callable(getattr(owner, name, None)), f"{owner.__name__}.{name}"

    async def attributes() -> None:
        app = App()
        async with app.run_test():
            for name in ("_screen_stacks", "_css_update_count"):
                assert hasattr(app, name), f"App.{name}"
            for name in ("_layout_required", "_dirty_widgets", "_css_update_count"):
                assert hasattr(app.screen, name), f"Screen.{name}"
            table: DataTable[str] = DataTable()
            for name in (
                "_row_locations",
                "_column_locations",
                "_cell_render_cache",
                "_pseudo_class_state",
                "_show_hover_cursor",
                "_update_count",
            ):
                assert hasattr(table, name), f"DataTable.{name}"

    asyncio.run(attributes())


def test_the_hooks_docstring_names_every_private_member_they_reach_and_no_other():
    """The list at the top of `textual_hooks.py` is the audit of what a Textual upgrade may break."""
    path = CONSOLE / "textual_hooks.py"
    tree = ast.parse(path.read_text(), path.name)
    theirs = _textual_privates() - _ours()
    reached = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)} & theirs
    overridden = {"_on_message", "_handle_exception"}
    docstring = ast.get_docstring(tree) or ""
    assert reached, "the hooks reach no private member: the test reads the wrong file"
    named = set(re.findall(r"`(?:\w+\.)?(_\w+)`", docstring))
    assert sorted((reached | overridden) - named) == [], "reached, and not in the list"
    assert sorted(named - reached - overridden) == [], "in the list, and no longer reached"
