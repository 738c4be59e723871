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

from typing import Any

from pydantic import Field

from llmgw_core.script.registry import StepArgs, StepContext, StepOutcome, step


class UsageArgs(StepArgs):
    """Arguments of `usage`."""

    gateway: str = Field(min_length=1)
    key: str | None = Field(default=None, min_length=1)


async def run_usage(args: UsageArgs, ctx: StepContext) -> StepOutcome:
    """Read the front's sums (`gateway.run.gateway_usage`)."""
    from llmgw_core.gateway.run import gateway_usage

    fleet = await ctx.live_fleet()
    return StepOutcome(result=await gateway_usage(fleet, args.gateway, key=args.key))


def render_usage(result: dict[str, Any]) -> Any:
    """A row per day, key and model, then each key's totals."""
    from rich.table import Table

    from llmgw_core.gateway.run import USAGE_FIELDS

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
            *(f"{row[field]:,}" for field in USAGE_FIELDS),
        )
    for key, total in sorted((result.get("totals") or {}).items()):
        table.add_row(
            "all", key, "", *(f"{total[field]:,}" for field in USAGE_FIELDS), style="bold"
        )
    return table


step("usage", args=UsageArgs, render=render_usage)(run_usage)
