"""Node by node, what each could hold when a model fits nowhere (pure).

`placement.explain` answers for a way; when the plan has no way at all the
question is how far each node is from holding the model: its free devices,
what the engine may use of them, against the weights alone.
"""

from __future__ import annotations

from collections.abc import Sequence

from llmgw_core.memory import usable_gib
from llmgw_core.placement import NodeVerdict
from llmgw_core.planner.plan import GIB, Plan
from llmgw_core.planner.pools_live import LiveNode


def capacity_verdicts(
    views: Sequence[LiveNode], plan: Plan, gpu_class: str | None = None
) -> tuple[NodeVerdict, ...]:
    """One reason per node: unreachable, another class, or what its free devices offer.

    Args:
        views: every node.
        plan: the plan that found no way.
        gpu_class: the class the operator asked for, when one was.
    """
    weights = min((a.size_gib for a in plan.artifacts), default=0.0)
    verdicts = []
    for view in views:
        node = view.node
        if not view.ready or node is None:
            verdicts.append(NodeVerdict(view.name, False, f"unreachable: it is {view.state}"))
            continue
        wanted = (gpu_class or "").lower()
        if wanted and wanted != "cpu" and not node.devices_of(wanted):
            have = sorted({d.gpu_class.label for d in node.devices}) or ["no GPU"]
            verdicts.append(
                NodeVerdict(view.name, False, f"class: it has {', '.join(have)}, not {wanted}")
            )
            continue
        if node.is_cpu:
            ram = usable_gib("llama.cpp", node.memory_gib or 0.0)
            verdicts.append(
                NodeVerdict(
                    view.name,
                    False,
                    f"memory: {ram:.0f} GB of RAM usable, the smallest file of the model is {weights:.0f} GB",
                )
            )
            continue
        by_class: dict[str, list[float]] = {}
        for device in node.devices:
            if not device.busy:
                by_class.setdefault(device.gpu_class.label, []).append(
                    usable_gib("vllm", device.memory_gib)
                )
        if not by_class:
            verdicts.append(NodeVerdict(view.name, False, "free cards: none of its cards is free"))
            continue
        parts = [
            f"{len(sizes)} free {label} ({sum(sizes):.0f} GB usable)"
            for label, sizes in by_class.items()
        ]
        verdicts.append(
            NodeVerdict(
                view.name,
                False,
                f"memory: {', '.join(parts)}; the smallest file of the model is {weights:.0f} GB "
                "before any context, and no way of it fits",
            )
        )
    return tuple(verdicts)


__all__ = ["GIB", "capacity_verdicts"]
