"""The core and the console name agent ops by `llmgw_agent.ops.Op`, never by a bare string.

An op renamed in the agent then fails at import (an attribute gone), not on a
node at run time (`unknown op`).
"""

from __future__ import annotations

import ast
from pathlib import Path

import llmgw_agent.protocol  # noqa: F401  (imports every module that declares an op)
from llmgw_agent.ops import OP_NAMES, OPERATIONS

REPO_ROOT = Path(__file__).resolve().parents[2]
CALLERS = ("llmgw_core", "llmgw_tui")
SENDING = {"request", "stream"}
"""The fleet's and a client's calls that send an op (`fleet.request(node, op, …)`,
`client.stream(op, …)`)."""


def bare_op_strings(source: str) -> list[tuple[int, str]]:
    """Every string literal naming an op passed to a sending call: (line, op)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        if node.func.attr not in SENDING:
            continue
        for arg in node.args[:2]:
            if isinstance(arg, ast.Constant) and arg.value in OP_NAMES:
                found.append((node.lineno, arg.value))
    return found


def test_the_check_finds_a_bare_op() -> None:
    source = 'async def f(fleet):\n    await fleet.request("n", "shard.list")\n'
    assert bare_op_strings(source) == [(2, "shard.list")]
    assert bare_op_strings("fleet.request('n', Op.SHARD_LIST)") == []


def test_no_caller_sends_an_op_by_a_bare_string() -> None:
    found = [
        f"{path.relative_to(REPO_ROOT)}:{line}: {op!r}"
        for package in CALLERS
        for path in sorted((REPO_ROOT / package).rglob("*.py"))
        for line, op in bare_op_strings(path.read_text(encoding="utf-8"))
    ]
    assert found == [], "name these ops by llmgw_agent.ops.Op:\n" + "\n".join(found)


def test_every_declared_op_has_a_name_and_every_name_an_op() -> None:
    # `ping` and `cancel` are the channel's own (protocol.py), not handlers' ops.
    assert set(OPERATIONS) | {"ping", "cancel"} == set(OP_NAMES)
