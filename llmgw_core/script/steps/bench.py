"""The `bench` step: tokens a second of a running replica or gateway, and its latency percentiles.

```yaml
steps:
  - bench: {replica: llama-70b, requests: 32, concurrency: 8}
  - bench: {gateway: front, model: llama-70b, requests: 32, concurrency: 8}
```

Through a gateway it also says how the load split: the requests each
engine took, from the gateway's own counters. `duration_s: 40` sends for 40
seconds instead of a count; a request that fails is counted in `failed`
(the first errors named in `errors`) rather than ending the step.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from llmgw_core.script.registry import StepContext, StepOutcome, step
from llmgw_core.script.steps.ask import TargetArgs, engine_target


class BenchArgs(TargetArgs):
    """Arguments of `bench`."""

    requests: int = Field(default=16, ge=1, le=100_000)
    concurrency: int = Field(default=4, ge=1, le=4096)
    max_tokens: int = Field(default=64, ge=1, le=32_768)
    duration_s: float | None = Field(default=None, gt=0, le=86_400)
    """Send for this long instead of `requests` (to measure a roll or a fault)."""


async def run_bench(args: BenchArgs, ctx: StepContext) -> StepOutcome:
    """Send `requests` completions, `concurrency` at a time, through the tunnel to rank 0 or the gateway."""
    from llmgw_core.serve.http import bench

    target = await engine_target(args, ctx)
    reach, gateway, served_name = target.reach, target.gateway, target.served_name
    if gateway is not None:
        from llmgw_core.gateway.run import processed_by_worker

        before = await processed_by_worker(reach, gateway)
    figures = await bench(
        reach,
        target.node,
        target.port,
        served_name,
        requests=args.requests,
        concurrency=args.concurrency,
        max_tokens=args.max_tokens,
        api_key=target.api_key,
        host=target.host,
        tls=target.tls,
        duration_s=args.duration_s,
    )
    figures["requests_per_s"] = (
        round(figures["requests"] / figures["wall_s"], 1) if figures["wall_s"] else None
    )
    if gateway is None:
        return StepOutcome(result={"replica": args.replica, **figures})
    from llmgw_core.gateway.spec import load_split

    split = load_split(before, await processed_by_worker(reach, gateway))
    return StepOutcome(
        result={"gateway": args.gateway, "model": served_name, **figures, "split": split}
    )


def render_bench(result: dict[str, Any]) -> Any:
    """Tokens a second and latency percentiles on one line each."""
    from rich.text import Text

    latency = result.get("latency_s", {})
    text = Text(
        f"{result.get('tokens_per_s')} tokens/s, {result.get('requests_per_s')} requests/s "
        f"over {result.get('requests')} requests, {result.get('concurrency')} at a time\n"
        f"latency p50 {latency.get('p50')} s, p90 {latency.get('p90')} s, p99 {latency.get('p99')} s"
    )
    if result.get("failed"):
        text.append(f"\n{result['failed']} failed: " + "; ".join(result.get("errors") or []), "red")
    for url, taken in (result.get("split") or {}).items():
        text.append(f"\n  {url}: {taken} request(s)")
    return text


step("bench", args=BenchArgs, render=render_bench)(run_bench)
