"""The `logs` step: the last lines of a replica's engines, merged across ranks.

```yaml
steps:
  - logs: {replica: llama-70b, lines: 50}            # every rank, each line `[r1 node] …`
  - logs: {replica: llama-70b, shard: h100-a-02}     # one shard: a node, a rank or a shard id
  - logs: {gateway: front}                           # a gateway's front
```
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from llmgw_core.script.registry import StepArgs, StepContext, StepOutcome, step


class LogsArgs(StepArgs):
    """Arguments of `logs`."""

    replica: str | None = Field(default=None, min_length=1)
    gateway: str | None = Field(default=None, min_length=1)
    shard: str | None = None
    lines: int = Field(default=200, ge=1, le=100_000)

    @model_validator(mode="after")
    def _one_target(self) -> LogsArgs:
        if (self.replica is None) == (self.gateway is None):
            raise ValueError("give either replica or gateway")
        return self


async def run_logs(args: LogsArgs, ctx: StepContext) -> StepOutcome:
    """Read the last lines of every shard (or one) of the replica, or of the gateway's front."""
    from llmgw_core.serve.replicas import replica_logs

    fleet = await ctx.live_fleet()
    if args.gateway is not None:
        from llmgw_core.gateway.run import gateway_logs

        lines = await gateway_logs(fleet, args.gateway, lines=args.lines)
        return StepOutcome(result={"gateway": args.gateway, "lines": lines})
    lines = await replica_logs(fleet, args.replica, shard=args.shard, lines=args.lines)
    return StepOutcome(result={"replica": args.replica, "lines": lines})


def render_logs(result: dict[str, Any]) -> Any:
    """The lines as they are."""
    from rich.text import Text

    return Text("\n".join(result.get("lines", [])))


step("logs", args=LogsArgs, render=render_logs)(run_logs)
