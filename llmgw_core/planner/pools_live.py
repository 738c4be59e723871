"""The planner's fleet and placement's node views, built from what the nodes report now (pure).

`pools.Fleet` is the planner's picture of a fleet; a script can describe one,
and this module is the one place that builds the same picture from a live
snapshot (`FleetState`), for the steps and the console's plan screen alike:
each ready node's devices with their class and whether something holds them
(the agents' claims, or what a card reports when the claims were not read),
its NVLink groups from the node's own link matrix, its
fabric from the inventory, and the NVLink domain it is a joined, healthy tray
of. Placement needs a little more than the planner does — the link counts
between cards, why a tray is kept out of its domain, which replica holds a
card, which models a node already has — so `LiveNode` carries that beside
the planner's `Node`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from llmgw_core.errors import BadInput
from llmgw_core.facts import Gpu, NodeFacts, is_zero_uuid
from llmgw_core.fleet.state import FleetState, NodeState
from llmgw_core.inventory import NodeSpec
from llmgw_core.memory.llamacpp import REPACK_TYPES, repack_kind
from llmgw_core.planner.gpu_classes import MIB_PER_GIB, GpuClass, gpu_class
from llmgw_core.planner.pools import Device, Fleet, Node, NvlinkDomain, nvlink_groups_from_matrix

_NVLINK = re.compile(r"^NV(\d+)$")


@dataclass(frozen=True)
class LiveNode:
    """One node as placement sees it now.

    Attributes:
        name: the node's inventory name.
        state: `ready`, `unreachable`, `refused` or `connecting`.
        reason: why it is not ready, when it is not.
        node: the planner's node (devices marked busy where claimed); None when not ready.
        links: NVLink link counts between cards (`links[i][j]`, 18 for NV18).
        fabric: the InfiniBand/RoCE fabric the inventory puts it on, or None.
        domain_problem: why its cards cannot carry a replica across nodes over
            the NVLink domain (not joined, degraded, IMEX down), None when they can
            or when it is in no domain at all.
        holders: the replica holding each claimed device id.
        models: names and paths of the complete models its model dirs hold.
        unplaceable: sentences for cards that can run nothing (MIG on, nothing carved).
    """

    name: str
    state: str
    reason: str | None = None
    node: Node | None = None
    links: tuple[tuple[int, ...], ...] = ()
    fabric: str | None = None
    domain_problem: str | None = None
    holders: Mapping[str, str] = field(default_factory=dict)
    models: frozenset[str] = frozenset()
    unplaceable: tuple[str, ...] = ()

    @property
    def ready(self) -> bool:
        """True when its agent answers and it can be given work."""
        return self.state == "ready" and self.node is not None

    def holds_model(self, names: Iterable[str]) -> bool:
        """True when one of `names` (a repo id, a path) is complete in its model dirs."""
        wanted = {name.strip().rstrip("/").lower() for name in names if name}
        return any(model.lower() in wanted for model in self.models)


def link_matrix(facts: NodeFacts) -> tuple[tuple[int, ...], ...]:
    """The NVLink link counts between a node's cards, from its `nvidia-smi topo -m` matrix.

    `NV18` counts 18 links; PIX, PXB, PHB, NODE and SYS are PCIe or CPU paths: 0.
    """
    size = max((card.index for card in facts.cards), default=-1) + 1
    rows = []
    for i in range(size):
        row = []
        for j in range(size):
            text = facts.nvlink.get(str(i), {}).get(str(j), "")
            match = _NVLINK.match(text.strip())
            row.append(int(match.group(1)) if match and i != j else 0)
        rows.append(tuple(row))
    return tuple(rows)


def _card_class(gpu: Gpu, links: tuple[tuple[int, ...], ...]) -> GpuClass:
    """The class of a device: the known table's figures, else what the card reports."""
    try:
        return gpu_class(gpu.gpu_class)
    except BadInput:
        pass  # a class our table does not know: described by the card's own figures below
    capability = float(gpu.compute_capability) if gpu.compute_capability else 0.0
    row = links[gpu.card_index] if gpu.card_index < len(links) else ()
    return GpuClass(
        label=gpu.gpu_class,
        name=gpu.name,
        memory_gib=round((gpu.memory_mib or 0) / MIB_PER_GIB, 2),
        compute_capability=capability,
        nvlink=any(row) and gpu.mig_profile is None,
        mig_profile=gpu.mig_profile,
    )


def _domain(facts: NodeFacts) -> tuple[NvlinkDomain | None, str | None]:
    """The node's NVLink domain as the planner pools it, and why it cannot be used.

    A tray counts as in its domain only when every card joined with full
    bandwidth and IMEX is up with a channel: NCCL told to use multi-node
    NVLink fails its first collective otherwise.
    """
    fabrics = [card.fabric for card in facts.cards if card.fabric is not None]
    clusters = {f.cluster_uuid for f in fabrics if not is_zero_uuid(f.cluster_uuid)}
    verdicts = [f.verdict for f in fabrics]
    in_rack = any(card.platform and card.platform.chassis_serial for card in facts.cards)
    if facts.nvlink_domain is None and not clusters:
        if "not-joined" in verdicts or "unhealthy" in verdicts:
            status = next((f.status for f in fabrics if f.status), "no status")
            return None, f"its cards have not joined the NVLink domain ({status})"
        if in_rack and verdicts and all(v == "local" for v in verdicts):
            return None, None
        return None, None
    cluster = facts.nvlink_domain.cluster_uuid if facts.nvlink_domain else sorted(clusters)[0]
    clique = (facts.nvlink_domain.clique_id if facts.nvlink_domain else None) or 0
    problem = None
    if any(v in ("not-joined", "unhealthy") for v in verdicts):
        count = sum(1 for v in verdicts if v in ("not-joined", "unhealthy"))
        problem = f"{count} of its cards have not joined the NVLink domain"
    elif "degraded" in verdicts:
        bandwidth = next((f.health.bandwidth for f in fabrics if f.health.bandwidth), "degraded")
        problem = f"its NVLink bandwidth is {bandwidth.lower()}, so it is kept out of the domain"
    imex_up = facts.imex is not None and (facts.imex.state or "").upper() == "UP"
    channels = facts.imex_channels or (facts.imex.channels if facts.imex else ())
    if problem is None and not imex_up:
        state = facts.imex.state if facts.imex and facts.imex.state else "not running"
        problem = f"IMEX is {state.lower()}, so its cards cannot share memory across nodes"
    elif problem is None and not channels:
        problem = "IMEX has no channel device, so its cards cannot share memory across nodes"
    domain = NvlinkDomain(
        name=cluster,
        cluster_uuid=cluster,
        clique_id=clique,
        joined=problem is None or problem.startswith("IMEX"),
        imex_up=imex_up and bool(channels),
    )
    return domain, problem


def _models(facts: NodeFacts) -> frozenset[str]:
    found: set[str] = set()
    for directory in facts.model_dirs.values():
        for model in directory.models:
            if model.state == "complete":
                found.update({model.name.rstrip("/"), model.path.rstrip("/")})
    return frozenset(found)


def _busy(gpu: Gpu, claimed: Mapping[str, str] | None) -> bool:
    """Whether a device is taken: by a replica's claim when the claims were read, else by
    what the card itself reports (a process on it, or its memory held)."""
    if claimed is not None:
        return str(gpu.id) in claimed
    return gpu.in_use


def live_node(
    name: str,
    state: NodeState,
    *,
    fabric: str | None = None,
    claimed: Mapping[str, str] | None = None,
) -> LiveNode:
    """One node's view from its last state, its fabric and the claims on it.

    Args:
        name: the node's inventory name.
        state: the node as the fleet last saw it.
        fabric: the InfiniBand/RoCE fabric the inventory puts it on (its first), or None.
        claimed: device id → the replica holding it (from the agent's `claims`); None
            when the claims were not read, and a card then counts busy when it
            reports a process or memory in use.
    """
    facts = state.facts
    if state.state != "ready" or facts is None:
        return LiveNode(name=name, state=state.state, reason=state.reason, fabric=fabric)
    links = link_matrix(facts)
    devices = tuple(
        Device(
            index=gpu.id,
            label=gpu.label,
            gpu_class=_card_class(gpu, links),
            busy=_busy(gpu, claimed),
        )
        for gpu in facts.gpus
    )
    domain, problem = _domain(facts)
    whole = [d.index for d in devices if not d.gpu_class.is_mig]
    groups = tuple(
        tuple(i for i in group if i in whole)
        for group in nvlink_groups_from_matrix(links)
        if len([i for i in group if i in whole]) > 1
    )
    node = Node(
        name=name,
        devices=devices,
        memory_gib=(facts.host.memory_mib / MIB_PER_GIB) if facts.host.memory_mib else None,
        fabric=fabric,
        nvlink_domain=domain,
        nvlink_groups=groups,
        repack_types=REPACK_TYPES[repack_kind(facts.host.arch, facts.host.cpu_flags)],
        numa_memory_gib=tuple(
            sorted(
                (numa.memory_mib / MIB_PER_GIB for numa in facts.host.numa_nodes or ()),
                reverse=True,
            )
        ),
    )
    unplaceable = tuple(
        f"card {card.index}: {card.out_of_placement}"
        for card in facts.cards
        if card.out_of_placement
    )
    return LiveNode(
        name=name,
        state=state.state,
        reason=state.reason,
        node=node,
        links=links,
        fabric=fabric,
        domain_problem=problem,
        holders=dict(claimed or {}),
        models=_models(facts),
        unplaceable=unplaceable,
    )


def live_nodes(
    snapshot: FleetState,
    specs: Iterable[NodeSpec] | Mapping[str, Sequence[str]],
    claims: Mapping[str, Mapping[str, str]] | None = None,
) -> tuple[LiveNode, ...]:
    """Every node's view: the one way live facts become the planner's and placement's nodes.

    The steps pass the inventory's nodes (views in inventory order, a node
    the fleet has not seen yet as `connecting`); the console passes the
    fabric names its fleet summary keeps per node (views in the snapshot's
    order). A node's first fabric is its fabric.

    Args:
        snapshot: the fleet as last seen.
        specs: the inventory's nodes, or node name → its fabric names.
        claims: per node, device id → the replica holding it; None when the
            claims were not read (cards are then busy by what they report).
    """
    if isinstance(specs, Mapping):
        fabrics = {name: tuple(specs.get(name, ())) for name in snapshot.nodes}
    else:
        fabrics = {spec.name: tuple(f.name for f in spec.fabrics) for spec in specs}
    return tuple(
        live_node(
            name,
            snapshot.nodes.get(name) or NodeState(name=name),
            fabric=names[0] if names else None,
            claimed=None if claims is None else claims.get(name, {}),
        )
        for name, names in fabrics.items()
    )


def planner_fleet(views: Iterable[LiveNode]) -> Fleet:
    """The planner's fleet: the ready nodes, their devices marked busy where taken."""
    return Fleet.from_nodes(view.node for view in views if view.node is not None)
