"""Turning parsed pieces into the node's facts dict (pure: values in, values out).

Every discovery path (NVML, nvidia-smi, a capture directory) ends here, so
the facts have one shape whatever produced them. The shape is documented in
`llmgw_agent.discover` and validated by `llmgw_core.facts` on arrival.
"""

from __future__ import annotations

import copy

from llmgw_agent.discover import classes
from llmgw_agent.discover.fabric import fabric_verdict, nvlink_domain
from llmgw_agent.discover.fields import ascii_int
from llmgw_agent.discover.ib import rated_speeds
from llmgw_agent.discover.records import card_record, mig_record
from llmgw_agent.discover.topo import nearest_nics, nic_affinity, nvlink_matrix

TYPE_CHECKING = False  # `typing` costs ms of every agent start; annotations are strings here
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional

    Record = Dict[str, Any]
else:
    Record = dict  # the same shape at run time, without importing typing

MIG_ID_BASE = 1000
"""MIG instance ids are `1000 + 100 x card + instance`: never confused with a card index."""


def mig_gpu_id(card_index: int, instance: int) -> int:
    """The placement id of MIG instance `instance` of card `card_index`."""
    return MIG_ID_BASE + 100 * card_index + instance


def mig_label(card_index: int, instance: int) -> str:
    """How a MIG instance is shown: `3/mig1`."""
    return "{}/mig{}".format(card_index, instance)


def _profile_memory_mib(profile: Optional[str]) -> Optional[int]:
    if not profile:
        return None
    tail = profile.rsplit(".", 1)[-1]
    gb = ascii_int(tail[:-2]) if tail.endswith("gb") else None  # `1g.²gb`: no size, no crash
    return gb * 1024 if gb is not None else None


def join_listing(cards: List[Record], listing: List[Record]) -> List[Record]:
    """Cards from the XML/text/NVML joined with `nvidia-smi -L` (UUIDs and MIG profiles).

    The join is on the card UUID where both have one, else on the index. MIG
    devices are joined on their order, the order both print them in. With no
    XML at all, the `-L` cards stand alone (no memory, no live values).
    """
    by_uuid = {entry["uuid"]: entry for entry in listing if entry.get("uuid")}
    by_index = {entry["index"]: entry for entry in listing}
    if not cards:
        cards = [
            card_record(
                entry["index"],
                entry["name"],
                uuid=entry["uuid"],
                mig_mode="enabled" if entry["migs"] else None,
            )
            for entry in listing
        ]
    joined = []
    for card in cards:
        card = copy.deepcopy(card)
        entry = by_uuid.get(card.get("uuid")) or by_index.get(card["index"])
        if entry is not None:
            card["uuid"] = card.get("uuid") or entry["uuid"]
            listed = sorted(entry["migs"], key=lambda m: m["index"])
            if not card["migs"] and listed:
                card["migs"] = [
                    mig_record(
                        index=m["index"],
                        memory_mib=_profile_memory_mib(m["profile"]),
                        uuid=m["uuid"],
                        profile=m["profile"],
                    )
                    for m in listed
                ]
            else:
                ordered = sorted(card["migs"], key=lambda m: m["index"] or 0)
                for mig, listed_mig in zip(ordered, listed):
                    mig["uuid"] = listed_mig["uuid"]
                    mig["profile"] = listed_mig["profile"]
        joined.append(card)
    return joined


def _card_facts(card: Record, topo: Optional[Record], nearest: Dict[int, Optional[str]]) -> Record:
    name = card["name"]
    label = classes.card_class(name, card.get("memory_mib"))
    affinity = (topo or {}).get("affinity", {}).get("GPU{}".format(card["index"]), {})
    fabric = copy.deepcopy(card.get("fabric"))
    if fabric is not None:
        fabric["verdict"] = fabric_verdict(fabric)
    out_of_placement = None
    if card.get("mig_mode") == "enabled" and not card.get("migs"):
        out_of_placement = (
            "MIG mode is on but no MIG instance is carved, so nothing can run on this card"
        )
    return {
        "index": card["index"],
        "name": name,
        "uuid": card.get("uuid"),
        "pci_bus_id": card.get("pci_bus_id"),
        "memory_mib": card.get("memory_mib"),
        "memory_used_mib": card.get("memory_used_mib"),
        "utilization_pct": card.get("utilization_pct"),
        "temperature_c": card.get("temperature_c"),
        "power_w": card.get("power_w"),
        "compute_capability": card.get("compute_capability") or classes.compute_capability(name),
        "class": label,
        "mig_mode": card.get("mig_mode"),
        "mig_pending": card.get("mig_pending"),
        "numa_node": affinity.get("numa_node"),
        "cpu_affinity": affinity.get("cpus"),
        "nearest_nic": nearest.get(card["index"]),
        "fabric": fabric,
        "platform": card.get("platform"),
        "processes": [_process(p) for p in card.get("processes", [])],
        "out_of_placement": out_of_placement,
    }


def _process(process: Record) -> Record:
    return {
        "pid": process.get("pid"),
        "name": process.get("name") or "",
        "used_mib": process.get("used_mib") or 0,
    }


def _gpus_of(card: Record, facts_card: Record) -> List[Record]:
    common = {
        "card_index": card["index"],
        "name": card["name"],
        "temperature_c": facts_card["temperature_c"],
        "power_w": facts_card["power_w"],
        "compute_capability": facts_card["compute_capability"],
    }
    if facts_card["mig_mode"] != "enabled":
        gpu = {
            "id": card["index"],
            "label": str(card["index"]),
            "uuid": facts_card["uuid"],
            "class": facts_card["class"],
            "mig_profile": None,
            "memory_mib": facts_card["memory_mib"],
            "memory_used_mib": facts_card["memory_used_mib"],
            "utilization_pct": facts_card["utilization_pct"],
            "processes": facts_card["processes"],
        }
        gpu.update(common)
        return [gpu]
    gpus = []
    for position, mig in enumerate(sorted(card["migs"], key=lambda m: m["index"] or 0)):
        instance = mig["index"] if mig["index"] is not None else position
        profile = mig.get("profile") or classes.mig_profile(
            card["name"], mig.get("sm_count"), mig.get("memory_mib")
        )
        processes = [
            _process(p)
            for p in card.get("processes", [])
            if p.get("gpu_instance_id") is not None
            and p.get("gpu_instance_id") == mig.get("gpu_instance_id")
            and p.get("compute_instance_id") in (None, mig.get("compute_instance_id"))
        ]
        gpu = {
            "id": mig_gpu_id(card["index"], instance),
            "label": mig_label(card["index"], instance),
            "uuid": mig.get("uuid"),
            "class": classes.mig_class(facts_card["class"], profile or "unknown"),
            "mig_profile": profile,
            "memory_mib": mig.get("memory_mib"),
            "memory_used_mib": mig.get("memory_used_mib"),
            "utilization_pct": None,  # NVML gives no per-instance utilisation: left out, not zero
            "processes": processes,
            "gpu_instance_id": mig.get("gpu_instance_id"),
            "compute_instance_id": mig.get("compute_instance_id"),
        }
        gpu.update(common)
        gpus.append(gpu)
    return gpus


def apply_sim_usage(facts: Record, usages: List[Record]) -> None:
    """Add the memory simulated engines hold to the GPUs they name (in place).

    A usage names GPUs by card index, placement id, label (`3/mig1`) or UUID.
    """
    by_key: Dict[str, Record] = {}
    for gpu in facts["gpus"]:
        for key in (gpu["id"], gpu["label"], gpu.get("uuid")):
            if key is not None:
                by_key[str(key)] = gpu
    cards = {card["index"]: card for card in facts["cards"]}
    for usage in usages:
        used = usage.get("used_mib") or 0  # a whole number: read by SIM_USAGE_SCHEMA
        for target in usage.get("gpus") or []:
            gpu = by_key.get(str(target))
            if gpu is None:
                continue
            gpu["memory_used_mib"] = (gpu.get("memory_used_mib") or 0) + used
            entry = {"pid": usage.get("pid"), "name": "sim-engine", "used_mib": used}
            gpu["processes"] = [*gpu["processes"], entry]
            card = cards.get(gpu["card_index"])
            if card is not None:
                card["memory_used_mib"] = (card.get("memory_used_mib") or 0) + used
                if gpu["mig_profile"] is None:
                    card["processes"] = gpu["processes"]
                else:
                    card["processes"] = [*card["processes"], entry]


def build_facts(
    smi: Optional[Record],
    listing: List[Record],
    topo: Optional[Record],
    adapters: List[Record],
    imex: Optional[Record],
    imex_channels: List[str],
    host: Record,
    engines: Dict[str, Record],
    model_dirs: Dict[str, Record],
    source: str,
    agent_version: str,
    errors: List[str],
) -> Record:
    """The facts dict of one node from its parsed pieces."""
    cards = join_listing((smi or {}).get("cards", []), listing)
    nearest = nearest_nics(topo) if topo else {}
    card_facts = [_card_facts(card, topo, nearest) for card in cards]
    gpus: List[Record] = []
    for card, facts_card in zip(cards, card_facts):
        gpus.extend(_gpus_of(card, facts_card))
    host = dict(host)
    if smi:
        host["driver_version"] = host.get("driver_version") or smi.get("driver_version")
        host["cuda_version"] = host.get("cuda_version") or smi.get("cuda_version")
    rated = rated_speeds(adapters)
    adapter_facts = []
    for adapter in adapters:
        entry = dict(adapter)
        entry["rated_gbps"] = rated.get("{}:{}".format(adapter["name"], adapter["port"]))
        adapter_facts.append(entry)
    imex_facts = None
    if imex is not None:
        imex_facts = dict(imex)
        imex_facts["channels"] = list(imex_channels)
    return {
        "agent_version": agent_version,
        "source": source,
        "host": host,
        "cards": card_facts,
        "gpus": gpus,
        "nvlink": nvlink_matrix(topo) if topo else {},
        "nic_affinity": nic_affinity(topo) if topo else {},
        "adapters": adapter_facts,
        "nvlink_domain": nvlink_domain([c["fabric"] for c in card_facts]),
        "imex": imex_facts,
        "imex_channels": list(imex_channels),
        "engines": engines,
        "model_dirs": model_dirs,
        "errors": list(errors),
    }
