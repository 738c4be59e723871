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
    from llmgw_core.gateway.keys import client_keys
    from llmgw_core.gateway.run import start_gateway
    from llmgw_core.serve.tunnels import fleet_and_reach

    given = args.model_dump()
    # Files on the operator's machine are read from the script's folder, as a local model is.
    if given.get("keys_file"):
        given["keys_file"] = str(ctx.local_path(given["keys_file"]))
    if given.get("tls"):
        given["tls"] = {role: str(ctx.local_path(path)) for role, path in given["tls"].items()}
    gateway = GatewayArgs.model_validate(given)
    client_keys(gateway.api_key_env, gateway.keys_file)  # a bad key or keys file: before any node
    fleet, reach = await fleet_and_reach(ctx)
    return StepOutcome(result=await start_gateway(fleet, reach, gateway))


def render_gateway(result: dict[str, Any]) -> Any:
    """Its address, then one line per worker."""
    from rich.text import Text

    how = "adopted" if result.get("adopted") else "started"
    text = Text(
        f"gateway {result.get('name')} {how} at {result.get('address')} ({result.get('policy')})"
    )
    for worker in result.get("workers", []):
        text.append(f"\n  {worker['model']} → {worker['url']} ({worker['replica']})")
    for warning in result.get("warnings") or []:
        text.append(f"\n{warning}", style="yellow")
    return text


step("gateway", args=GatewayStepArgs, render=render_gateway)(run_gateway)
