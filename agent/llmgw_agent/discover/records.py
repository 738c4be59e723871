"""The card record and the MIG record: the one shape every discovery path produces.

XML, text and CSV from nvidia-smi, NVML and `nvidia-smi -L` each know a
different part of a card; each builds its record here, so every record has
every key (what a source does not report is None) and the assembly reads
one shape whichever path found the card.
"""

from __future__ import annotations

TYPE_CHECKING = False  # `typing` costs ms of every agent start; annotations are strings here
if TYPE_CHECKING:
    from typing import Any, Dict

    Record = Dict[str, Any]
else:
    Record = dict  # the same shape at run time, without importing typing

CARD_KEYS = (
    "index",
    "name",
    "uuid",
    "pci_bus_id",
    "memory_mib",
    "memory_used_mib",
    "utilization_pct",
    "temperature_c",
    "power_w",
    "compute_capability",
    "mig_mode",
    "mig_pending",
    "migs",
    "fabric",
    "platform",
    "processes",
)
"""The keys of a card record, in the order the facts show them."""

MIG_KEYS = (
    "index",
    "gpu_instance_id",
    "compute_instance_id",
    "sm_count",
    "memory_mib",
    "memory_used_mib",
    "uuid",
    "profile",
)
"""The keys of a MIG device record."""


def _record(keys: tuple, known: Dict[str, Any], what: str) -> Record:
    unknown = sorted(set(known) - set(keys))
    if unknown:
        raise TypeError("a {} record has no key {}".format(what, ", ".join(unknown)))
    return {key: known.get(key) for key in keys}


def card_record(index: int, name: str, **known: Any) -> Record:
    """A physical card's record: what the source knows, None for the rest, no MIGs or processes.

    Raises:
        TypeError: a key outside `CARD_KEYS` (a typo in a parser, not bad hardware).
    """
    record = _record(CARD_KEYS, dict(known, index=index, name=name), "card")
    record["migs"] = record["migs"] or []
    record["processes"] = record["processes"] or []
    return record


def mig_record(**known: Any) -> Record:
    """A MIG device's record: what the source knows, None for the rest.

    Raises:
        TypeError: a key outside `MIG_KEYS`.
    """
    return _record(MIG_KEYS, known, "MIG")
