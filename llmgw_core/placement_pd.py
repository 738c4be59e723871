"""Where a disaggregated service's prefill and decode workers go, and what carries the KV (pure).

Every request's KV cache crosses from a prefill worker to a decode worker,
so the two sides are placed *together*, on one interconnect, in this order:

* inside one NVLink domain (an NVL72 rack) when it has room for both sides:
  the KV moves card to card over NVLink (`nvlink`);
* else on the nodes of one InfiniBand/RoCE fabric, over the rails whose
  last fabric test between those nodes did not fail — a failed rail is left
  out of the transfer's device list as it is out of `NCCL_IB_HCA`
  (`fabric.rails.failed_rails`, the one rule for both); a node left with no
  passing rail is no place for a worker;
* else on one node alone that holds both (a node on no fabric is an island).

Never across two fabrics, and never over TCP unless the document says
`allow_tcp: true`: a KV cache of a few GB per long prompt over the
management network costs more time than the split saves. When nothing fits
the refusal names, interconnect by interconnect, what was missing — and says
when TCP would have placed it.

Each side's replicas are placed one after the other by `placement.place`,
the cards each took marked busy before the next, so the sides never share a
card and every single-replica rule (NVLink inside a node, MIG, a node
holding the model) holds as it does for any replica.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from llmgw_core.engines.spec import FabricAdapter
from llmgw_core.fabric.rails import RailLeftOut, failed_rails
from llmgw_core.placement import DOMAIN, Placement, Want, interconnect_groups, place
from llmgw_core.planner.pools_live import LiveNode

if TYPE_CHECKING:
    from llmgw_core.facts import RailVerdict

NODE = "node"
TCP = "tcp"


@dataclass(frozen=True)
class PdWant:
    """What a disaggregated service needs: each side's replica and how many of each.

    Attributes:
        prefill, decode: one replica of each side (its cards, nodes, class).
        prefill_replicas, decode_replicas: how many of each (at least one).
        allow_tcp: a transfer over the management network may be placed where no rail
            or NVLink joins the sides.
    """

    prefill: Want
    decode: Want
    prefill_replicas: int = 1
    decode_replicas: int = 1
    allow_tcp: bool = False

    def describe(self) -> str:
        """`2 prefill (4 h100-80g) and 2 decode (4 h100-80g)`."""
        return (
            f"{self.prefill_replicas} prefill ({self.prefill.describe()}) and "
            f"{self.decode_replicas} decode ({self.decode.describe()})"
        )


@dataclass(frozen=True)
class PdPlacement:
    """Both sides placed, and the path their KV takes.

    Attributes:
        prefill, decode: each replica's placement.
        transport: `node` (one node), `nvlink` (an NVLink domain), `infiniband`, `roce`, `tcp`.
        interconnect: the domain's key, the fabric's or the node's name; None over TCP.
        rails: per node, the adapters the transfer uses (empty off a fabric).
        left_out: rails a failed fabric test keeps out of the transfer.
        warnings: sentences to show (a rail left out, TCP allowed and taken).
        measured_gbps: the slowest node's rails together, as their last tests between the
            service's nodes measured them, Gb/s; None when no test measured them.
    """

    prefill: tuple[Placement, ...]
    decode: tuple[Placement, ...]
    transport: str
    interconnect: str | None
    rails: Mapping[str, tuple[FabricAdapter, ...]] = field(default_factory=dict)
    left_out: tuple[RailLeftOut, ...] = ()
    warnings: tuple[str, ...] = ()
    measured_gbps: float | None = None

    @property
    def nodes(self) -> tuple[str, ...]:
        """Every node either side uses, in the order they were placed."""
        seen: dict[str, None] = {}
        for placement in (*self.prefill, *self.decode):
            for placed in placement.nodes:
                seen.setdefault(placed.node)
        return tuple(seen)

    def path(self) -> str:
        """The KV's path for people: `KV over mlx5_0, mlx5_1 (InfiniBand, ib-a)`."""
        if self.transport == NODE:
            return f"KV inside {self.interconnect} (NVLink or PCIe between its cards)"
        if self.transport == "nvlink":
            return f"KV over NVLink inside domain {self.interconnect}"
        if self.transport == TCP:
            return "KV over TCP on the management network (allow_tcp): slow"
        names = sorted({a.name for rails in self.rails.values() for a in rails})
        kind = "RoCE" if self.transport == "roce" else "InfiniBand"
        return f"KV over {', '.join(names)} ({kind}, {self.interconnect})"

    def as_dict(self) -> dict[str, Any]:
        """The placement as the steps' JSON gives it."""
        return {
            "prefill": [p.as_dict() for p in self.prefill],
            "decode": [p.as_dict() for p in self.decode],
            "transport": self.transport,
            "interconnect": self.interconnect,
            "path": self.path(),
            "rails": {node: [a.name for a in rails] for node, rails in self.rails.items()},
            "rails_left_out": [rail.as_dict() for rail in self.left_out],
            "measured_gbps": self.measured_gbps,
            "warnings": list(self.warnings),
        }


@dataclass(frozen=True)
class PdRefused:
    """No interconnect has room for both sides: why, interconnect by interconnect."""

    reasons: tuple[str, ...]
    tcp_would_fit: bool = False

    def sentence(self, want: PdWant) -> str:
        """One sentence: what was wanted, each interconnect's shortfall, and the TCP hint."""
        tried = "; ".join(self.reasons) or "no node is ready"
        text = f"no interconnect has room for {want.describe()} together: {tried}"
        if self.tcp_would_fit:
            text += (
                "; they would fit only across interconnects, and the KV cache never crosses two"
                " (allow_tcp: true sends it over TCP on the management network, slowly)"
            )
        return text


def _claimed(views: Sequence[LiveNode], placement: Placement, holder: str) -> list[LiveNode]:
    """`views` with the cards `placement` took marked busy (held by `holder`)."""
    taken = {p.node: {int(i) for i in p.gpu_ids if i.isdigit()} for p in placement.nodes}
    found = []
    for view in views:
        ids = taken.get(view.name)
        if not ids or view.node is None:
            found.append(view)
            continue
        devices = tuple(replace(d, busy=True) if d.index in ids else d for d in view.node.devices)
        holders = {**view.holders, **{str(i): holder for i in ids}}
        found.append(replace(view, node=replace(view.node, devices=devices), holders=holders))
    return found


def _groups(views: Sequence[LiveNode]) -> list[tuple[str, str, list[LiveNode]]]:
    """NVLink domains, then fabrics (`placement.interconnect_groups`), then islands: each
    ready node on neither, alone."""
    groups = interconnect_groups(views)
    grouped = {view.name for _kind, _name, members in groups for view in members}
    islands = [v for v in views if v.node is not None and v.name not in grouped]
    return groups + [(NODE, view.name, [view]) for view in islands]


def _has_class(view: LiveNode, classes: set[str | None]) -> bool:
    node = view.node
    if node is None:
        return False
    if None in classes and node.is_cpu:
        return True
    return any(d.gpu_class.label in classes for d in node.devices)


def _both_sides(
    want: PdWant, members: Sequence[LiveNode]
) -> tuple[tuple[Placement, ...], tuple[Placement, ...]] | str:
    """Every replica of both sides on `members`, or what ran out."""
    views = list(members)
    placed: dict[str, list[Placement]] = {"prefill": [], "decode": []}
    sides = (
        ("prefill", want.prefill, want.prefill_replicas),
        ("decode", want.decode, want.decode_replicas),
    )
    for side, one, count in sides:
        for index in range(count):
            placement = place(one, views)
            if placement is None:
                return f"room for {index} of {count} {side} replicas ({one.describe()})"
            placed[side].append(placement)
            views = _claimed(views, placement, f"{side}-{index + 1}")
    return tuple(placed["prefill"]), tuple(placed["decode"])


def _passing_rails(
    nodes: Sequence[str],
    adapters: Mapping[str, Sequence[FabricAdapter]],
    verdicts: Mapping[str, Sequence[RailVerdict]],
) -> tuple[dict[str, tuple[FabricAdapter, ...]], list[RailLeftOut], str | None]:
    """Each node's rails less those failed against another node of the service, or why a
    node has none left."""
    rails: dict[str, tuple[FabricAdapter, ...]] = {}
    left_out: list[RailLeftOut] = []
    for node in nodes:
        own = tuple(adapters.get(node, ()))
        failed = failed_rails(node, nodes, verdicts.get(node, ()))
        kept = tuple(a for a in own if a.name not in failed)
        left_out += [rail for name, rail in failed.items() if any(a.name == name for a in own)]
        if not kept:
            why = "every rail failed its last fabric test" if own else "no rail is named for it"
            return {}, left_out, f"{node}: {why}"
        rails[node] = kept
    return rails, left_out, None


def _measured_gbps(
    rails: Mapping[str, Sequence[FabricAdapter]], verdicts: Mapping[str, Sequence[RailVerdict]]
) -> float | None:
    """The slowest node's rails together, from the newest measurement of each against a peer
    of the service; None when any node's rails were never measured."""
    totals = []
    peers = set(rails)
    for node, own in rails.items():
        total = 0.0
        for adapter in own:
            measured = [
                v
                for v in verdicts.get(node, ())
                if v.peer in peers - {node}
                and v.adapter.partition(":")[0] == adapter.name
                and v.measured_gbps
            ]
            if not measured:
                return None
            total += max(measured, key=lambda v: v.measured_at).measured_gbps or 0.0
        totals.append(total)
    return min(totals) if totals else None


def place_disaggregated(
    want: PdWant,
    views: Sequence[LiveNode],
    adapters: Mapping[str, Sequence[FabricAdapter]] | None = None,
    verdicts: Mapping[str, Sequence[RailVerdict]] | None = None,
) -> PdPlacement | PdRefused:
    """Both sides of a disaggregated service on one interconnect, or why none has room.

    Args:
        want: each side's replica and how many.
        views: every node of the fleet.
        adapters: each node's adapters on its fabric, as the inventory names them and the
            node reports them (link layer, GID index).
        verdicts: each node's kept fabric verdicts (its facts' `rail_verdicts`).
    """
    adapters = adapters or {}
    verdicts = verdicts or {}
    reasons: list[str] = []
    classes = {want.prefill.gpu_class, want.decode.gpu_class}
    for kind, name, members in _groups(views):
        if not any(_has_class(view, classes) for view in members):
            continue  # an interconnect of other cards says nothing worth reading
        sides = _both_sides(want, members)
        if isinstance(sides, str):
            reasons.append(f"{name}: {sides}")
            continue
        prefill, decode = sides
        found = PdPlacement(prefill, decode, NODE, name)
        used = found.nodes
        if len(used) == 1:
            # One node: nothing crosses a rail, but Mooncake moves even a node's KV by RDMA
            # and is given the node's adapters (NIXL keeps it on the cards: `cuda_ipc`).
            own = tuple(adapters.get(used[0], ()))
            return replace(found, interconnect=used[0], rails={used[0]: own} if own else {})
        if kind == DOMAIN:
            return replace(found, transport="nvlink")
        rails, left_out, problem = _passing_rails(used, adapters, verdicts)
        if problem is not None:
            reasons.append(f"{name}: {problem}")
            continue
        roce = any(a.is_roce for node_rails in rails.values() for a in node_rails)
        warnings = tuple(
            f"{rail.adapter} on {rail.node} is left out of the KV transfer's devices: "
            f"its fabric test measured {rail.finding()}"
            for rail in left_out
        )
        return replace(
            found,
            transport="roce" if roce else "infiniband",
            rails=rails,
            left_out=tuple(left_out),
            warnings=warnings,
            measured_gbps=_measured_gbps(rails, verdicts),
        )
    anywhere = _both_sides(want, [v for v in views if v.node is not None])
    if isinstance(anywhere, str):
        return PdRefused(tuple(reasons))
    if not want.allow_tcp:
        return PdRefused(tuple(reasons), tcp_would_fit=True)
    prefill, decode = anywhere
    return PdPlacement(
        prefill,
        decode,
        TCP,
        None,
        warnings=("the KV cache crosses the management network over TCP (allow_tcp): slowly",),
    )
