"""The `usage` step: what each client key of a gateway used, per UTC day and model.

```yaml
steps:
  - usage: {gateway: front}                 # every key, every day the access log keeps
  - usage: {gateway: front, key: team-a}    # one key
```

Summed by the gateway's front from its access log (a JSON line per keyed
request, kept on its node under the gateway's name: docs/gateway.md,
"Every request accounted"): requests, those answered 2xx, prompt and
completion tokens as the engines' own `usage` said.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import Field

from llmgw_core.errors import LlmgwError
from llmgw_core.script.registry import StepArgs, StepContext, StepOutcome, step


class UsageArgs(StepArgs):
    """Arguments of `usage`."""

    gateway: str = Field(min_length=1)
    key: str | None = Field(default=None, min_length=1)


async def run_usage(args: UsageArgs, ctx: StepContext) -> StepOutcome:
    """Read the front's sums; `usage` is a list of `{day, key, model, requests, answered,
    prompt_tokens, completion_tokens}`, `totals` the same per key."""
    from llmgw_core.gateway.run import find_gateway, front_call

    fleet = await ctx.live_fleet()
    gateway = await find_gateway(fleet, args.gateway)
    status, body = await front_call(fleet, gateway, "GET", "/usage")
    rows = _rows(status, body, args.gateway)
    if args.key is not None:
        rows = [row for row in rows if row["key"] == args.key]
    totals: dict[str, dict[str, int]] = {}
    for row in rows:
        into = totals.setdefault(
            row["key"],
            {"requests": 0, "answered": 0, "prompt_tokens": 0, "completion_tokens": 0},
        )
        for name in into:
            into[name] += row[name]
    return StepOutcome(result={"gateway": args.gateway, "usage": rows, "totals": totals})


_FIELDS = ("requests", "answered", "prompt_tokens", "completion_tokens")


def _rows(status: int, body: str, name: str) -> list[dict[str, Any]]:
    """The front's answer, checked: it comes from a node, so it is read as untrusted."""
    fault = LlmgwError(f"the front of gateway {name} did not say its usage (status {status})")
    if status != 200:
        raise fault
    try:
        rows = json.loads(body)["usage"]
        return [
            {
                "day": str(row["day"]),
                "key": str(row["key"]),
                "model": str(row["model"]),
                **{field: _count(row[field]) for field in _FIELDS},
            }
            for row in rows
        ]
    except (ValueError, KeyError, TypeError) as exc:
        raise fault from exc


def _count(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError("not a count")
    return value


def render_usage(result: dict[str, Any]) -> Any:
    """A row per day, key and model, then each key's totals."""
    from rich.table import Table

    table = Table(title=f"usage of gateway {result.get('gateway')} (UTC days)")
    for column in ("day", "key", "model"):
        table.add_column(column)
    for column in ("requests", "answered", "prompt", "completion"):
        table.add_column(column, justify="right")
    for row in result.get("usage", []):
        table.add_row(
            row["day"],
            row["key"],
            row["model"] or "-",
            *(f"{row[field]:,}" for field in _FIELDS),
        )
    for key, total in sorted((result.get("totals") or {}).items()):
        table.add_row("all", key, "", *(f"{total[field]:,}" for field in _FIELDS), style="bold")
    return table


step("usage", args=UsageArgs, render=render_usage)(run_usage)
