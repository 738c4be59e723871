"""A Slurm cluster's nodes as the scheduler reports them: state, partitions, features, CPUs,
memory and GPUs (declared and in use).

Two readers, one model:

- `read_nodes_json`: the `nodes` list of `scontrol --json show node` (23.02 on) and of
  `sinfo --json` (21.08 to 22.05; from 23.02 `sinfo --json` prints grouped `sinfo` records
  instead, which are refused with a pointer to scontrol). Field names as of data_parser
  v0.0.37 to v0.0.44: `state` a string plus `state_flags` (to 22.05) or a list (23.02 on);
  `features`/`active_features` a comma string (to 22.05) or a list; counts plain numbers or
  `{"set", "infinite", "number"}` objects (23.02 on).
- `read_nodes_oneline`: `scontrol -o -d show node` (every version from 20.11; `-d` adds
  `GresUsed=`, without which the cards in use are read from `AllocTRES=` where the site
  tracks `gres/gpu` there, else unknown).
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict

from llmgw_core.errors import shown_value
from llmgw_core.slurm.gres import GresCount, cards, read_gres, read_tres, tres_cards
from llmgw_core.slurm.text import (
    SlurmOutputUnreadable,
    checked_text,
    count_text,
    json_document,
    number_or_none,
    one_line_fields,
    text_or_empty,
    words,
)

UNAVAILABLE = frozenset(
    {"DOWN", "DRAIN", "DRAINING", "DRAINED", "FAIL", "FAILING", "MAINTENANCE", "NOT_RESPONDING",
     "POWERED_DOWN", "POWERING_DOWN", "POWER_DOWN", "REBOOT_REQUESTED", "REBOOT_ISSUED",
     "INVALID_REG", "FUTURE", "UNKNOWN", "ERROR"}
)  # fmt: skip
"""States and flags in which a node takes no new job of ours."""
_STATE_WORD = re.compile(r"^[A-Z][A-Z_]*$")
_SUFFIX_FLAGS = {"*": "NOT_RESPONDING", "~": "POWERED_DOWN", "#": "POWERING_UP",
                 "%": "POWERING_DOWN", "!": "POWER_DOWN", "$": "MAINTENANCE", "@": "REBOOT_REQUESTED",
                 "^": "REBOOT_ISSUED", "-": "PLANNED"}  # fmt: skip
"""sinfo's and scontrol's one-character state suffixes (`DOWN*`, `IDLE~`) as the flag they mean."""
MAX_NAME_CHARS = 256


class SlurmNode(BaseModel):
    """One node as the scheduler sees it (a snapshot).

    Attributes:
        name: the node's Slurm name (`NodeName`), what `--nodelist` takes.
        hostname, address: `NodeHostName` and `NodeAddr`, where its slurmd listens.
        states: the base state first (`IDLE`, `MIXED`, `ALLOCATED`, `DOWN` …), then its flags
            (`DRAIN`, `COMPLETING`, `NOT_RESPONDING` …), upper case.
        reason: why an operator or Slurm drained or downed it ("" when none).
        partitions: the partitions it belongs to.
        features, active_features: `AvailableFeatures` and `ActiveFeatures`.
        cpus, cpus_allocated: `CPUTot` and `CPUAlloc`.
        memory_mib, memory_allocated_mib: `RealMemory` and `AllocMem`, in MiB.
        gpus: its GPU GRES by type (`gpu:h100:8` → one entry, type h100, count 8).
        gpus_used: cards allocated to jobs now, or None where the output does not say.
    """

    model_config = ConfigDict(frozen=True)

    name: str
    hostname: str = ""
    address: str = ""
    states: tuple[str, ...]
    reason: str = ""
    partitions: tuple[str, ...] = ()
    features: tuple[str, ...] = ()
    active_features: tuple[str, ...] = ()
    cpus: int | None = None
    cpus_allocated: int | None = None
    memory_mib: int | None = None
    memory_allocated_mib: int | None = None
    gpus: tuple[GresCount, ...] = ()
    gpus_used: int | None = None

    @property
    def state(self) -> str:
        """The base state (`IDLE`, `MIXED`, `ALLOCATED`, `DOWN` …)."""
        return self.states[0]

    @property
    def gpu_count(self) -> int:
        """Every card the node declares, all types together."""
        return sum(entry.count for entry in self.gpus)

    @property
    def gpu_types(self) -> tuple[str, ...]:
        """The types of its cards, as declared (`("h100",)`; `("",)` for untyped GRES)."""
        return tuple(dict.fromkeys(entry.type for entry in self.gpus))

    @property
    def available(self) -> bool:
        """Whether it may take a new job: up, not drained, responding, not in maintenance."""
        return not UNAVAILABLE.intersection(self.states)

    @property
    def gpus_free(self) -> int | None:
        """Cards no job holds, or None when the output did not say which are in use."""
        if self.gpus_used is None:
            return None
        return max(0, self.gpu_count - self.gpus_used)


def read_states(value: Any, flags: Any, what: str) -> tuple[str, ...]:
    """A node's state however the version wrote it: `IDLE+DRAIN` and `DOWN*` (text),
    `"idle"` with `state_flags: ["DRAIN"]` (JSON to 22.05), `["IDLE", "DRAIN"]` (23.02 on).

    Raises:
        SlurmOutputUnreadable: no state, or a word that is not a state.
    """
    if isinstance(value, str):
        parts = [part for part in value.split("+") if part]
    elif isinstance(value, list) and all(isinstance(part, str) for part in value):
        parts = list(value)
    else:
        raise SlurmOutputUnreadable(f"{what} is {shown_value(value)}, not a node state")
    if flags is not None:
        if not isinstance(flags, list) or not all(isinstance(flag, str) for flag in flags):
            raise SlurmOutputUnreadable(f"{what}'s flags are {shown_value(flags)}, not a list")
        parts += flags
    states: list[str] = []
    suffixed: list[str] = []
    for part in parts:
        word = part.strip().upper()
        while word and word[-1] in _SUFFIX_FLAGS:
            suffixed.append(_SUFFIX_FLAGS[word[-1]])
            word = word[:-1]
        if not _STATE_WORD.match(word):
            raise SlurmOutputUnreadable(f"{what} holds {shown_value(part)}, not a node state")
        states.append(word)
    if not states:
        raise SlurmOutputUnreadable(f"{what} is empty")
    states += suffixed
    return tuple(dict.fromkeys(states))


def _name(value: Any, what: str) -> str:
    if not isinstance(value, str) or not value or len(value) > MAX_NAME_CHARS:
        raise SlurmOutputUnreadable(f"{what} is {shown_value(value)}, not a node name")
    if any(char.isspace() for char in value):
        raise SlurmOutputUnreadable(f"{what} is {shown_value(value)}, which holds a space")
    return value


def _gpus_used(
    used: tuple[GresCount, ...], tres: dict[str, str], had_used: bool, gres_name: str, what: str
) -> int | None:
    if had_used:
        return sum(entry.count for entry in cards(used, gres_name))
    return tres_cards(tres, gres_name, what)


def read_nodes_json(
    text: str, source: str = "the node list", gres_name: str = "gpu"
) -> list[SlurmNode]:
    """The nodes of `scontrol --json show node` (23.02 on) or `sinfo --json` (21.08, 22.05).

    Raises:
        SlurmOutputUnreadable: one sentence naming the node and the field.
    """
    text = checked_text(text, source)
    try:
        listed = json_document(text, source, "nodes")
    except SlurmOutputUnreadable as refusal:
        if '"sinfo"' in text[:200_000] and '"nodes"' not in text[:200_000]:
            raise SlurmOutputUnreadable(
                f"{source} is sinfo's grouped JSON of Slurm 23.02 or later, not a node list",
                "read nodes with `scontrol --json show node` on that version",
            ) from None
        raise refusal from None
    nodes = []
    for index, raw in enumerate(listed):
        if not isinstance(raw, dict):
            raise SlurmOutputUnreadable(
                f"{source}: node {index} is {shown_value(raw)}, not an object"
            )
        name = _name(raw.get("name"), f"{source}: node {index}'s name")
        where = f"{source}: node {name}"
        gres = read_gres(text_or_empty(raw.get("gres"), f"{where}'s gres"), f"{where}'s gres")
        used_text = raw.get("gres_used")
        used = read_gres(text_or_empty(used_text, f"{where}'s gres_used"), f"{where}'s gres_used")
        tres = read_tres(
            text_or_empty(raw.get("tres_used"), f"{where}'s tres_used"), f"{where}'s tres_used"
        )
        nodes.append(
            SlurmNode(
                name=name,
                hostname=text_or_empty(raw.get("hostname"), f"{where}'s hostname"),
                address=text_or_empty(raw.get("address"), f"{where}'s address"),
                states=read_states(raw.get("state"), raw.get("state_flags"), f"{where}'s state"),
                reason=text_or_empty(raw.get("reason"), f"{where}'s reason"),
                partitions=words(raw.get("partitions"), f"{where}'s partitions"),
                features=words(raw.get("features"), f"{where}'s features"),
                active_features=words(raw.get("active_features"), f"{where}'s active_features"),
                cpus=number_or_none(raw.get("cpus"), f"{where}'s cpus"),
                cpus_allocated=number_or_none(raw.get("alloc_cpus"), f"{where}'s alloc_cpus"),
                memory_mib=number_or_none(raw.get("real_memory"), f"{where}'s real_memory"),
                memory_allocated_mib=number_or_none(
                    raw.get("alloc_memory"), f"{where}'s alloc_memory"
                ),
                gpus=cards(gres, gres_name),
                gpus_used=_gpus_used(used, tres, isinstance(used_text, str), gres_name, where),
            )
        )
    return nodes


def read_nodes_oneline(
    text: str, source: str = "the node list", gres_name: str = "gpu"
) -> list[SlurmNode]:
    """The nodes of `scontrol -o -d show node` (one node a line; 20.11 to current).

    Raises:
        SlurmOutputUnreadable: one sentence naming the line or node and the field.
    """
    nodes = []
    for _pairs, fields in one_line_fields(text, source, "NodeName", "scontrol -o -d show node"):
        name = _name(fields["NodeName"], f"{source}: NodeName")
        where = f"{source}: node {name}"
        if "State" not in fields:
            raise SlurmOutputUnreadable(f"{where} has no State")
        gres = read_gres(fields.get("Gres", ""), f"{where}'s Gres")
        used = read_gres(fields.get("GresUsed", ""), f"{where}'s GresUsed")
        tres = read_tres(fields.get("AllocTRES", ""), f"{where}'s AllocTRES")
        nodes.append(
            SlurmNode(
                name=name,
                hostname=_no_value_empty(fields.get("NodeHostName", "")),
                address=_no_value_empty(fields.get("NodeAddr", "")),
                states=read_states(fields["State"], None, f"{where}'s State"),
                reason=_no_value_empty(fields.get("Reason", "")),
                partitions=words(fields.get("Partitions"), f"{where}'s Partitions"),
                features=words(fields.get("AvailableFeatures"), f"{where}'s AvailableFeatures"),
                active_features=words(fields.get("ActiveFeatures"), f"{where}'s ActiveFeatures"),
                cpus=count_text(fields.get("CPUTot", ""), f"{where}'s CPUTot"),
                cpus_allocated=count_text(fields.get("CPUAlloc", ""), f"{where}'s CPUAlloc"),
                memory_mib=count_text(fields.get("RealMemory", ""), f"{where}'s RealMemory"),
                memory_allocated_mib=count_text(fields.get("AllocMem", ""), f"{where}'s AllocMem"),
                gpus=cards(gres, gres_name),
                gpus_used=_gpus_used(used, tres, "GresUsed" in fields, gres_name, where),
            )
        )
    return nodes


def _no_value_empty(text: str) -> str:
    return "" if text in ("(null)", "N/A", "None") else text
