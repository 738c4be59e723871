"""The `stop` step: stop every shard of a replica and free every card it held.

```yaml
steps:
  - stop: {replica: llama-70b}
```
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from llmgw_core.script.registry import StepArgs, StepContext, StepOutcome, step


class StopArgs(StepArgs):
    """Arguments of `stop`."""

    replica: str = Field(min_length=1)


async def run_stop(args: StopArgs, ctx: StepContext) -> StepOutcome:
    """Stop and forget the replica's shards on every node that answers."""
    from llmgw_core.serve.replicas import stop_replica

    fleet = await ctx.live_fleet()
    return StepOutcome(result=await stop_replica(fleet, args.replica))


def render_stop(result: dict[str, Any]) -> Any:
    """Which shards were stopped, where."""
    from rich.text import Text

    stopped = result.get("stopped", [])
    where = ", ".join(f"{s['node']} ({','.join(s['gpus']) or 'RAM'})" for s in stopped)
    text = Text(f"{result.get('name')}: stopped {len(stopped)} shard(s) on {where}")
    if result.get("unreached"):
        text.append(
            f"\nnot reached: {', '.join(result['unreached'])} (stopped by `replicas` once back)",
            style="yellow",
        )
    return text


step("stop", args=StopArgs, render=render_stop)(run_stop)
