"""Where a replica goes: a way's cards put on nodes, and why every other node was passed over (pure).

The rules, each in one function:

* a node offers a replica the free devices of the wanted class only — a
  claimed card is never given twice (`node_offer`);
* inside a node, tensor parallel takes the cards with the most NVLink between
  them; a MIG instance serves a replica alone;
* a replica across nodes stays inside one NVLink domain (every card of each
  tray joined at full bandwidth, IMEX up) when one has room, and otherwise
  on one InfiniBand/RoCE fabric — never two, never a node with neither
  (`_groups`);
* a node that already holds the model is preferred, never required.

`place` returns the nodes and cards, `explain` says node by node why each
was not chosen: class, free cards, NVLink, fabric, domain joined, IMEX, MIG,
memory, or unreachable.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from llmgw_core.memory import DEFAULT_USABLE_FRACTION
from llmgw_core.planner.pools_live import LiveNode

DOMAIN = "nvlink-domain"
FABRIC = "fabric"


@dataclass(frozen=True)
class Want:
    """What one replica needs of the fleet.

    Attributes:
        gpu_class: the class of device (`h100-80g`); None for a CPU node.
        cards_per_node: devices on each node (0 on a CPU node).
        nodes: how many nodes.
        nvlink_inside: the cards of a node must share NVLink (tensor parallel).
        ram_gib: on a CPU node, the RAM the replica needs.
        ram_share: the share of a CPU node's RAM the engine may use.
        numa_nodes: on a CPU node, the NUMA nodes the replica takes (vLLM: one a rank).
        interconnect: the interconnect the plan sized it for, tried first.
        models: names the model goes by on the nodes (repo id, path), to prefer a node holding it.
    """

    gpu_class: str | None
    cards_per_node: int
    nodes: int = 1
    nvlink_inside: bool = True
    ram_gib: float = 0.0
    ram_share: float = DEFAULT_USABLE_FRACTION
    numa_nodes: int = 0
    interconnect: str | None = None
    models: tuple[str, ...] = ()

    def describe(self) -> str:
        """`2 nodes × 8 h100-80g`, `4 h100-80g`, `a CPU node`."""
        if self.gpu_class is None:
            return "a CPU node"
        cards = f"{self.cards_per_node} {self.gpu_class}"
        return f"{self.nodes} nodes × {cards}" if self.nodes > 1 else cards


@dataclass(frozen=True)
class PlacedNode:
    """One node of a placement: its rank and the device ids it is given."""

    node: str
    rank: int
    gpu_ids: tuple[str, ...]
    holds_model: bool = False


@dataclass(frozen=True)
class Placement:
    """A replica's nodes and cards.

    Attributes:
        nodes: rank order.
        fabric: the InfiniBand/RoCE fabric the ranks talk over, None when one node or a domain.
        nvlink_domain: the NVLink domain (cluster UUID) the ranks talk over, else None.
    """

    nodes: tuple[PlacedNode, ...]
    fabric: str | None = None
    nvlink_domain: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """The placement as the steps' JSON gives it."""
        return {
            "nodes": [
                {
                    "node": n.node,
                    "rank": n.rank,
                    "gpus": list(n.gpu_ids),
                    "holds_model": n.holds_model,
                }
                for n in self.nodes
            ],
            "fabric": self.fabric,
            "nvlink_domain": self.nvlink_domain,
        }


@dataclass(frozen=True)
class Offer:
    """What one node can give a replica: device ids, or the reason it cannot."""

    node: str
    gpu_ids: tuple[str, ...] | None
    reason: str | None = None


@dataclass(frozen=True)
class NodeVerdict:
    """One line of `explain`: a node, whether it was chosen, and why not."""

    node: str
    chosen: bool
    reason: str

    def as_dict(self) -> dict[str, Any]:
        """The verdict as JSON."""
        return {"node": self.node, "chosen": self.chosen, "reason": self.reason}


def _plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def _holders(view: LiveNode, ids: Iterable[int]) -> str:
    replicas = sorted({view.holders[str(i)] for i in ids if str(i) in view.holders})
    return f" (held by {', '.join(replicas)})" if replicas else ""


def _cpu_offer(want: Want, view: LiveNode) -> Offer:
    node = view.node
    assert node is not None
    if not node.is_cpu:
        return Offer(view.name, None, "class: it has GPUs, and this way runs on a CPU node")
    ram = (node.memory_gib or 0.0) * want.ram_share
    if ram < want.ram_gib:
        return Offer(
            view.name,
            None,
            f"memory: {ram:.0f} GB of its RAM is usable, the replica needs {want.ram_gib:.1f}",
        )
    if want.numa_nodes > node.numa_count:
        return Offer(
            view.name,
            None,
            f"NUMA: it has {_plural(node.numa_count, 'NUMA node')}, and this way puts a rank on"
            f" each of {want.numa_nodes}",
        )
    return Offer(view.name, ())


def node_offer(want: Want, view: LiveNode) -> Offer:
    """The devices `view` can give `want` on its own, or the first reason it cannot.

    Ignores the interconnect between nodes (see `place`): this is the node alone.
    """
    if not view.ready:
        why = f": {view.reason}" if view.reason else ""
        return Offer(view.name, None, f"unreachable: it is {view.state}{why}")
    node = view.node
    assert node is not None
    if want.gpu_class is None:
        return _cpu_offer(want, view)
    if node.is_cpu:
        return Offer(
            view.name, None, f"class: a CPU node, and this way needs {want.gpu_class} cards"
        )
    own = node.devices_of(want.gpu_class)
    if not own:
        classes = sorted({d.gpu_class.label for d in node.devices})
        text = f"class: it has {', '.join(classes)}, not {want.gpu_class}"
        if view.unplaceable:
            text += f"; {view.unplaceable[0]}"
        return Offer(view.name, None, text)
    label = want.gpu_class
    if own[0].gpu_class.is_mig and want.cards_per_node != 1:
        return Offer(
            view.name,
            None,
            f"MIG: a {label} instance serves a replica alone, and this way needs "
            f"{want.cards_per_node} devices",
        )
    free = [d for d in own if not d.busy]
    if len(free) < want.cards_per_node:
        busy = [d.index for d in own if d.busy]
        return Offer(
            view.name,
            None,
            f"free cards: {len(free)} of its {_plural(len(own), label + ' device')} "
            f"{'is' if len(free) == 1 else 'are'} free, this way needs "
            f"{want.cards_per_node}{_holders(view, busy)}",
        )
    if want.cards_per_node == 1:
        return Offer(view.name, (str(free[0].index),))
    links = view.links
    chosen = node.choose_nvlink_cards(label, want.cards_per_node, links) if links else ()
    if chosen:
        return Offer(view.name, tuple(str(i) for i in chosen))
    if want.nvlink_inside:
        widest = node.widest_nvlink_set(label, free_only=True)
        return Offer(
            view.name,
            None,
            f"NVLink: no {want.cards_per_node} free {label} cards share NVLink "
            f"(the most that do: {widest})",
        )
    return Offer(view.name, tuple(str(d.index) for d in free[: want.cards_per_node]))


def _interconnect_problem(view: LiveNode) -> str:
    """Why a node offers no interconnect to a replica across nodes."""
    if view.domain_problem:
        return f"domain: {view.domain_problem}, and it is on no fabric"
    return "fabric: it is on no InfiniBand/RoCE fabric and in no NVLink domain"


def _groups(want: Want, views: Sequence[LiveNode]) -> list[tuple[str, str, list[LiveNode]]]:
    """The interconnects a replica across nodes may use, best first (`interconnect_groups`,
    the plan's own first)."""
    return interconnect_groups(views, want.interconnect)


def interconnect_groups(
    views: Sequence[LiveNode], prefer: str | None = None
) -> list[tuple[str, str, list[LiveNode]]]:
    """The interconnects nodes share, as (kind, name, nodes), best first.

    NVLink domains (every card joined, IMEX up) before fabrics; `prefer` (the
    interconnect a plan sized a replica for) first within each kind; then the
    one with the most nodes.
    """
    grouped: dict[tuple[str, str], list[LiveNode]] = {}
    for view in views:
        node = view.node
        if node is None:
            continue
        domain = node.nvlink_domain
        if domain is not None and domain.usable:
            grouped.setdefault((DOMAIN, domain.key), []).append(view)
        if node.fabric:
            grouped.setdefault((FABRIC, node.fabric), []).append(view)
    ordered = sorted(
        grouped.items(),
        key=lambda item: (
            item[0][0] != DOMAIN,
            item[0][1] != prefer,
            -len(item[1]),
            item[0][1],
        ),
    )
    return [(kind, name, members) for (kind, name), members in ordered]


def _free_of_class(want: Want, view: LiveNode) -> int:
    node = view.node
    if node is None or want.gpu_class is None:
        return 0
    return node.count_of(want.gpu_class, free_only=True)


def _preference(want: Want, views: Sequence[LiveNode]) -> list[LiveNode]:
    """Nodes holding the model first; then the fullest that fits (whole nodes stay whole
    for the replicas that need them); then the fleet's own order."""
    return sorted(
        views, key=lambda view: (not view.holds_model(want.models), _free_of_class(want, view))
    )


def place(want: Want, views: Sequence[LiveNode]) -> Placement | None:
    """Nodes and cards for `want`, or None when the fleet has no room for it now."""
    offers = {view.name: node_offer(want, view) for view in views}
    able = [view for view in views if offers[view.name].gpu_ids is not None]
    if want.nodes <= 1:
        if not able:
            return None
        best = _preference(want, able)[0]
        ids = offers[best.name].gpu_ids or ()
        return Placement((PlacedNode(best.name, 0, ids, best.holds_model(want.models)),))
    for kind, name, members in _groups(want, able):
        if len(members) < want.nodes:
            continue
        chosen = _preference(want, members)[: want.nodes]
        placed = tuple(
            PlacedNode(
                view.name, rank, offers[view.name].gpu_ids or (), view.holds_model(want.models)
            )
            for rank, view in enumerate(chosen)
        )
        if kind == DOMAIN:
            node = chosen[0].node
            assert node is not None and node.nvlink_domain is not None
            return Placement(placed, nvlink_domain=node.nvlink_domain.cluster_uuid or name)
        return Placement(placed, fabric=name)
    return None


def explain(
    want: Want, views: Sequence[LiveNode], placement: Placement | None = None
) -> tuple[NodeVerdict, ...]:
    """Node by node, whether it was chosen for `want` and, when not, why not.

    Args:
        want: what the replica needs.
        views: every node of the fleet, ready or not.
        placement: the placement made, when one was (else the one `place` finds).
    """
    placement = placement if placement is not None else place(want, views)
    chosen = {p.node: p for p in placement.nodes} if placement else {}
    verdicts = []
    for view in views:
        if view.name in chosen:
            ids = ", ".join(chosen[view.name].gpu_ids) or "its RAM"
            verdicts.append(
                NodeVerdict(view.name, True, f"chosen: rank {chosen[view.name].rank} on {ids}")
            )
            continue
        offer = node_offer(want, view)
        if offer.reason is not None:
            verdicts.append(NodeVerdict(view.name, False, offer.reason))
            continue
        verdicts.append(
            NodeVerdict(view.name, False, _why_not_with_room(want, view, views, placement))
        )
    return tuple(verdicts)


def _why_not_with_room(
    want: Want, view: LiveNode, views: Sequence[LiveNode], placement: Placement | None
) -> str:
    """A node that could give its share, yet was not chosen."""
    node = view.node
    assert node is not None
    if want.nodes > 1:
        domain = node.nvlink_domain
        in_domain = domain is not None and domain.usable
        if not in_domain and not node.fabric:
            return _interconnect_problem(view)
        if placement is not None:
            if placement.nvlink_domain and not (
                in_domain and (domain.cluster_uuid or domain.name) == placement.nvlink_domain
            ):
                where = (
                    f"domain: {view.domain_problem}"
                    if view.domain_problem
                    else "domain: outside it"
                )
                return f"{where}; the replica is inside NVLink domain {placement.nvlink_domain}"
            if placement.fabric and node.fabric != placement.fabric:
                return (
                    f"fabric: on {node.fabric or 'no fabric'}, the replica is on {placement.fabric}"
                )
            return "not needed: the replica has its nodes"
        able = [v for v in views if node_offer(want, v).gpu_ids is not None]
        sizes = {name: len(members) for _kind, name, members in _groups(want, able)}
        mine = [
            name
            for name in (domain.key if in_domain and domain else None, node.fabric)
            if name is not None
        ]
        room = ", ".join(f"{sizes.get(name, 1)} on {name}" for name in mine)
        return f"fabric: too few nodes with room share an interconnect with it ({room}; {want.nodes} needed)"
    if placement is not None:
        return "not needed: another node was chosen"
    return "not chosen"


def want_summary(verdicts: Sequence[NodeVerdict]) -> str:
    """The reasons in one line: the nodes of the right class first, the others counted.

    `h100-a-01: free cards: …; h100-a-02: fabric: …; 21 other nodes: another class`.
    """
    passed = [v for v in verdicts if not v.chosen]
    near = [f"{v.node}: {v.reason}" for v in passed if not v.reason.startswith("class:")]
    other = len(passed) - len(near)
    shown = near[:4]
    more = len(near) - len(shown)
    if more > 0:
        shown.append(f"and {more} more")
    if other:
        shown.append(f"{other} other node{'s' if other > 1 else ''}: another class")
    return "; ".join(shown)
