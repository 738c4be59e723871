"""What a node reports about itself, validated on arrival from the agent.

The agent (`llmgw_agent.discover.collect_facts`) builds plain dicts; the
console turns each into `NodeFacts` before anything else reads it, so a
malformed or half-written answer is refused at the edge with a sentence, not
found later as a KeyError. Models are frozen: facts are snapshots. Unknown
keys are ignored so a newer agent can add fields without breaking an older
console.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

# Device rules the console's first frame needs without pydantic; re-exported for existing callers.
from llmgw_core.devices import BUSY_MEMORY_MIB as BUSY_MEMORY_MIB
from llmgw_core.devices import device_in_use as device_in_use
from llmgw_core.devices import is_zero_uuid as is_zero_uuid
from llmgw_core.errors import BadInput

MAX_FACT_NUMBER = 2**53
"""The largest number a fact may hold (a float's exact integers): no card, port or byte count
of any machine comes near; a larger one is a damaged or hostile capture."""


def _beyond(value: object) -> str | None:
    """The path (`gpus.0.memory_mib`) of the first number in `value` beyond `MAX_FACT_NUMBER`,
    at any depth; None when there is none.

    A first pass over the raw facts builds no path (facts are read on every
    refresh of every node: it costs about what validating them does); only
    when a number is beyond is the way to it walked again, naming it.
    """
    stack: list[Any] = [value]
    while stack:
        item = stack.pop()
        kind = type(item)
        if kind is dict:
            stack.extend(item.values())
        elif kind is list or kind is tuple:
            stack.extend(item)
        elif (kind is int or kind is float) and not -MAX_FACT_NUMBER <= item <= MAX_FACT_NUMBER:
            return _named_path(value)
    return None


def _named_path(value: object) -> str:
    """The dotted path of the first number beyond the bound (the slow, naming walk)."""
    stack: list[tuple[str, Any]] = [("", value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, dict):
            stack.extend((f"{path}.{key}", inner) for key, inner in item.items())
        elif isinstance(item, list | tuple):
            stack.extend((f"{path}.{index}", inner) for index, inner in enumerate(item))
        elif type(item) in (int, float) and not -MAX_FACT_NUMBER <= item <= MAX_FACT_NUMBER:
            return path.lstrip(".") or "(top level)"
    return "(top level)"


class _Snapshot(BaseModel):
    model_config = ConfigDict(
        frozen=True, extra="ignore", populate_by_name=True, defer_build=True, allow_inf_nan=False
    )


class FabricHealth(_Snapshot):
    """A card's NVLink fabric health; None where the driver does not report a field."""

    summary: str | None = None
    bandwidth: str | None = None
    route_recovery_in_progress: bool | None = None
    route_unhealthy: bool | None = None
    access_timeout_recovery: bool | None = None
    incorrect_configuration: str | None = None
    partition_assigned: str | None = None


FabricVerdict = Literal["joined", "degraded", "unhealthy", "not-joined", "local"]


class CardFabric(_Snapshot):
    """A card's NVLink fabric (GB200/GB300 NVL72, NVSwitch systems).

    `verdict` is the agent's one reading of state + status + health:
    `local` is a single machine's NVSwitch (all-zero ClusterUUID), not a domain.
    """

    state: str
    status: str | None = None
    clique_id: int | None = None
    cluster_uuid: str | None = None
    health: FabricHealth = FabricHealth()
    verdict: FabricVerdict | None = None


class Platform(_Snapshot):
    """Where a card sits in a rack (filled in on GB200/GB300 trays)."""

    chassis_serial: str | None = None
    slot_number: int | None = None
    tray_index: int | None = None
    host_id: int | None = None
    module_id: int | None = None
    peer_type: str | None = None


class GpuProcess(_Snapshot):
    """A process holding memory on a card or MIG instance."""

    pid: int | None = None
    name: str = ""
    used_mib: int = 0


class Card(_Snapshot):
    """One physical card."""

    index: int
    name: str
    uuid: str | None = None
    pci_bus_id: str | None = None
    memory_mib: int | None = None
    memory_used_mib: int | None = None
    utilization_pct: int | None = None
    temperature_c: float | None = None
    power_w: float | None = None
    compute_capability: str | None = None
    gpu_class: str = Field(alias="class")
    mig_mode: Literal["enabled", "disabled"] | None = None
    mig_pending: Literal["enabled", "disabled"] | None = None
    numa_node: int | None = None
    cpu_affinity: str | None = None
    nearest_nic: str | None = None
    fabric: CardFabric | None = None
    platform: Platform | None = None
    processes: tuple[GpuProcess, ...] = ()
    out_of_placement: str | None = None


class Gpu(_Snapshot):
    """A device placement can use: a whole card, or one MIG instance of a card.

    `id` is the card index, or `1000 + 100 x card + instance` for MIG; `label`
    is `3` or `3/mig1`. `utilization_pct` is None for a MIG instance (unknown,
    not zero).
    """

    id: int
    label: str
    card_index: int
    name: str = ""
    uuid: str | None = None
    gpu_class: str = Field(alias="class")
    mig_profile: str | None = None
    memory_mib: int | None = None
    memory_used_mib: int | None = None
    utilization_pct: int | None = None
    temperature_c: float | None = None
    power_w: float | None = None
    compute_capability: str | None = None
    processes: tuple[GpuProcess, ...] = ()
    gpu_instance_id: int | None = None
    compute_instance_id: int | None = None

    @property
    def is_mig(self) -> bool:
        """True for a MIG instance."""
        return self.mig_profile is not None

    @property
    def in_use(self) -> bool:
        """True when a process holds it or its memory is taken (see `device_in_use`)."""
        return device_in_use(bool(self.processes), self.memory_used_mib)


class Adapter(_Snapshot):
    """One RDMA adapter port. `link_layer` Ethernet means RoCE."""

    name: str
    port: int = 1
    state: str | None = None
    phys_state: str | None = None
    rate_gbps: float | None = None
    rated_gbps: float | None = None
    link_layer: str | None = None
    gid_index: int | None = None
    hca_type: str | None = None
    fw_version: str | None = None
    netdev: str | None = None


class NvlinkDomain(_Snapshot):
    """The multi-node NVLink domain every card of the node is in."""

    cluster_uuid: str
    clique_id: int | None = None


class ImexNode(_Snapshot):
    """One node of an IMEX domain, as `nvidia-imex-ctl -N` lists it."""

    index: int
    address: str
    state: str
    version: str | None = None


class Imex(_Snapshot):
    """The IMEX daemon's view of its domain."""

    state: str | None = None
    nodes: tuple[ImexNode, ...] = ()
    connectivity_ok: bool | None = None
    channels: tuple[str, ...] = ()
    error: str | None = None


class NumaNode(_Snapshot):
    """One NUMA node with memory: where vLLM's CPU backend puts one tensor-parallel rank."""

    node: int
    cpus: int
    memory_mib: int
    cpulist: str | None = None
    """Its CPUs as the kernel lists them (`0-31,64-95`)."""


class Host(_Snapshot):
    """The machine itself."""

    hostname: str | None = None
    cpus: int | None = None
    memory_mib: int | None = None
    mgmt_address: str | None = None
    mgmt_interface: str | None = None
    driver_version: str | None = None
    cuda_version: str | None = None
    python: str | None = None
    kernel: str | None = None
    arch: str | None = None
    pci_gpus: int | None = None
    cpu_only: bool = False
    cpu_flags: tuple[str, ...] | None = None
    """The CPU features that decide llama.cpp's repacked copies (`avx2`, `amx_int8`, `asimddp` …)."""
    numa_nodes: tuple[NumaNode, ...] | None = None
    """The NUMA nodes with memory and CPUs, by number; None when the kernel shows none."""


class Engine(_Snapshot):
    """An installed inference engine."""

    version: str | None = None
    path: str | None = None


class StoredModel(_Snapshot):
    """A model found in a model directory."""

    name: str
    path: str
    format: Literal["safetensors", "pytorch", "gguf", "other"] = "other"
    state: Literal["complete", "partial"]
    size_bytes: int = 0
    files: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()


class ModelDir(_Snapshot):
    """A model directory: `complete`/`partial` by its models; `present` holds no model."""

    state: Literal["missing", "unreadable", "empty", "present", "partial", "complete"]
    shared: bool = False
    fs_type: str | None = None
    models: tuple[StoredModel, ...] = ()


class Keepalive(_Snapshot):
    """How shards outlive the SSH session on the node (`method` None: no way, see `reason`)."""

    method: Literal["setsid", "systemd-run"] | None = None
    reason: str = ""


class RailVerdict(_Snapshot):
    """The last fabric-test verdict of one of this node's adapters against one peer node.

    Attributes:
        peer: the node at the other end of the rail.
        adapter: this node's adapter (`mlx5_5`).
        rail: its position in the fabric's adapter list.
        verdict: pass / warn / fail.
        ratio: measured ÷ rated, when both were known.
        measured_at: when the test ran (seconds since the epoch).
    """

    peer: str
    adapter: str
    rail: int | None = None
    verdict: Literal["pass", "warn", "fail"]
    ratio: float | None = None
    measured_gbps: float | None = None
    rated_gbps: float | None = None
    measured_at: float


class NodeFacts(_Snapshot):
    """Everything one node reports (see `llmgw_agent.discover` for how it is found)."""

    agent_version: str
    source: str
    host: Host
    cards: tuple[Card, ...] = ()
    gpus: tuple[Gpu, ...] = ()
    nvlink: dict[str, dict[str, str]] = {}
    nic_affinity: dict[str, dict[str, str]] = {}
    adapters: tuple[Adapter, ...] = ()
    nvlink_domain: NvlinkDomain | None = None
    imex: Imex | None = None
    imex_channels: tuple[str, ...] = ()
    engines: dict[str, Engine] = {}
    model_dirs: dict[str, ModelDir] = {}
    keepalive: Keepalive | None = None
    rail_verdicts: tuple[RailVerdict, ...] = ()
    errors: tuple[str, ...] = ()


def parse_facts(raw: object, node: str = "the node") -> NodeFacts:
    """Validate an agent's facts dict; a bad one raises `BadInput` naming the field.

    NaN and infinities are refused by the models (`allow_inf_nan` off); a number
    beyond `MAX_FACT_NUMBER` anywhere is refused here, in one pass over the raw dict
    (a validator on every field of every model made reading facts 7 times slower).
    """
    huge = _beyond(raw)
    if huge is not None:
        raise BadInput(
            f"{node} sent facts the console cannot read: {huge}: holds a number beyond "
            f"{MAX_FACT_NUMBER}: no hardware reports one",
            "update the agent (the console uploads its own on the next connection)",
        )
    try:
        return NodeFacts.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "(top level)"
        raise BadInput(
            f"{node} sent facts the console cannot read: {where}: {first['msg'].removeprefix('Value error, ')}",
            "update the agent (the console uploads its own on the next connection)",
        ) from exc
