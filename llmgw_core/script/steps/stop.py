"""The `stop` step: stop every shard of a replica and free every card it held (or a gateway).

```yaml
steps:
  - stop: {replica: llama-70b}
  - stop: {gateway: front}
```

Running gateways then drop the stopped replica's engine from their workers.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from llmgw_core.script.registry import StepArgs, StepContext, StepOutcome, step


class StopArgs(StepArgs):
    """Arguments of `stop`."""

    replica: str | None = Field(default=None, min_length=1)
    gateway: str | None = Field(default=None, min_length=1)

    @model_validator(mode="after")
    def _one_target(self) -> StopArgs:
        if (self.replica is None) == (self.gateway is None):
            raise ValueError("give either replica or gateway")
        return self


async def run_stop(args: StopArgs, ctx: StepContext) -> StepOutcome:
    """Stop and forget the replica's shards on every node that answers."""
    from llmgw_core.gateway.run import follow_all, stop_gateway
    from llmgw_core.serve.replicas import stop_replica
    from llmgw_core.serve.tunnels import fleet_and_reach

    fleet, reach = await fleet_and_reach(ctx)
    if args.gateway is not None:
        return StepOutcome(result=await stop_gateway(fleet, args.gateway))
    result = await stop_replica(fleet, args.replica)
    gateways = await follow_all(fleet, reach)
    return StepOutcome(result={**result, **({"gateways": gateways} if gateways else {})})


def render_stop(result: dict[str, Any]) -> Any:
    """Which shards were stopped, where."""
    from rich.text import Text

    if "gateway" in result:
        return Text(f"gateway {result['gateway']}: its router on {result['node']} stopped")
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
