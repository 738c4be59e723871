"""`llmgw doctor`: check this node and say, check by check, what to fix.

    llmgw doctor [--replay DIR] [--model-dir PATH ...] [--json]
    llmgw doctor [--replay DIR] --facts --json      # the node's facts
    llmgw doctor --capture DIR                      # write a capture for a bug report

Each check is `{"check", "status": pass|warn|fail, "message", "fix"}`; the
exit status is 1 when any check fails, 2 when the arguments are wrong.
`run_checks` is pure (facts in, checks out), so the protocol's `doctor` op
(`discover/ops.py`) and this command (`doctor/command.py`) give the same
answers. The checks: `hardware.py` (driver, cards, NVLink, fabric, IMEX,
adapters) and `node.py` (model folders, engines, router, keepalive, state).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Optional

from llmgw_agent.doctor.check import Check
from llmgw_agent.doctor.hardware import hardware_checks
from llmgw_agent.doctor.node import node_checks


def run_checks(facts: Dict[str, Any], state_dir: Optional[Path] = None) -> List[Check]:
    """Every doctor check for a node's facts (and its state dir, when given)."""
    state = Path(state_dir) if state_dir is not None else None
    return hardware_checks(facts) + node_checks(facts, state)


def format_checks(checks: List[Check]) -> str:
    """The checks as lines for a person: `FAIL  fabric   message`, the fix indented below."""
    width = max((len(c["check"]) for c in checks), default=6)
    lines = []
    for check in checks:
        lines.append(
            "{:<5} {:<{w}}  {}".format(
                check["status"].upper(), check["check"], check["message"], w=width
            )
        )
        if check["fix"] and check["status"] != "pass":
            lines.append("{:<5} {:<{w}}  fix: {}".format("", "", check["fix"], w=width))
    failed = sum(1 for c in checks if c["status"] == "fail")
    warned = sum(1 for c in checks if c["status"] == "warn")
    lines.append("{} check(s): {} failed, {} warning(s)".format(len(checks), failed, warned))
    return "\n".join(lines)
