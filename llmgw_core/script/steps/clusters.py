"""The `clusters` step: each Slurm cluster of the inventory, as its scheduler sees it now.

```yaml
steps:
  - clusters: {}              # every cluster under the inventory's `clusters:`
  - clusters: {name: big}     # one
```

Each cluster's login node is asked over SSH (`fleet.slurm_login`): its Slurm
release, then the nodes of the entry's partition with their state, flags
and reason, their cards by type and those jobs hold, CPUs, memory and
features (docs/slurm.md). A login node that does not answer, or a Slurm
that prints what no reader knows, is one sentence and the step fails.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from llmgw_core.script.registry import StepArgs, StepContext, StepOutcome, step


class ClustersArgs(StepArgs):
    """Arguments of `clusters`."""

    name: str | None = Field(default=None, min_length=1)


async def run_clusters(args: ClustersArgs, ctx: StepContext) -> StepOutcome:
    """Read every cluster (or the one named) through its login node."""
    from llmgw_core.errors import BadInput
    from llmgw_core.fleet.slurm_login import read_cluster

    fleet = await ctx.live_fleet()
    inventory = fleet.inventory
    if args.name is not None:
        clusters = [inventory.cluster(args.name)]
    else:
        clusters = list(inventory.clusters)
        if not clusters:
            raise BadInput(
                "the inventory names no cluster", "add one under `clusters:` (docs/slurm.md)"
            )
    readings = [await read_cluster(fleet.connector, cluster) for cluster in clusters]
    return StepOutcome(result={"clusters": [reading.as_dict() for reading in readings]})


def render_clusters(result: dict[str, Any]) -> Any:
    """A table per cluster: a row per node of its partition."""
    from rich.console import Group
    from rich.table import Table

    tables = []
    for cluster in result.get("clusters", []):
        table = Table(
            title=f"{cluster['cluster']}: partition {cluster['partition']} "
            f"(Slurm {cluster['slurm']}, via {cluster['login']})"
        )
        for column in ("node", "state", "gpus", "used", "cpus", "memory GiB", "reason"):
            table.add_column(column, justify="right" if column in ("used", "cpus") else "left")
        for node in cluster["nodes"]:
            gpus = ", ".join(f"{g['count']}×{g['type'] or 'gpu'}" for g in node["gpus"]) or "-"
            used = "-" if node["gpus_used"] is None else str(node["gpus_used"])
            memory = node["memory_mib"]
            table.add_row(
                node["name"],
                "+".join(node["states"]).lower(),
                gpus,
                used,
                "-" if node["cpus"] is None else str(node["cpus"]),
                "-" if memory is None else f"{memory / 1024:.0f}",
                node["reason"] or "",
            )
        tables.append(table)
    return Group(*tables)


step("clusters", args=ClustersArgs, render=render_clusters)(run_clusters)
