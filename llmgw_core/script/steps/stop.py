"""The `stop` step: stop every shard of a replica and free every card it held (or a gateway).

```yaml
steps:
  - stop: {replica: llama-70b}
  - stop: {gateway: front}
  - stop: {service: chat}      # every replica of the service, under its lease
```

Running gateways then drop the stopped replica's engine from their workers.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from llmgw_core.arguments import NAME_PATTERN
from llmgw_core.script.registry import StepArgs, StepContext, StepOutcome, step


class StopArgs(StepArgs):
    """Arguments of `stop`."""

    replica: str | None = Field(default=None, min_length=1)
    gateway: str | None = Field(default=None, min_length=1)
    service: str | None = Field(default=None, pattern=NAME_PATTERN)

    @model_validator(mode="after")
    def _one_target(self) -> StopArgs:
        if sum(x is not None for x in (self.replica, self.gateway, self.service)) != 1:
            raise ValueError("give one of replica, gateway or service")
        return self


async def run_stop(args: StopArgs, ctx: StepContext) -> StepOutcome:
    """Stop and forget the replica's shards on every node that answers."""
    from llmgw_core.gateway.run import follow_all, stop_gateway
    from llmgw_core.serve.replicas import stop_replica
    from llmgw_core.serve.tunnels import fleet_and_reach

    fleet, reach = await fleet_and_reach(ctx)
    if args.service is not None:
        from llmgw_core.service.apply import stop_service

        return StepOutcome(result=await stop_service(fleet, reach, args.service))
    if args.gateway is not None:
        return StepOutcome(result=await stop_gateway(fleet, args.gateway))
    result = await stop_replica(fleet, args.replica)
    gateways = await follow_all(fleet, reach)
    return StepOutcome(result={**result, **({"gateways": gateways} if gateways else {})})


def render_stop(result: dict[str, Any]) -> Any:
    """Which shards were stopped, where."""
    from rich.text import Text

    if "service" in result:
        stopped = ", ".join(result.get("stopped") or []) or "nothing"
        return Text(f"service {result['service']}: stopped {stopped}")
    if "gateway" in result:
        return Text(f"gateway {result['gateway']}: its front on {result['node']} stopped")
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
