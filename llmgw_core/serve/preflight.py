"""An opt-in check before a multi-node replica starts: does the fabric carry its collectives?

`serve` with `all_reduce: true` runs nccl-tests' `all_reduce_perf` across
the nodes placement chose, on the cards of each, with the replica's own
`NCCL_*` environment (its adapters, `NCCL_IB_HCA`), so the test takes the
path the engine will. It is judged against the slowest node's fabric
(`fabric.judge_all_reduce`); a `fail` fails the serve with that verdict
before a card is claimed. One node: nothing to test.
"""

from __future__ import annotations

from typing import Any

from llmgw_core.engines import LaunchPlan
from llmgw_core.fabric.run import FabricNode, adapter_ends, run_all_reduce
from llmgw_core.fabric.verdicts import AllReduceJudgement
from llmgw_core.placement import Placement

ALL_REDUCE_TIMEOUT_S = 600.0


def fabric_nodes(fleet: Any, placement: Placement) -> list[FabricNode]:
    """The replica's nodes as the fabric test sees them: address, the fabric's adapters, rate."""
    specs = {s.name: s for s in fleet.inventory.node_specs()}
    snapshot = fleet.snapshot()
    found = []
    for placed in placement.nodes:
        spec = specs[placed.node]
        facts = snapshot.nodes[placed.node].facts
        fabric = next((f for f in spec.fabrics if f.name == placement.fabric), None)
        address = facts.host.mgmt_address if facts is not None and facts.host else None
        found.append(
            FabricNode(
                name=spec.name,
                address=address or spec.host,
                hcas=tuple(fabric.hcas) if fabric else (),
                rate_gbps=fabric.rate_gbps if fabric else None,
                adapters=adapter_ends(facts) if facts is not None else {},
            )
        )
    return found


async def all_reduce_preflight(
    fleet: Any, placement: Placement, launch: LaunchPlan, gpus_per_node: int
) -> AllReduceJudgement:
    """all_reduce_perf across the placement's nodes with the launch's NCCL variables, judged.

    Raises:
        LlmgwError: the test could not run (nccl-tests missing, a node lost).
    """
    nodes = fabric_nodes(fleet, placement)
    engine_env = launch.head.main.env
    nccl_env = {k: v for k, v in engine_env.items() if k.startswith("NCCL_")}
    _run, judgement = await run_all_reduce(
        fleet.client(nodes[0].name),
        nodes,
        gpus_per_node=gpus_per_node,
        env=nccl_env,
        timeout_s=ALL_REDUCE_TIMEOUT_S,
    )
    return judgement
