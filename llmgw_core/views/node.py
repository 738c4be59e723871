"""One node for display: its fleet row and its node page, from its state and facts.

Pure: every function takes a node's state and facts as values and returns
frozen summaries. The console draws these and computes nothing of its own, so
the headless runner can print the very same figures. What spans nodes (the
racks of an NVLink domain, the fleet's rows kept between polls, its totals) is
`views.fleet`'s.

Facts are read through the wire contract of the agent (`cards`, `gpus`,
`nvlink`, `adapters`, `nvlink_domain`, `imex`, `host`); a pydantic facts model
is accepted too and read through its JSON form, so the two cannot disagree.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from llmgw_core.devices import device_in_use, domain_name
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
    failed = failed_adapters(mapping.get("rail_verdicts") or ())
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


def failed_adapters(verdicts: Any) -> dict[str, str]:
    """`fabric.rails.failed_adapters`, imported on first use: the fleet screen's first frame
    draws through this module before the fabric parsers (and pydantic) are needed."""
    from llmgw_core.fabric import rails

    return rails.failed_adapters(verdicts)
