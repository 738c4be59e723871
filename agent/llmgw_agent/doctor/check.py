"""One doctor check: its record and the way every check is written.

Each check is `{"check", "status": pass|warn|fail, "message", "fix"}`.
"""

from __future__ import annotations

from typing import Dict

Check = Dict[str, str]


def check(name: str, status: str, message: str, fix: str = "") -> Check:
    """One check's record."""
    return {"check": name, "status": status, "message": message, "fix": fix}
