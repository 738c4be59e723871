"""The numbers an operator writes (a described fleet, an inventory): one rule for all of them.

Each is a YAML number — never a string (`"8"`), never a boolean (`true` is
not 1) — finite (`.inf`, `.nan` and `1.0e+400`, which YAML reads as
infinity, are refused) and inside its field's range, both ends given. The
two types below carry the first two parts; each field gives its range with
`Field(ge=…, le=…)`:

    memory_gib: Amount | None = Field(default=None, gt=0, le=MAX_MEMORY_GIB)
    count: Count = Field(default=1, ge=1, le=100_000)

Without this rule `memory_gib: .inf` passed `gt=0`, the planner met a node
with infinite RAM and reported the model fitting nowhere (exit 3) instead of
refusing the fleet (exit 2) before planning.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Annotated, Any

from pydantic import Field, Strict

Count = Annotated[int, Strict()]
"""A whole number as written: `8`, never `8.0`, `"8"` or `true`."""

Amount = Annotated[float, Strict(), Field(allow_inf_nan=False)]
"""A finite number as written (`512`, `0.5`), never a string, a boolean, `.inf` or `.nan`."""

MAX_MEMORY_GIB = 1024 * 1024
"""1 PiB: more than any one node holds, RAM or a card's memory."""

MAX_RATE_GBPS = 100_000
"""100 Tb/s: far above any adapter port (800 Gb/s ships, 1.6 Tb/s is announced)."""

MAX_CLIQUE = 2**32 - 1
"""An NVLink clique id is a 32-bit number."""

_SAID = {
    "finite_number": "must be a finite number",
    "greater_than": "must be greater than {gt}",
    "greater_than_equal": "must be at least {ge}",
    "less_than": "must be less than {lt}",
    "less_than_equal": "must be at most {le}",
    "int_type": "must be a whole number",
    "float_type": "must be a number",
}


def written(value: Any) -> str:
    """A value as the operator wrote it in YAML (`.inf`, `true`, `'8'`), short."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and not math.isfinite(value):
        return ".nan" if value != value else ("-.inf" if value < 0 else ".inf")
    if isinstance(value, int) and abs(value) >= 10**24:
        return f"a {len(str(abs(value)))}-digit number"
    if isinstance(value, list | tuple):
        return "a list"
    if isinstance(value, dict):
        return "a mapping"
    text = repr(value)
    return text if len(text) <= 40 else text[:39] + "…"


def refusal(error: Mapping[str, Any]) -> str | None:
    """What a refused number must be, as the end of a sentence, from one pydantic error.

    `memory_gib: .inf` -> `must be a finite number, not .inf`; None for an
    error that is not about a number (the caller words it).
    """
    template = _SAID.get(error.get("type", ""))
    if template is None:
        return None
    bounds = {key: _plain(value) for key, value in (error.get("ctx") or {}).items()}
    return f"{template.format(**bounds)}, not {written(error.get('input'))}"


def _plain(bound: Any) -> Any:
    """`0.0` and `1048576.0` as `0` and `1048576`: a bound reads as the operator would write it."""
    return int(bound) if isinstance(bound, float) and bound.is_integer() else bound
