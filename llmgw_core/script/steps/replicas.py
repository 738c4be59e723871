"""The `replicas` step: every replica the nodes run, reassembled from their shards now.

```yaml
steps:
  - replicas: {}
  - replicas: {name: llama-70b, phase: ready}   # expect: fails unless it is so
  - replicas: {heal: true}                      # place again what lost a node, where there is room
```

Each replica: `name`, `model`, `phase`, `engine`, `endpoint`, `service` (the
service `apply` started it for, None for one served by hand), `draining`, its
`shards` (`node`, `rank`, `gpus`, `phase`, `env`, `argv`, and `transport`:
the NCCL transport read from the shard's log, None when NCCL said nothing)
and `transport_warnings` (Socket between nodes, an adapter off the fabric). What is left
running of a failed replica is stopped first, so no card stays claimed.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from llmgw_core.script.registry import EXIT_STEP_FAILED, StepArgs, StepContext, StepOutcome, step


class ReplicasArgs(StepArgs):
    """Arguments of `replicas`: optionally one replica, and the phase it must be in."""

    name: str | None = None
    phase: str | None = None
    grace: float = Field(default=60.0, ge=0, le=3600)
    heal: bool = False


async def run_replicas(args: ReplicasArgs, ctx: StepContext) -> StepOutcome:
    """List the replicas (after stopping the leftovers of failed ones)."""
    from llmgw_core.serve.replicas import reconcile
    from llmgw_core.serve.transport import with_transports
    from llmgw_core.serve.view import trace_of

    fleet = await ctx.live_fleet()
    views = await reconcile(fleet, grace_s=args.grace)
    healed: list[dict[str, Any]] = []
    if args.heal:
        from llmgw_core.serve.heal import heal
        from llmgw_core.serve.tunnels import fleet_and_reach

        _, reach = await fleet_and_reach(ctx)
        healed = await heal(fleet, reach, grace_s=args.grace)
        if healed:
            views = await reconcile(fleet, grace_s=args.grace)
            from llmgw_core.gateway.run import follow_all

            await follow_all(fleet, reach)  # a replica healed elsewhere: gateways follow it
    shown = [v for v in views if args.name is None or v.name == args.name]
    from llmgw_core.serve.figures import with_all_figures

    shown = list(await with_all_figures(fleet, await with_transports(fleet, shown)))
    rows = []
    for view in shown:
        row = view.as_dict()
        row["trace"] = trace_of(view)
        rows.append(row)
    if any(row.get("slurm") for row in rows):
        from llmgw_core.fleet.slurm_jobs import with_job_states

        await with_job_states(fleet, rows)
    result: dict[str, Any] = {"replicas": rows}
    if args.heal:
        result["healed"] = healed
    if args.name is not None and not shown:
        return StepOutcome(
            result=result,
            ok=False,
            exit_code=EXIT_STEP_FAILED,
            error=f"no replica is named {args.name!r}",
        )
    if args.phase is not None:
        wrong = [v for v in shown if v.phase != args.phase]
        if wrong:
            first = wrong[0]
            why = f" ({first.reason})" if first.reason else ""
            return StepOutcome(
                result=result,
                ok=False,
                exit_code=EXIT_STEP_FAILED,
                error=f"{first.name} is {first.phase}{why}, not {args.phase}",
            )
    return StepOutcome(result=result)


def render_replicas(result: dict[str, Any]) -> Any:
    """One row per shard, grouped by replica."""
    from rich.table import Table

    table = Table(
        "replica",
        "service",
        "phase",
        "engine",
        "endpoint",
        "rank",
        "node",
        "gpus",
        "shard",
        "transport",
        box=None,
    )
    for replica in result.get("replicas", []):
        for index, shard in enumerate(replica["shards"]):
            first = index == 0
            transport = shard.get("transport") or {}
            adapters = ",".join(a.split(":")[0] for a in transport.get("adapters") or [])
            said = transport.get("label") or (
                f"({transport['unknown']})" if transport.get("unknown") else ""
            )
            table.add_row(
                replica["name"] if first else "",
                (replica.get("service") or "") if first else "",
                replica["phase"] if first else "",
                (replica.get("engine") or "") if first else "",
                (replica.get("endpoint") or "") if first else "",
                str(shard["rank"]),
                shard["node"],
                ",".join(shard["gpus"]) or "RAM",
                shard["phase"],
                f"{said} {adapters}".strip(),
            )
        if replica.get("reason"):
            table.add_row("", f"[red]{replica['reason']}[/red]", *[""] * 8)
        for warning in replica.get("transport_warnings") or []:
            table.add_row("", f"[red]{warning}[/red]", *[""] * 8)
    return table


step("replicas", args=ReplicasArgs, render=render_replicas)(run_replicas)
