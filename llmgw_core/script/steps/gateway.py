"""The `gateway` step: one OpenAI-compatible address in front of every ready replica.

```yaml
steps:
  - gateway: {name: front, node: cpu-01, port: 30000, policy: round_robin}
  - ask: {gateway: front, prompt: "Say hello."}
  - stop: {gateway: front}
```

A gateway that already runs under that name is adopted (its workers made to
follow the replicas), not started twice.
"""

from __future__ import annotations

from typing import Any

from llmgw_core.gateway.spec import GatewayArgs
from llmgw_core.script.registry import StepArgs, StepContext, StepOutcome, step


class GatewayStepArgs(StepArgs, GatewayArgs):
    """Arguments of `gateway` (see `GatewayArgs`)."""


async def run_gateway(args: GatewayStepArgs, ctx: StepContext) -> StepOutcome:
    """Start or adopt the gateway; its result names its address and workers."""
    from llmgw_core.gateway.run import start_gateway
    from llmgw_core.serve.tunnels import fleet_and_reach

    fleet, reach = await fleet_and_reach(ctx)
    gateway = GatewayArgs.model_validate(args.model_dump())
    return StepOutcome(result=await start_gateway(fleet, reach, gateway))


def render_gateway(result: dict[str, Any]) -> Any:
    """Its address, then one line per worker."""
    from rich.text import Text

    how = "adopted" if result.get("adopted") else "started"
    text = Text(
        f"gateway {result.get('name')} {how} at {result.get('address')} "
        f"({result.get('policy')}; metrics on port {result.get('prometheus_port')})"
    )
    for worker in result.get("workers", []):
        text.append(f"\n  {worker['model']} → {worker['url']} ({worker['replica']})")
    for warning in result.get("warnings") or []:
        text.append(f"\n{warning}", style="yellow")
    return text


step("gateway", args=GatewayStepArgs, render=render_gateway)(run_gateway)
