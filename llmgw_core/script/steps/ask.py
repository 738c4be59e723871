"""The `ask` step: one chat completion from a replica or a gateway, through an SSH tunnel.

```yaml
steps:
  - ask: {replica: llama-70b, prompt: "Say hello in one word."}
  - ask: {gateway: front, model: llama-70b, prompt: "Say hello in one word."}
```

Through a gateway, `model` picks the served model (it may be left out when
the gateway fronts only one).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from llmgw_core.script.registry import StepArgs, StepContext, StepOutcome, step


class AskArgs(StepArgs):
    """Arguments of `ask`."""

    replica: str | None = Field(default=None, min_length=1)
    gateway: str | None = Field(default=None, min_length=1)
    model: str | None = Field(default=None, min_length=1)
    prompt: str = Field(min_length=1)
    max_tokens: int = Field(default=64, ge=1, le=32_768)

    @model_validator(mode="after")
    def _one_target(self) -> AskArgs:
        if (self.replica is None) == (self.gateway is None):
            raise ValueError("give either replica or gateway")
        if self.model is not None and self.gateway is None:
            raise ValueError("model is for a gateway; a replica serves one model")
        return self


async def engine_target(args: Any, ctx: StepContext) -> tuple[Any, Any, str, int, str, Any]:
    """The fleet, tunnels, node, port and served name a question goes to, and the gateway if any."""
    from llmgw_core.serve.replicas import find_replica
    from llmgw_core.serve.tunnels import fleet_and_reach

    fleet, reach = await fleet_and_reach(ctx)
    if args.gateway is None:
        head, port, served_name = (await find_replica(fleet, args.replica)).ready_engine()
        return fleet, reach, head, port, served_name, None
    from llmgw_core.gateway.run import find_gateway, router_workers
    from llmgw_core.gateway.spec import choose_model

    gateway = await find_gateway(fleet, args.gateway)
    workers = await router_workers(reach, gateway)
    model = choose_model([w["model"] for w in workers.values()], args.model, gateway.name)
    return fleet, reach, gateway.node, gateway.port, model, gateway


async def run_ask(args: AskArgs, ctx: StepContext) -> StepOutcome:
    """Ask the replica's engine (or the gateway) one question; the result is its answer's text."""
    from llmgw_core.serve.http import chat

    _fleet, reach, head, port, served_name, _gateway = await engine_target(args, ctx)
    answer = await chat(
        reach,
        head,
        port,
        served_name,
        args.prompt,
        max_tokens=args.max_tokens,
    )
    return StepOutcome(
        result={
            **({"replica": args.replica} if args.gateway is None else {}),
            **({"gateway": args.gateway, "model": served_name} if args.gateway else {}),
            "text": answer.text,
            "completion_tokens": answer.completion_tokens,
            "latency_s": round(answer.latency_s, 3),
        }
    )


def render_ask(result: dict[str, Any]) -> Any:
    """The answer's text."""
    from rich.text import Text

    return Text(result.get("text", ""))


step("ask", args=AskArgs, render=render_ask)(run_ask)
