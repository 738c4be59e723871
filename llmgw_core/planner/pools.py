"""The planner's view of a fleet: nodes, their devices, and the pools a replica may occupy.

A replica takes its cards from one pool: cards of one class whose nodes share
one interconnect. Pools are keyed by class *and* interconnect together,
because a replica may never span two fabrics: eight free cards split over two
InfiniBand fabrics are not eight cards for a model that needs eight, and
treating them as one would plan something that starts, passes its health
checks and hangs on its first all-reduce.

The interconnect between nodes is an InfiniBand/RoCE fabric, or an NVLink
domain (an NVL72 rack: trays joined to one cluster with IMEX up). A node
joined to a healthy domain is pooled by the domain; one that is not joined,
or whose IMEX is down, falls back to its fabric, or stands alone.

Inside a node, tensor parallel needs cards that share NVLink; `NvlinkGroup`s
are the sets of cards joined by NVLink, read from an NVLink matrix when one is
known (the cards with the most links between them are taken first).

Two constructors feed the same `Fleet`:
* `described_fleet(entries)` — a script's `fleet:` list, validated here;
* `Fleet(nodes=...)` from `Node` values — what discovery will build from live
  facts (see `Fleet.from_nodes`); nothing in the planner knows which it got.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from llmgw_core.errors import BadInput
from llmgw_core.planner.gpu_classes import GpuClass, gpu_class
from llmgw_core.written_numbers import MAX_CLIQUE, MAX_MEMORY_GIB, Amount, Count, refusal

InterconnectKind = Literal["fabric", "nvlink-domain"]


# --------------------------------------------------------------------------------------
# Domain values (pure, frozen)
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Device:
    """One device a replica can be given: a whole card or one MIG instance.

    Attributes:
        index: the card's index on its node (MIG instances: 100 × card + instance).
        label: how people name it (`0`, `3`, `0/mig1`).
        gpu_class: the device's class (memory, compute capability, NVLink).
        busy: True when something already runs on it.
    """

    index: int
    label: str
    gpu_class: GpuClass
    busy: bool = False

    @property
    def memory_gib(self) -> float:
        """Memory visible to CUDA on this device, GiB."""
        return self.gpu_class.memory_gib


@dataclass(frozen=True)
class NvlinkDomain:
    """An NVLink domain spanning nodes (a GB200/GB300 NVL72 rack).

    Attributes:
        name: the operator's name for it (`nvl72-a`).
        cluster_uuid: the fabric manager's cluster UUID, when known.
        clique_id: the NVLink clique inside the cluster.
        joined: this node's cards joined the domain (fabric state completed).
        imex_up: the IMEX daemon is up on this node, so memory can be shared.
    """

    name: str
    cluster_uuid: str | None = None
    clique_id: int = 0
    joined: bool = True
    imex_up: bool = True

    @property
    def usable(self) -> bool:
        """True when a replica may span nodes over this domain from this node."""
        return self.joined and self.imex_up

    @property
    def key(self) -> str:
        """One name for one domain and clique: nodes pool together only when they match."""
        cluster = self.cluster_uuid or self.name
        return f"{cluster}/{self.clique_id}" if self.clique_id else cluster


@dataclass(frozen=True)
class Node:
    """One node as the planner sees it.

    Attributes:
        name: the node's name.
        devices: its GPUs (whole cards or MIG instances); empty for a CPU node.
        memory_gib: host RAM, GiB (sizes GGUF on a CPU node), or None when unknown.
        fabric: the InfiniBand/RoCE fabric it is on, or None.
        nvlink_domain: the NVLink domain it is a tray of, or None.
        nvlink_groups: sets of device indexes joined by NVLink, widest first.
    """

    name: str
    devices: tuple[Device, ...] = ()
    memory_gib: float | None = None
    fabric: str | None = None
    nvlink_domain: NvlinkDomain | None = None
    nvlink_groups: tuple[tuple[int, ...], ...] = ()
    repack_types: frozenset[str] = frozenset()
    """llama.cpp on this node's CPU: the tensor types it copies into a repacked buffer."""
    numa_memory_gib: tuple[float, ...] = ()
    """The RAM of each NUMA node, largest first; empty when the node reported none (it is one)."""

    @property
    def is_cpu(self) -> bool:
        """True for a node without GPUs."""
        return not self.devices

    @property
    def numa_count(self) -> int:
        """NUMA nodes with memory: one when it reported none."""
        return max(1, len(self.numa_memory_gib))

    def rank_memory_gib(self, width: int) -> float | None:
        """RAM of the smallest of the `width` largest NUMA nodes (one vLLM CPU rank each).

        None when the node has fewer NUMA nodes; a node that reported none is
        one NUMA node holding all its RAM.
        """
        sizes = self.numa_memory_gib or ((self.memory_gib or 0.0,) if self.memory_gib else ())
        if len(sizes) < width:
            return None
        return sorted(sizes, reverse=True)[width - 1]

    def devices_of(self, label: str) -> tuple[Device, ...]:
        """This node's devices of one class."""
        return tuple(d for d in self.devices if d.gpu_class.label == label)

    def widest_nvlink_set(self, label: str, *, free_only: bool) -> int:
        """The most devices of class `label` that share NVLink (1 when any, 0 when none).

        A MIG instance or a PCIe card shares NVLink with nothing, so it is 1.
        """
        devices = [d for d in self.devices_of(label) if not (free_only and d.busy)]
        if not devices:
            return 0
        by_index = {d.index for d in devices}
        widest = 1
        for group in self.nvlink_groups:
            widest = max(widest, len(by_index.intersection(group)))
        return widest

    def count_of(self, label: str, *, free_only: bool) -> int:
        """How many devices of class `label` this node has (free ones only when asked)."""
        return sum(1 for d in self.devices_of(label) if not (free_only and d.busy))

    def choose_nvlink_cards(
        self, label: str, count: int, links: Sequence[Sequence[int]]
    ) -> tuple[int, ...]:
        """The `count` free cards of class `label` with the most NVLink links between them.

        Args:
            label: the class of card wanted.
            count: how many cards.
            links: NVLink link counts between card indexes (`links[i][j]`), e.g. 18 for NV18.

        Returns:
            Card indexes, or () when no NVLink group holds that many free cards.
        """
        free = {d.index for d in self.devices_of(label) if not d.busy}
        best: tuple[int, ...] = ()
        best_links = -1
        for group in self.nvlink_groups:
            members = sorted(free.intersection(group))
            if len(members) < count:
                continue
            # Greedy: start from each card, add the card most linked to the set so far.
            for start in members:
                chosen = [start]
                while len(chosen) < count:
                    rest = [c for c in members if c not in chosen]
                    chosen.append(max(rest, key=lambda c: (sum(links[c][o] for o in chosen), -c)))
                total = sum(links[a][b] for a in chosen for b in chosen if a < b)
                if total > best_links:
                    best, best_links = tuple(sorted(chosen)), total
        return best


def nvlink_groups_from_matrix(links: Sequence[Sequence[int]]) -> tuple[tuple[int, ...], ...]:
    """Group cards joined by NVLink, widest group first.

    Args:
        links: a square matrix of NVLink link counts between cards (0 = none),
            as read from `nvidia-smi topo -m` (NV18 → 18).

    Returns:
        The connected sets of cards (a card with no NVLink is a group of one).
    """
    size = len(links)
    seen: set[int] = set()
    groups: list[tuple[int, ...]] = []
    for start in range(size):
        if start in seen:
            continue
        stack, members = [start], []
        seen.add(start)
        while stack:
            card = stack.pop()
            members.append(card)
            for other in range(size):
                if other not in seen and links[card][other] > 0:
                    seen.add(other)
                    stack.append(other)
        groups.append(tuple(sorted(members)))
    groups.sort(key=lambda g: (-len(g), g))
    return tuple(groups)


@dataclass(frozen=True)
class Pool:
    """Devices of one class whose nodes share one interconnect (or one node alone).

    Attributes:
        gpu_class: the class, or None for a pool of CPU nodes.
        interconnect: the fabric's or NVLink domain's name; None when the
            pool's nodes share none, so each replica stays on one of them.
        interconnect_kind: "fabric" or "nvlink-domain", or None.
        nodes: the nodes, in fleet order.
    """

    gpu_class: GpuClass | None
    interconnect: str | None
    interconnect_kind: InterconnectKind | None
    nodes: tuple[Node, ...]
    _widths: dict[tuple[bool], tuple[int, ...]] = field(
        default_factory=dict, compare=False, repr=False, hash=False
    )

    @property
    def label(self) -> str:
        """The class label, or `cpu`."""
        return self.gpu_class.label if self.gpu_class else "cpu"

    @cached_property
    def repack_types(self) -> frozenset[str]:
        """Every type any of the pool's CPUs repacks: a plan sized for the node that holds most."""
        return frozenset().union(*(node.repack_types for node in self.nodes))

    @property
    def is_cpu(self) -> bool:
        """True for a pool of CPU nodes."""
        return self.gpu_class is None

    @property
    def spans_nodes(self) -> bool:
        """True when a replica may take cards from several of this pool's nodes."""
        return self.interconnect is not None and not self.is_cpu

    def nvlink_widths(self, *, free_only: bool) -> tuple[int, ...]:
        """Per node, the most cards of this class sharing NVLink, widest first."""
        key = (free_only,)
        if key not in self._widths:
            assert self.gpu_class is not None
            label = self.gpu_class.label
            widths = self._per_shape(lambda n: n.widest_nvlink_set(label, free_only=free_only))
            self._widths[key] = tuple(sorted((w for w in widths if w), reverse=True))
        return self._widths[key]

    def card_counts(self, *, free_only: bool) -> tuple[int, ...]:
        """Per node, how many cards of this class it has, most first."""
        assert self.gpu_class is not None
        label = self.gpu_class.label
        counts = self._per_shape(lambda n: n.count_of(label, free_only=free_only))
        return tuple(sorted((c for c in counts if c), reverse=True))

    def _per_shape(self, measure: Callable[[Node], int]) -> list[int]:
        """`measure` of every node, computed once per distinct node shape.

        The nodes of one described entry share their devices and NVLink groups
        (the same tuples), so a fleet of 100,000 alike nodes is measured once.
        The tuples' ids are stable while this pool holds its nodes.
        """
        seen: dict[tuple[int, int], int] = {}
        values = []
        for node in self.nodes:
            shape = (id(node.devices), id(node.nvlink_groups))
            if shape not in seen:
                seen[shape] = measure(node)
            values.append(seen[shape])
        return values

    def nodes_with(self, width: int, *, free_only: bool, nvlink: bool = True) -> int:
        """How many nodes can give `width` cards (sharing NVLink when `nvlink`)."""
        per_node = (
            self.nvlink_widths(free_only=free_only)
            if nvlink
            else self.card_counts(free_only=free_only)
        )
        return sum(1 for w in per_node if w >= width)

    def rank_memory_gib(self, width: int) -> float:
        """For vLLM on CPU nodes: the most RAM a rank of `width` gets on any node (0: none has so many)."""
        return max((n.rank_memory_gib(width) or 0.0 for n in self.nodes), default=0.0)

    @property
    def numa_count(self) -> int:
        """The most NUMA nodes any of the pool's CPU nodes has."""
        return max((n.numa_count for n in self.nodes), default=1)

    @property
    def device_memory_gib(self) -> float:
        """What one replica's device holds: a card's memory, or the largest CPU node's RAM."""
        if self.gpu_class is not None:
            return self.gpu_class.memory_gib
        return max((n.memory_gib or 0.0 for n in self.nodes), default=0.0)

    def describe(self) -> str:
        """`h100-80g on ib-a`, `gb200-186g in NVLink domain nvl72-a`, `l40s-48g on pcie`."""
        if self.is_cpu:
            names = ", ".join(n.name for n in self.nodes[:3]) + (
                " …" if len(self.nodes) > 3 else ""
            )
            return f"CPU node{'s' if len(self.nodes) > 1 else ''} {names}"
        if self.interconnect_kind == "fabric":
            return f"{self.label} on {self.interconnect}"
        if self.interconnect_kind == "nvlink-domain":
            return f"{self.label} in NVLink domain {self.interconnect}"
        if len(self.nodes) == 1:
            return f"{self.label} on {self.nodes[0].name}"
        return f"{self.label} on {len(self.nodes)} nodes without a shared fabric"


@dataclass(frozen=True)
class Fleet:
    """Every node the planner may use, as one immutable snapshot."""

    nodes: tuple[Node, ...]

    @classmethod
    def from_nodes(cls, nodes: Iterable[Node]) -> Fleet:
        """The constructor every source ends in: described entries now, live facts later.

        Raises:
            BadInput: two nodes share a name.
        """
        nodes = tuple(nodes)
        seen: set[str] = set()
        for node in nodes:
            if node.name in seen:
                raise BadInput(f"two nodes are named {node.name!r}", "give every node its own name")
            seen.add(node.name)
        return cls(nodes=nodes)

    def pools(self) -> tuple[Pool, ...]:
        """The pools a replica may come from, keyed by class and interconnect."""
        grouped: dict[tuple[str, str | None, str | None], list[Node]] = {}
        classes: dict[str, GpuClass | None] = {}
        labels_of: dict[int, tuple[str, ...]] = {}  # per devices tuple: nodes of a shape share one
        for node in self.nodes:
            kind, name = _interconnect_of(node)
            if node.is_cpu:
                if node.memory_gib:
                    grouped.setdefault(("cpu", None, None), []).append(node)
                    classes["cpu"] = None
                continue
            labels = labels_of.get(id(node.devices))
            if labels is None:
                for device in node.devices:
                    classes.setdefault(device.gpu_class.label, device.gpu_class)
                labels = tuple(dict.fromkeys(d.gpu_class.label for d in node.devices))
                labels_of[id(node.devices)] = labels
            for label in labels:
                # Nodes with no interconnect pool together by class, but a
                # replica never spans them (`spans_nodes` is False).
                grouped.setdefault((label, kind, name), []).append(node)
        pools = []
        for (label, kind, name), nodes in grouped.items():
            interconnect = name if kind else None
            pools.append(Pool(classes[label], interconnect, kind, tuple(nodes)))  # type: ignore[arg-type]
        return tuple(pools)


def _interconnect_of(node: Node) -> tuple[InterconnectKind | None, str | None]:
    """The interconnect a node offers a multi-node replica: a healthy NVLink domain, else its fabric."""
    if node.nvlink_domain is not None and node.nvlink_domain.usable:
        return "nvlink-domain", node.nvlink_domain.key
    if node.fabric:
        return "fabric", node.fabric
    return None, None


# --------------------------------------------------------------------------------------
# A described fleet (the `fleet:` list of a script)
# --------------------------------------------------------------------------------------


class NvlinkDomainEntry(BaseModel):
    """`nvlink_domain:` in full: `{name: nvl72-a, clique: 0, imex: up, joined: true}`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)
    cluster_uuid: str | None = None
    clique: Count = Field(default=0, ge=0, le=MAX_CLIQUE)
    imex: Literal["up", "down"] = "up"
    joined: bool = True


class FleetEntry(BaseModel):
    """One line of a described fleet; `count` expands it to `name-1`, `name-2` …

    `nvlink_domain` is a domain's name (every tray joined, IMEX up) or a
    mapping that says otherwise. `free` or `busy` says how many of each
    node's cards are taken (the highest indexes are the busy ones).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)
    count: Count = Field(default=1, ge=1, le=100_000)
    gpu: str | None = None
    gpus: Count = Field(default=0, ge=0, le=1024)
    memory_gib: Amount | None = Field(default=None, gt=0, le=MAX_MEMORY_GIB)
    numa_nodes: Count | None = Field(default=None, ge=1, le=64)
    """A CPU node's NUMA nodes, its RAM split evenly between them (vLLM puts a rank on each)."""
    fabric: str | None = None
    nvlink: bool | None = None
    nvlink_domain: str | NvlinkDomainEntry | None = None
    free: Count | None = Field(default=None, ge=0, le=1024)
    busy: Count | None = Field(default=None, ge=0, le=1024)

    @model_validator(mode="after")
    def _consistent(self) -> FleetEntry:
        if self.gpus and not self.gpu:
            raise ValueError("`gpus` needs `gpu:` (the class, such as h100-80g)")
        if self.gpu and not self.gpus:
            raise ValueError("`gpu:` needs `gpus:` (how many on each node)")
        if self.gpus == 0 and not self.memory_gib:
            raise ValueError("a CPU node needs `memory_gib:` (its RAM)")
        if self.free is not None and self.busy is not None:
            raise ValueError("give `free` or `busy`, not both")
        taken = (
            self.busy
            if self.busy is not None
            else (self.gpus - self.free if self.free is not None else 0)
        )
        if taken < 0 or taken > self.gpus:
            raise ValueError(f"free/busy must be between 0 and gpus ({self.gpus})")
        return self

    @property
    def busy_count(self) -> int:
        """How many of each node's cards are taken."""
        if self.busy is not None:
            return self.busy
        if self.free is not None:
            return self.gpus - self.free
        return 0


def _entry_sentence(index: int, raw: Any, error: ValidationError) -> str:
    name = raw.get("name") if isinstance(raw, dict) else None
    where = f"fleet entry {index + 1}" + (f" ({name})" if name else "")
    parts = []
    for item in error.errors():
        field_name = ".".join(str(p) for p in item["loc"])
        message = refusal(item) or item["msg"].removeprefix("Value error, ")
        if item["type"] == "extra_forbidden":
            message = "is not a known key"
        elif item["type"] == "missing":
            message = "is required"
        parts.append(f"{field_name} {message}" if field_name else message)
    return f"{where}: {'; '.join(parts)}"


def _node_of(entry: FleetEntry, name: str) -> Node:
    if entry.gpus == 0:
        numa = entry.numa_nodes or 0
        each = (entry.memory_gib or 0.0) / numa if numa else 0.0
        return Node(
            name=name,
            memory_gib=entry.memory_gib,
            fabric=entry.fabric,
            numa_memory_gib=(each,) * numa,
        )
    cls = gpu_class(entry.gpu or "")
    first_busy = entry.gpus - entry.busy_count
    if cls.is_mig:
        devices = tuple(
            Device(index=100 + i, label=f"0/mig{i}", gpu_class=cls, busy=i >= first_busy)
            for i in range(entry.gpus)
        )
        groups: tuple[tuple[int, ...], ...] = ()
    else:
        devices = tuple(
            Device(index=i, label=str(i), gpu_class=cls, busy=i >= first_busy)
            for i in range(entry.gpus)
        )
        nvlink = cls.nvlink if entry.nvlink is None else entry.nvlink
        groups = (tuple(range(entry.gpus)),) if nvlink and entry.gpus > 1 else ()
    domain = None
    if isinstance(entry.nvlink_domain, str):
        domain = NvlinkDomain(name=entry.nvlink_domain)
    elif entry.nvlink_domain is not None:
        spec = entry.nvlink_domain
        domain = NvlinkDomain(
            name=spec.name,
            cluster_uuid=spec.cluster_uuid,
            clique_id=spec.clique,
            joined=spec.joined,
            imex_up=spec.imex == "up",
        )
    return Node(
        name=name,
        devices=devices,
        memory_gib=entry.memory_gib,
        fabric=entry.fabric,
        nvlink_domain=domain,
        nvlink_groups=groups,
    )


def check_fleet_entry(raw: Any, index: int) -> FleetEntry:
    """Validate one entry of a `fleet:` list (index from 0), class label included.

    The runner calls this for each entry before any step runs, so a bad entry
    is reported with its line.

    Raises:
        BadInput: naming the entry and what is wrong with it.
    """
    try:
        entry = FleetEntry.model_validate(raw)
    except ValidationError as exc:
        raise BadInput(_entry_sentence(index, raw, exc)) from None
    if entry.gpu:
        try:
            gpu_class(entry.gpu)
        except BadInput as exc:
            raise BadInput(
                f"fleet entry {index + 1} ({entry.name}): {exc.message}", exc.fix
            ) from None
    return entry


def check_described_names(entries: Sequence[FleetEntry]) -> None:
    """Refuse two described nodes of one name (`dgx` × 2 makes `dgx-1`, `dgx-2`), names only.

    Raises:
        BadInput: as `Fleet.from_nodes` says it.
    """
    seen: set[str] = set()
    for entry in entries:
        names = (
            [entry.name]
            if entry.count == 1
            else (f"{entry.name}-{i}" for i in range(1, entry.count + 1))
        )
        for name in names:
            if name in seen:
                raise BadInput(f"two nodes are named {name!r}", "give every node its own name")
            seen.add(name)


def described_fleet(entries: Sequence[Any]) -> Fleet:
    """A fleet from a script's `fleet:` list.

    Raises:
        BadInput: naming the entry and what is wrong with it (unknown key, unknown class …).
    """
    if not isinstance(entries, (list, tuple)) or not entries:
        raise BadInput(
            "`fleet:` must be a list of nodes",
            "for instance - {name: dgx, count: 2, gpu: h100-80g, gpus: 8}",
        )
    nodes: list[Node] = []
    for index, raw in enumerate(entries):
        entry = check_fleet_entry(raw, index)
        template = _node_of(entry, entry.name)
        if entry.count == 1:
            nodes.append(template)
        else:
            # One shape per entry: every node shares its devices and groups (see `Pool._per_shape`).
            shared = (
                template.devices,
                template.memory_gib,
                template.fabric,
                template.nvlink_domain,
                template.nvlink_groups,
            )
            nodes.extend(Node(f"{entry.name}-{i}", *shared) for i in range(1, entry.count + 1))
    return Fleet.from_nodes(nodes)
