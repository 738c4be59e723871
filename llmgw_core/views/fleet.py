"""Fleet summaries for display: what the console and the `nodes` step show, computed once.

Pure: every function takes a node's state and facts as values and returns
frozen summaries. The console draws these and computes nothing of its own, so
the headless runner can print the very same figures.

Facts are read through the wire contract of the agent (`cards`, `gpus`,
`nvlink`, `adapters`, `nvlink_domain`, `imex`, `host`); a pydantic facts model
is accepted too and read through its JSON form, so the two cannot disagree.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from llmgw_core.devices import device_in_use, domain_name, is_zero_uuid
from llmgw_core.planner.gpu_classes import MIB_PER_GIB

TrayState = Literal["joined", "degraded", "not-joined"]


@dataclass(frozen=True)
class ClassCount:
    """Free and total devices of one GPU class on a node (or a CPU node's RAM)."""

    gpu_class: str
    free: int
    total: int


@dataclass(frozen=True)
class NodeSummary:
    """One row of the fleet: a node at a glance."""

    name: str
    state: str
    reason: str | None
    classes: tuple[ClassCount, ...]
    fabrics: tuple[str, ...]
    nvlink_domain: str | None
    running_shards: int
    cpu_only: bool
    ram_gib: int | None = None
    """Host RAM, GiB (what a CPU node offers a GGUF model), None before facts."""


@dataclass(frozen=True)
class DeviceRow:
    """A device placement sees on a node: a whole card, or one MIG instance (`3/mig1`)."""

    label: str
    gpu_class: str
    memory_used_mib: int | None
    memory_total_mib: int | None
    utilisation_pct: int | None
    temperature_c: int | None
    power_w: float | None
    numa_node: int | None
    nearest_nic: str | None
    is_mig: bool
    free: bool
    fabric: str | None
    """The card's NVLink fabric verdict (`joined`, `degraded`, `not-joined`, `local` …), or None."""


@dataclass(frozen=True)
class AdapterRow:
    """A network adapter port: state, rate and link layer (InfiniBand, or Ethernet = RoCE)."""

    name: str
    port: int | None
    state: str | None
    rate_gbps: float | None
    rated_gbps: float | None
    link_layer: str | None
    gid_index: int | None
    rail_failed: str | None = None
    """What its last failed fabric test found (`60% of its rate with h100-a-02 at …`): a
    multi-node replica across those nodes leaves it out of `NCCL_IB_HCA`. None: not failed."""

    @property
    def below_rated(self) -> bool:
        """True when the port trained below the speed it is rated for (a degraded rail)."""
        return bool(self.rate_gbps and self.rated_gbps and self.rate_gbps < self.rated_gbps)


@dataclass(frozen=True)
class NvlinkMatrix:
    """The GPU × GPU link kinds (`NV18`, `PIX`, `SYS` …) in card order; `X` on the diagonal."""

    labels: tuple[str, ...]
    cells: tuple[tuple[str, ...], ...]


@dataclass(frozen=True)
class NodeDetail:
    """Everything the node page shows about one node."""

    summary: NodeSummary
    devices: tuple[DeviceRow, ...]
    nvlink: NvlinkMatrix
    adapters: tuple[AdapterRow, ...]
    nvlink_domain: str | None
    imex: str | None
    host: tuple[tuple[str, str], ...]
    fabric_problem: str | None
    """What keeps the node's cards out of (or weak in) their NVLink domain, else None."""


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


def facts_mapping(facts: Any) -> Mapping[str, Any]:
    """A node's facts as the agent's JSON mapping, whether given as a dict or a pydantic model."""
    if facts is None:
        return {}
    if isinstance(facts, Mapping):
        return facts
    dump = getattr(facts, "model_dump", None)
    if dump is not None:
        return dump(mode="json", by_alias=True)
    raise TypeError(f"facts of type {type(facts).__name__} are neither a mapping nor a model")


def _first(device: Mapping[str, Any], card: Mapping[str, Any], key: str) -> Any:
    """The device's own figure, else its card's (a MIG instance reports heat on the card)."""
    value = device.get(key)
    return card.get(key) if value is None else value


def _as_int(value: Any) -> int | None:
    return None if value is None else round(float(value))


def _as_float(value: Any) -> float | None:
    return None if value is None else float(value)


def device_is_free(device: Mapping[str, Any]) -> bool:
    """A device is free when no process holds it and little of its memory is used."""
    return not device_in_use(bool(device.get("processes")), _as_int(device.get("memory_used_mib")))


def class_counts(facts: Any) -> tuple[ClassCount, ...]:
    """Free/total devices by class, in class order; a CPU node counts as one `cpu` device."""
    mapping = facts_mapping(facts)
    totals: dict[str, list[int]] = {}
    for device in mapping.get("gpus") or ():
        counts = totals.setdefault(str(device.get("class") or "gpu"), [0, 0])
        counts[1] += 1
        if device_is_free(device):
            counts[0] += 1
    if not totals and mapping:
        totals["cpu"] = [1, 1]
    return tuple(ClassCount(name, free, total) for name, (free, total) in sorted(totals.items()))


def _offered(counts: tuple[ClassCount, ...], state: str) -> tuple[ClassCount, ...]:
    """A node that is not ready offers no free card, whatever its last facts said."""
    if state == "ready":
        return counts
    return tuple(ClassCount(c.gpu_class, 0, c.total) for c in counts)


def node_summary(
    name: str,
    state: str,
    reason: str | None,
    facts: Any,
    *,
    fabrics: Iterable[str] = (),
    running_shards: int = 0,
) -> NodeSummary:
    """The fleet row of one node from its state and facts.

    Args:
        name: The node's inventory name.
        state: `connecting`, `ready`, `unreachable` or `refused`.
        reason: Why a node is not ready, in one sentence, else None.
        facts: The node's facts (agent JSON or the core's facts model), None before discovery.
        fabrics: The fabric names the inventory gives this node.
        running_shards: Shards of replicas running on it.
    """
    mapping = facts_mapping(facts)
    fabric_names = tuple(fabrics) or tuple(
        str(f.get("name") if isinstance(f, Mapping) else f) for f in mapping.get("fabrics") or ()
    )
    return NodeSummary(
        name=name,
        state=state,
        reason=reason,
        classes=_offered(class_counts(mapping), state) if mapping else (),
        fabrics=fabric_names,
        nvlink_domain=domain_name(mapping.get("nvlink_domain")),
        running_shards=running_shards,
        cpu_only=bool(mapping) and not mapping.get("gpus"),
        ram_gib=_ram_gib(mapping),
    )


def _ram_gib(mapping: Mapping[str, Any]) -> int | None:
    memory_mib = (mapping.get("host") or {}).get("memory_mib")
    return None if memory_mib is None else round(memory_mib / MIB_PER_GIB)


def _card_of(mapping: Mapping[str, Any], card_index: Any) -> Mapping[str, Any]:
    for card in mapping.get("cards") or ():
        if card.get("index") == card_index:
            return card
    return {}


def device_rows(facts: Any) -> tuple[DeviceRow, ...]:
    """Each device with its figures; a MIG instance shows its card's heat and power, no utilisation."""
    mapping = facts_mapping(facts)
    rows: list[DeviceRow] = []
    for device in mapping.get("gpus") or ():
        card = _card_of(mapping, device.get("card_index"))
        is_mig = bool(device.get("mig_profile"))
        utilisation = None if is_mig else _first(device, card, "utilization_pct")
        rows.append(
            DeviceRow(
                label=str(device.get("label") or device.get("id")),
                gpu_class=str(device.get("class") or ""),
                memory_used_mib=_as_int(device.get("memory_used_mib")),
                memory_total_mib=_as_int(device.get("memory_mib")),
                utilisation_pct=_as_int(utilisation),
                temperature_c=_as_int(_first(device, card, "temperature_c")),
                power_w=_as_float(_first(device, card, "power_w")),
                numa_node=_as_int(card.get("numa_node")),
                nearest_nic=card.get("nearest_nic"),
                is_mig=is_mig,
                free=device_is_free(device),
                fabric=(card.get("fabric") or {}).get("verdict"),
            )
        )
    return tuple(rows)


def nvlink_matrix(facts: Any) -> NvlinkMatrix:
    """The card × card link kinds, in card index order."""
    mapping = facts_mapping(facts)
    links: Mapping[str, Mapping[str, str]] = mapping.get("nvlink") or {}
    indices = sorted(
        {str(c.get("index")) for c in mapping.get("cards") or ()} | set(links), key=int
    )
    cells = tuple(
        tuple("X" if a == b else str((links.get(a) or {}).get(b) or "") for b in indices)
        for a in indices
    )
    return NvlinkMatrix(labels=tuple(f"GPU{i}" for i in indices), cells=cells)


def adapter_rows(facts: Any) -> tuple[AdapterRow, ...]:
    """The node's adapter ports, in name order."""
    mapping = facts_mapping(facts)
    failed = _failed_adapters(mapping.get("rail_verdicts") or ())
    rows = [
        AdapterRow(
            name=str(a.get("name")),
            port=_as_int(a.get("port")),
            state=a.get("state"),
            rate_gbps=_as_float(a.get("rate_gbps")),
            rated_gbps=_as_float(a.get("rated_gbps")),
            link_layer=a.get("link_layer"),
            gid_index=_as_int(a.get("gid_index")),
            rail_failed=failed.get(str(a.get("name"))),
        )
        for a in mapping.get("adapters") or ()
    ]
    return tuple(sorted(rows, key=lambda r: (r.name, r.port or 0)))


def imex_text(imex: Mapping[str, Any] | None) -> str | None:
    """IMEX in a few words: its state and how many nodes its domain lists."""
    if not imex:
        return None
    nodes = imex.get("nodes") or ()
    state = imex.get("state") or "unknown"
    return f"{state}, {len(nodes)} nodes" if nodes else str(state)


def host_pairs(facts: Any) -> tuple[tuple[str, str], ...]:
    """The host facts worth a line each (CPUs, RAM, driver, CUDA, management address)."""
    host: Mapping[str, Any] = facts_mapping(facts).get("host") or {}
    pairs: list[tuple[str, str]] = []
    for key, title in (
        ("hostname", "host"),
        ("cpus", "CPUs"),
        ("memory_mib", "RAM"),
        ("driver_version", "driver"),
        ("cuda_version", "CUDA"),
        ("mgmt_address", "mgmt"),
        ("mgmt_interface", "mgmt if"),
    ):
        value = host.get(key)
        if key == "memory_mib" and value is not None:
            value = f"{round(value / MIB_PER_GIB)} GiB"
        if value is not None:
            pairs.append((title, str(value)))
    return tuple(pairs)


def node_detail(summary: NodeSummary, facts: Any) -> NodeDetail:
    """The node page of one node."""
    mapping = facts_mapping(facts)
    return NodeDetail(
        summary=summary,
        devices=device_rows(mapping),
        nvlink=nvlink_matrix(mapping),
        adapters=adapter_rows(mapping),
        nvlink_domain=summary.nvlink_domain,
        imex=imex_text(mapping.get("imex")),
        host=host_pairs(mapping),
        fabric_problem=_fabric_problem(mapping),
    )


def _fabric_problem(mapping: Mapping[str, Any]) -> str | None:
    verdicts = {(c.get("fabric") or {}).get("verdict") for c in mapping.get("cards") or ()}
    if not verdicts - {None, "local", "joined"}:
        return None
    state, reason = tray_state(mapping)
    return f"NVLink {state}: {reason}"


_TRAY_STATE_OF_VERDICT: dict[str, TrayState] = {
    "joined": "joined",
    "local": "joined",
    "degraded": "degraded",
    "unhealthy": "degraded",
    "not-joined": "not-joined",
}
_VERDICT_RANK = {"not-joined": 0, "unhealthy": 1, "degraded": 2, "joined": 3, "local": 3}


def _fabric_reason(index: Any, fabric: Mapping[str, Any]) -> str:
    health = fabric.get("health") or {}
    if fabric.get("verdict") == "not-joined":
        words = f"{fabric.get('state') or 'no state'} / {fabric.get('status') or 'no status'}"
    else:
        parts = [health.get("summary"), f"bandwidth {health.get('bandwidth')}"]
        if health.get("route_unhealthy"):
            parts.append("route unhealthy")
        if health.get("route_recovery_in_progress"):
            parts.append("route recovery in progress")
        words = ", ".join(str(p) for p in parts if p)
    return f"GPU{index} fabric {words}"


def tray_state(facts: Any) -> tuple[TrayState, str | None]:
    """Whether a tray takes part in its NVLink domain, and what keeps it out.

    The reading of each card's fabric is the agent's `verdict` (one rule, in
    `llmgw_agent.discover.fabric`); a tray takes its worst card's verdict, and
    that card's state, status or health is the reason. `unhealthy` is drawn
    as degraded: the tray is in the domain but not at full strength.
    """
    cards = [c for c in facts_mapping(facts).get("cards") or () if c.get("fabric")]
    if not cards:
        return "not-joined", "no card reports an NVLink fabric"
    worst = min(cards, key=lambda c: _VERDICT_RANK.get(c["fabric"].get("verdict") or "", 0))
    verdict = worst["fabric"].get("verdict") or "not-joined"
    state = _TRAY_STATE_OF_VERDICT.get(verdict, "not-joined")
    if state == "joined":
        return "joined", None
    return state, _fabric_reason(worst.get("index"), worst["fabric"])


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
        failed = _failed_adapters(mapping.get("rail_verdicts") or ())
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


def _failed_adapters(verdicts: Any) -> dict[str, str]:
    """`fabric.rails.failed_adapters`, imported on first use: the fleet screen's first frame
    draws through this module before the fabric parsers (and pydantic) are needed."""
    from llmgw_core.fabric.rails import failed_adapters

    return failed_adapters(verdicts)
