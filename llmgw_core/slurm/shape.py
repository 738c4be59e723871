"""What one replica's job asks Slurm for: nodes, cards of a type on each, and which nodes
(pure: the scheduler's reading and the planner's way in, a `JobShape` out).

The planner decides how many cards and nodes a model needs, against the partition
described as the scheduler reports it (each GRES type as its GPU class, its nodes
as they are). The scheduler then decides when: `--nodelist` names the nodes that
have the cards free now, and where no node does, the job is left to Slurm's queue
and its reason (`Resources`) says why it waits. Cards another job holds are never
named, and once the job runs no other job gets its cards.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from llmgw_core.errors import BadInput
from llmgw_core.planner.gpu_classes import known_labels
from llmgw_core.slurm.nodes import SlurmNode


@dataclass(frozen=True)
class JobShape:
    """A replica's job: `nodes` × `gpus_per_node` cards of GRES type `gpu_type`.

    Attributes:
        nodelist: the nodes chosen for it (empty: Slurm picks, and may make it wait).
    """

    nodes: int
    gpus_per_node: int
    gpu_type: str
    gpu_class: str
    nodelist: tuple[str, ...] = ()


def class_of_type(gpu_type: str) -> str | None:
    """The GPU class a GRES type names (`h100` → `h100-80g`), the larger card where a type has
    two sizes (`a100` → `a100-80g`); None for a type no class starts with."""
    labels = [label for label in known_labels() if label.split("-")[0] == gpu_type.lower()]
    labels = [label for label in labels if "-mig-" not in label]
    if not labels:
        return None
    return max(labels, key=lambda label: int(label.split("-")[1].rstrip("g") or 0))


def type_of_class(gpu_class: str) -> str:
    """The GRES type a GPU class is asked for by (`h100-80g` → `h100`)."""
    return gpu_class.split("-")[0]


def described_partition(nodes: Sequence[SlurmNode]) -> list[dict[str, object]]:
    """The partition as the planner's described fleet (`fleet:` entries): one entry per GRES
    type and card count, its nodes counted whatever they run now.

    Raises:
        BadInput: no node of the partition has cards of a type llmgw knows.
    """
    groups: dict[tuple[str, int], int] = {}
    for node in nodes:
        if not node.available:
            continue
        for gres in node.gpus:
            gpu_class = class_of_type(gres.type)
            if gpu_class is not None and gres.count > 0:
                key = (gpu_class, gres.count)
                groups[key] = groups.get(key, 0) + 1
    if not groups:
        raise BadInput(
            "no node of the partition has cards of a type llmgw knows "
            f"({', '.join(sorted({g.type for n in nodes for g in n.gpus})) or 'none at all'})",
            "serve on a partition whose nodes declare GPUs as GRES, such as gpu:h100:8",
        )
    return [
        {"name": f"slurm-{gpu_class}-{count}", "count": how_many, "gpu": gpu_class, "gpus": count}
        for (gpu_class, count), how_many in sorted(groups.items())
    ]


def job_shape(
    nodes: Sequence[SlurmNode], *, gpu_class: str, gpus_per_node: int, node_count: int
) -> JobShape:
    """The job for `node_count` nodes of `gpus_per_node` cards of `gpu_class`, with the nodes
    that have them free now as its `--nodelist` (most free first, then by name), or none
    where too few do (the job then waits in Slurm's queue, which says why)."""
    gpu_type = type_of_class(gpu_class)
    fitting = [
        node
        for node in nodes
        if node.available
        and any(g.type == gpu_type and g.count >= gpus_per_node for g in node.gpus)
        and node.gpus_free is not None
        and node.gpus_free >= gpus_per_node
    ]
    fitting.sort(key=lambda node: (-(node.gpus_free or 0), node.name))
    chosen = tuple(sorted(node.name for node in fitting[:node_count]))
    return JobShape(
        nodes=node_count,
        gpus_per_node=gpus_per_node,
        gpu_type=gpu_type,
        gpu_class=gpu_class,
        nodelist=chosen if len(chosen) == node_count else (),
    )
