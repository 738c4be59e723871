"""The `ask` step: one chat completion from a replica, through an SSH tunnel to rank 0.

```yaml
steps:
  - ask: {replica: llama-70b, prompt: "Say hello in one word."}
```
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from llmgw_core.script.registry import StepArgs, StepContext, StepOutcome, step


class AskArgs(StepArgs):
    """Arguments of `ask`."""

    replica: str = Field(min_length=1)
    prompt: str = Field(min_length=1)
    max_tokens: int = Field(default=64, ge=1, le=32_768)


async def run_ask(args: AskArgs, ctx: StepContext) -> StepOutcome:
    """Ask the replica's engine one question; the result is its answer's text."""
    from llmgw_core.serve.http import chat
    from llmgw_core.serve.replicas import find_replica
    from llmgw_core.serve.session import fleet_and_reach

    fleet, reach = await fleet_and_reach(ctx)
    head, port, served_name = (await find_replica(fleet, args.replica)).ready_engine()
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
            "replica": args.replica,
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
