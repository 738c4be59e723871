"""The `bench` step: tokens a second of a running replica, and its latency percentiles.

```yaml
steps:
  - bench: {replica: llama-70b, requests: 32, concurrency: 8}
```
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from llmgw_core.script.registry import StepArgs, StepContext, StepOutcome, step


class BenchArgs(StepArgs):
    """Arguments of `bench`."""

    replica: str = Field(min_length=1)
    requests: int = Field(default=16, ge=1, le=100_000)
    concurrency: int = Field(default=4, ge=1, le=4096)
    max_tokens: int = Field(default=64, ge=1, le=32_768)


async def run_bench(args: BenchArgs, ctx: StepContext) -> StepOutcome:
    """Send `requests` completions, `concurrency` at a time, through the tunnel to rank 0."""
    from llmgw_core.serve.http import bench
    from llmgw_core.serve.replicas import find_replica
    from llmgw_core.serve.session import fleet_and_reach

    fleet, reach = await fleet_and_reach(ctx)
    head, port, served_name = (await find_replica(fleet, args.replica)).ready_engine()
    figures = await bench(
        reach,
        head,
        port,
        served_name,
        requests=args.requests,
        concurrency=args.concurrency,
        max_tokens=args.max_tokens,
    )
    return StepOutcome(result={"replica": args.replica, **figures})


def render_bench(result: dict[str, Any]) -> Any:
    """Tokens a second and latency percentiles on one line each."""
    from rich.text import Text

    latency = result.get("latency_s", {})
    return Text(
        f"{result.get('tokens_per_s')} tokens/s over {result.get('requests')} requests, "
        f"{result.get('concurrency')} at a time\n"
        f"latency p50 {latency.get('p50')} s, p90 {latency.get('p90')} s, p99 {latency.get('p99')} s"
    )


step("bench", args=BenchArgs, render=render_bench)(run_bench)
