"""The fleet for display: every node's row and page, NVLink racks and totals, from a snapshot.

Pure: every function takes values and returns frozen summaries; one node's
row and page are `views.node`'s, and `SummaryCache` keeps them while the
node's state is the same object, so a poll recomputes only what changed.
What spans nodes lives here: trays grouped into racks by chassis or NVLink
cluster, the fleet's rows in order, its totals in one line.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from llmgw_core.devices import domain_name, is_zero_uuid

# ClassCount and NvlinkMatrix are re-exported: the console imports the node shapes from here.
from llmgw_core.views.node import ClassCount as ClassCount
from llmgw_core.views.node import (
    NodeDetail,
    NodeSummary,
    TrayState,
    facts_mapping,
    failed_adapters,
    imex_text,
    node_detail,
    node_summary,
    tray_state,
)
from llmgw_core.views.node import NvlinkMatrix as NvlinkMatrix


@dataclass(frozen=True)
class TraySummary:
    """A tray (a node) of an NVLink domain: joined, degraded or not joined, and why."""

    node: str
    state: TrayState
    reason: str | None
    gpu_count: int


@dataclass(frozen=True)
class RackSummary:
    """One NVLink domain drawn as a rack: its trays in name order, and IMEX."""

    domain: str
    cluster_uuid: str
    clique_id: str | None
    trays: tuple[TraySummary, ...]
    imex: str | None

    @property
    def joined_gpus(self) -> int:
        """GPUs on trays that take part in the domain (joined or degraded)."""
        return sum(t.gpu_count for t in self.trays if t.state != "not-joined")

    @property
    def total_gpus(self) -> int:
        """Every GPU of every tray of the domain."""
        return sum(t.gpu_count for t in self.trays)


@dataclass(frozen=True)
class RacksSummary:
    """Every NVLink domain of the fleet, and the hosts that belong to none (islands)."""

    racks: tuple[RackSummary, ...]
    islands: tuple[str, ...]
    failed_rails: tuple[str, ...] = ()
    """One line per adapter whose last fabric test failed (`h100-a-01 mlx5_5: 60% of its rate
    with h100-a-02 at …`): replicas across those nodes leave it out of `NCCL_IB_HCA`."""


def _cluster_of(mapping: Mapping[str, Any]) -> tuple[str, str | None] | None:
    domain = mapping.get("nvlink_domain")
    if domain and not is_zero_uuid(str(domain.get("cluster_uuid") or "")):
        return str(domain["cluster_uuid"]), _str_or_none(domain.get("clique_id"))
    # A tray that has not joined reports no domain of its own, but its cards
    # still name the cluster the fabric manager assigned it to.
    for card in mapping.get("cards") or ():
        fabric = card.get("fabric") or {}
        uuid = str(fabric.get("cluster_uuid") or "")
        if not is_zero_uuid(uuid):
            return uuid, _str_or_none(fabric.get("clique_id"))
    return None


def _str_or_none(value: Any) -> str | None:
    return None if value is None else str(value)


def _chassis_of(mapping: Mapping[str, Any]) -> tuple[str | None, int | None]:
    for card in mapping.get("cards") or ():
        platform = card.get("platform") or {}
        if platform.get("chassis_serial"):
            return str(platform["chassis_serial"]), platform.get("tray_index")
    return None, None


def racks_summary(nodes: Iterable[tuple[str, Any]]) -> RacksSummary:
    """Group nodes into racks; nodes in no NVLink domain are islands.

    A rack is a chassis (the trays' shared `chassis_serial`), so a tray that
    has not joined — its cards then report an all-zero cluster — still shows
    in its rack, red, instead of vanishing among the islands. Without
    platform facts, trays group by the cluster their cards report.

    Args:
        nodes: `(name, facts)` pairs; a node without facts yet is an island.
    """
    groups: dict[str, list[tuple[str, Mapping[str, Any], int | None]]] = {}
    clusters: dict[str, tuple[str, str | None]] = {}
    loose: list[str] = []
    failed_rails: list[str] = []
    for name, facts in nodes:
        mapping = facts_mapping(facts)
        failed = failed_adapters(mapping.get("rail_verdicts") or ())
        failed_rails += [f"{name} {adapter}: {found}" for adapter, found in failed.items()]
        chassis, tray_index = _chassis_of(mapping)
        cluster = _cluster_of(mapping)
        key = f"chassis:{chassis}" if chassis else f"cluster:{cluster[0]}" if cluster else None
        if key is None:
            loose.append(name)
            continue
        groups.setdefault(key, []).append((name, mapping, tray_index))
        if cluster is not None:
            clusters.setdefault(key, cluster)
    racks = []
    islands = list(loose)
    for key, members in groups.items():
        if key not in clusters:
            islands.extend(name for name, _, _ in members)
            continue
        uuid, clique = clusters[key]
        ordered = sorted(members, key=lambda m: (m[2] is None, m[2] or 0, m[0]))
        trays = []
        imex: str | None = None
        for name, mapping, _ in ordered:
            state, reason = tray_state(mapping)
            trays.append(TraySummary(name, state, reason, len(mapping.get("cards") or ())))
            imex = imex or imex_text(mapping.get("imex"))
        racks.append(
            RackSummary(
                domain=domain_name({"cluster_uuid": uuid, "clique_id": clique}) or uuid,
                cluster_uuid=uuid,
                clique_id=clique,
                trays=tuple(trays),
                imex=imex,
            )
        )
    racks.sort(key=lambda r: r.domain)
    return RacksSummary(
        racks=tuple(racks), islands=tuple(sorted(islands)), failed_rails=tuple(sorted(failed_rails))
    )


@dataclass(frozen=True)
class FleetSummary:
    """The whole fleet as the console shows it: rows, node pages and racks."""

    nodes: tuple[NodeSummary, ...]
    details: Mapping[str, NodeDetail]
    racks: RacksSummary
    fleet_state: Any = None
    """The snapshot these summaries were made from (what a plan is made against)."""
    fabrics: Mapping[str, tuple[str, ...]] | None = None
    """Each node's fabric names from the inventory."""


@dataclass(frozen=True)
class FleetTotals:
    """The fleet in one line: nodes, ready ones, GPUs free of all, NVLink domains."""

    nodes: int
    ready: int
    gpus_free: int
    gpus_total: int
    nvlink_domains: int
    not_ready: tuple[tuple[str, str, str | None], ...]
    """`(node, state, reason)` for every node that is not ready."""


def fleet_totals(fleet: FleetSummary) -> FleetTotals:
    """Totals of a fleet summary; a CPU node counts no GPU."""
    gpu_counts = [c for n in fleet.nodes if not n.cpu_only for c in n.classes]
    return FleetTotals(
        nodes=len(fleet.nodes),
        ready=sum(1 for n in fleet.nodes if n.state == "ready"),
        gpus_free=sum(c.free for c in gpu_counts),
        gpus_total=sum(c.total for c in gpu_counts),
        nvlink_domains=len(fleet.racks.racks),
        not_ready=tuple((n.name, n.state, n.reason) for n in fleet.nodes if n.state != "ready"),
    )


def _node_states(fleet_state: Any) -> list[Any]:
    nodes = getattr(fleet_state, "nodes", fleet_state)
    if isinstance(nodes, Mapping):
        return list(nodes.values())
    return list(nodes)


class SummaryCache:
    """Each node's row, page and facts mapping, kept while its `NodeState` is the same object."""

    def __init__(self) -> None:
        self.rows: dict[str, tuple[Any, tuple[str, ...], int, NodeSummary, NodeDetail, Any]] = {}

    def row(
        self, node: Any, fabrics: tuple[str, ...], running_shards: int
    ) -> tuple[NodeSummary, NodeDetail, Mapping[str, Any]]:
        """The node's summary, detail and facts mapping (computed when the node changed)."""
        kept = self.rows.get(node.name)
        if kept is not None and kept[0] is node and kept[1:3] == (fabrics, running_shards):
            return kept[3], kept[4], kept[5]
        mapping = facts_mapping(getattr(node, "facts", None))
        summary = node_summary(
            node.name,
            str(getattr(node, "state", "ready")),
            getattr(node, "reason", None),
            mapping,
            fabrics=fabrics,
            running_shards=running_shards,
        )
        detail = node_detail(summary, mapping)
        self.rows[node.name] = (node, fabrics, running_shards, summary, detail, mapping)
        return summary, detail, mapping


def fleet_summary(
    fleet_state: Any,
    fabrics: Mapping[str, Iterable[str]] | None = None,
    cache: SummaryCache | None = None,
) -> FleetSummary:
    """Every summary of a fleet snapshot (`FleetState`: node name → `NodeState`), in its order.

    Args:
        fleet_state: The snapshot (node `name`, `state`, `reason`, `facts`, `running_shards`).
        fabrics: The fabric names the inventory gives each node (named by the operator).
        cache: Rows kept from the previous call (a poller passes its own).
    """
    cache = cache if cache is not None else SummaryCache()
    summaries: list[NodeSummary] = []
    details: dict[str, NodeDetail] = {}
    pairs: list[tuple[str, Any]] = []
    for node in _node_states(fleet_state):
        summary, detail, mapping = cache.row(
            node,
            tuple((fabrics or {}).get(node.name, ())),
            int(getattr(node, "running_shards", 0) or 0),
        )
        summaries.append(summary)
        details[node.name] = detail
        pairs.append((node.name, mapping))
    for gone in cache.rows.keys() - details.keys():
        del cache.rows[gone]
    return FleetSummary(
        nodes=tuple(summaries),
        details=details,
        racks=racks_summary(pairs),
        fleet_state=fleet_state,
        fabrics={name: tuple(names) for name, names in (fabrics or {}).items()},
    )
