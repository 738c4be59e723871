"""Cards from nvidia-smi: `-q -x` (XML), `-q` (text) and `-L`, as card records.

A *card record* (`records.card_record`) is the one shape every discovery
path (XML, text, CSV, NVML) produces for a physical card, before the facts
are assembled. A MIG device in the XML or text carries no UUID and no profile
name; `-L` supplies both (see `parse_smi_list`), and the assembly joins them.
"""

from __future__ import annotations

import re

from llmgw_agent.discover.fields import ascii_int, clean, flag, number, printed, whole
from llmgw_agent.discover.records import Record, card_record, mig_record

TYPE_CHECKING = False  # `typing` costs ms of every agent start; annotations are strings here
if TYPE_CHECKING:
    import xml.etree.ElementTree as ET
    from typing import Dict, List, Optional

_HEALTH_FLAGS = ("route_recovery_in_progress", "route_unhealthy", "access_timeout_recovery")
HEALTH_KEYS = (
    "summary",
    "bandwidth",
    *_HEALTH_FLAGS,
    "incorrect_configuration",
    "partition_assigned",
)
"""The keys of a card's fabric health, the same from XML, text, CSV and NVML."""


class SmiParseError(ValueError):
    """nvidia-smi output that cannot be read; the message names the file's problem."""


def _text(node: Optional[ET.Element], path: str) -> Optional[str]:
    if node is None:
        return None
    found = node.find(path)
    return None if found is None else (found.text or "")


def fabric_record(
    state: Optional[str],
    status: Optional[str],
    clique_id: Optional[str],
    cluster_uuid: Optional[str],
    health: Dict[str, Optional[str]],
) -> Optional[Record]:
    """The fabric of one card from the printed strings, or None when it has none.

    A card without a fabric prints `N/A` for the state (L40S, T4, the 535
    A100) or no section at all (510); both give None. Health fields missing in
    older schemas (no `summary` before 580) stay None.
    """
    state = clean(state)
    if state is None:
        return None
    clique = whole(clique_id)
    return {
        "state": state,
        "status": clean(status),
        "clique_id": clique,
        "cluster_uuid": clean(cluster_uuid),
        "health": {
            key: flag(health.get(key)) if key in _HEALTH_FLAGS else clean(health.get(key))
            for key in HEALTH_KEYS
        },
    }


def _mig_mode(current: Optional[str]) -> Optional[str]:
    value = clean(current)
    if value is None:
        return None
    return value.lower() if value.lower() in ("enabled", "disabled") else None


def _xml_fabric(gpu: ET.Element) -> Optional[Record]:
    fabric = gpu.find("fabric")
    if fabric is None:
        return None
    health_node = fabric.find("health")
    health: Dict[str, Optional[str]] = {}
    if health_node is not None:
        for child in health_node:
            health[child.tag] = child.text or ""
    return fabric_record(
        _text(fabric, "state"),
        _text(fabric, "status"),
        _text(fabric, "cliqueId"),
        _text(fabric, "clusterUuid"),
        health,
    )


def _xml_platform(gpu: ET.Element) -> Optional[Record]:
    node = gpu.find("platformInfo")
    if node is None:
        return None
    return {
        "chassis_serial": clean(_text(node, "chassis_serial_number")),
        "slot_number": whole(_text(node, "slot_number")),
        "tray_index": whole(_text(node, "tray_index")),
        "host_id": whole(_text(node, "host_id")),
        "module_id": whole(_text(node, "module_id")),
        "peer_type": clean(_text(node, "peer_type")),
    }


def _xml_processes(gpu: ET.Element) -> List[Record]:
    processes = []
    for proc in gpu.findall("processes/process_info"):
        processes.append(
            {
                "pid": whole(_text(proc, "pid")),
                "name": clean(_text(proc, "process_name")) or "",
                "used_mib": whole(_text(proc, "used_memory")) or 0,
                "gpu_instance_id": whole(_text(proc, "gpu_instance_id")),
                "compute_instance_id": whole(_text(proc, "compute_instance_id")),
            }
        )
    return processes


def _xml_power(gpu: ET.Element) -> Optional[float]:
    # 580+ prints average/instant draw; 535 prints power_draw; older put it under power_readings.
    for path in (
        "gpu_power_readings/instant_power_draw",
        "gpu_power_readings/power_draw",
        "gpu_power_readings/average_power_draw",
        "power_readings/power_draw",
    ):
        value = number(_text(gpu, path))
        if value is not None:
            return value
    return None


def _xml_migs(gpu: ET.Element) -> List[Record]:
    migs = []
    for mig in gpu.findall("mig_devices/mig_device"):
        migs.append(
            mig_record(
                index=whole(_text(mig, "index")),
                gpu_instance_id=whole(_text(mig, "gpu_instance_id")),
                compute_instance_id=whole(_text(mig, "compute_instance_id")),
                sm_count=whole(_text(mig, "device_attributes/shared/multiprocessor_count")),
                memory_mib=whole(_text(mig, "fb_memory_usage/total")),
                memory_used_mib=whole(_text(mig, "fb_memory_usage/used")),
            )
        )
    return migs


MAX_CARD_MIB = 16 * 1024 * 1024
"""16 TiB: no card holds more; a larger figure is a damaged capture, not a card."""


def card_memory_mib(text: Optional[str], index: int) -> Optional[int]:
    """A card's total memory in MiB, refused when no card could hold it."""
    value = printed(text)
    if value is not None and not value <= MAX_CARD_MIB:  # NaN and infinity included
        shown = "{:.0f}".format(value) if value < 1e30 else "an absurd number of"
        raise SmiParseError(
            "GPU {} reports {} MiB of memory, more than any card has".format(index, shown)
        )
    return whole(text)


_ENTITY = re.compile(r"<!ENTITY", re.IGNORECASE)
_DOCTYPE = re.compile(r"<!DOCTYPE[^>\[]*(\[.*?\])?\s*>", re.DOTALL)


def parse_smi_xml(text: str) -> Record:
    """`nvidia-smi -q -x` -> `{driver_version, cuda_version, cards: [card record]}`.

    The DTD is never resolved and a document declaring entities is refused; the `<gpu>` elements are counted (trimmed
    captures say `attached_gpus` 4 and hold one), and their order is the index.
    """
    if _ENTITY.search(text):
        # Entity expansion stays off: no billion laughs, no external file read.
        raise SmiParseError("nvidia-smi -q -x output declares XML entities, which are refused")
    body = _DOCTYPE.sub("", text, count=1)
    import xml.etree.ElementTree as ET  # 3 to 5 ms: only where nvidia-smi's XML is read (not NVML)

    try:
        root = ET.fromstring(body)
    except ET.ParseError as exc:
        raise SmiParseError("nvidia-smi -q -x output is not XML ({})".format(exc)) from exc
    if root.tag != "nvidia_smi_log":
        raise SmiParseError("nvidia-smi -q -x output has no <nvidia_smi_log> root")
    cards = []
    for index, gpu in enumerate(root.findall("gpu")):
        name = clean(_text(gpu, "product_name")) or "unknown GPU"
        cards.append(
            card_record(
                index,
                name,
                uuid=clean(_text(gpu, "uuid")),
                pci_bus_id=clean(_text(gpu, "pci/pci_bus_id")) or gpu.get("id"),
                memory_mib=card_memory_mib(_text(gpu, "fb_memory_usage/total"), index),
                memory_used_mib=whole(_text(gpu, "fb_memory_usage/used")),
                utilization_pct=whole(_text(gpu, "utilization/gpu_util")),
                temperature_c=number(_text(gpu, "temperature/gpu_temp")),
                power_w=_xml_power(gpu),
                mig_mode=_mig_mode(_text(gpu, "mig_mode/current_mig")),
                mig_pending=_mig_mode(_text(gpu, "mig_mode/pending_mig")),
                migs=_xml_migs(gpu),
                fabric=_xml_fabric(gpu),
                platform=_xml_platform(gpu),
                processes=_xml_processes(gpu),
            )
        )
    return {
        "driver_version": clean(_text(root, "driver_version")),
        "cuda_version": clean(_text(root, "cuda_version")),
        "cards": cards,
    }


_LIST_GPU = re.compile(r"^GPU\s+([0-9]+):\s+(.+?)\s+\(UUID:\s+(GPU-[^)]+)\)\s*$")
_LIST_MIG = re.compile(r"MIG\s+(\S+)\s+Device\s+([0-9]+):\s+\(UUID:\s+(MIG-[^)]+)\)")


def parse_smi_list(text: str) -> List[Record]:
    """`nvidia-smi -L` -> `[{index, name, uuid, migs: [{index, profile, uuid}]}]`.

    MIG lines are indented under their card; some cards of a node may be in
    MIG mode and others not.
    """
    cards: List[Record] = []
    for line in text.splitlines():
        gpu = _LIST_GPU.match(line.strip())
        index = ascii_int(gpu.group(1)) if gpu else None
        if gpu and index is not None:
            cards.append(
                {
                    "index": index,
                    "name": gpu.group(2),
                    "uuid": gpu.group(3),
                    "migs": [],
                }
            )
            continue
        mig = _LIST_MIG.search(line)
        instance = ascii_int(mig.group(2)) if mig else None
        if mig and cards and instance is not None:
            cards[-1]["migs"].append(
                {"index": instance, "profile": mig.group(1), "uuid": mig.group(3)}
            )
    return cards


# ---- `nvidia-smi -q` (text) -------------------------------------------------


def _text_tree(text: str) -> List[Record]:
    """The `-q` text as nested `{"key", "value", "children"}` nodes, by indentation."""
    root: Record = {"key": "", "value": None, "children": []}
    stack = [(-1, root)]
    for raw in text.splitlines():
        if not raw.strip() or raw.startswith("=") or raw.strip() == "--":
            continue
        indent = len(raw) - len(raw.lstrip(" "))
        line = raw.strip()
        if " : " in line or line.endswith(" :"):
            key, _, value = line.partition(" :")
            node = {"key": key.strip(), "value": value.strip(), "children": []}
        else:
            node = {"key": line, "value": None, "children": []}
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack[-1][1]["children"].append(node)
        stack.append((indent, node))
    return root["children"]


def _child(node: Record, key: str) -> Optional[Record]:
    for child in node["children"]:
        if child["key"] == key:
            return child
    return None


def _value(node: Optional[Record], *path: str) -> Optional[str]:
    for key in path:
        if node is None:
            return None
        node = _child(node, key)
    return None if node is None else node["value"]


def text_fabric(node: Record) -> Optional[Record]:
    """A card record's fabric from a text `Fabric` section node."""
    health_node = _child(node, "Health")
    health: Dict[str, Optional[str]] = {}
    if health_node is not None:
        for child in health_node["children"]:
            health[child["key"].lower().replace(" ", "_")] = child["value"]
    return fabric_record(
        _value(node, "State"),
        _value(node, "Status"),
        _value(node, "CliqueId"),
        _value(node, "ClusterUUID"),
        health,
    )


def parse_fabric_text(text: str) -> Optional[Record]:
    """The fabric of a `-q` text excerpt (a `Fabric` block, grep output included)."""
    for node in _walk(_text_tree(text)):
        if node["key"] == "Fabric" and node["value"] is None:
            return text_fabric(node)
    return None


def _walk(nodes: List[Record]):
    for node in nodes:
        yield node
        yield from _walk(node["children"])


def parse_smi_text(text: str) -> Record:
    """`nvidia-smi -q` (text) -> the same shape as `parse_smi_xml`.

    Keys are split on the first ` : `, never on column position (535 and 590
    pad differently); `MIG Device` blocks repeat and are collected in order.
    """
    top = _text_tree(text)
    cards = []
    for node in top:
        if not node["key"].startswith("GPU ") or node["value"] is not None:
            continue
        migs = []
        for child in node["children"]:
            if child["key"] != "MIG Device":
                continue
            migs.append(
                mig_record(
                    index=whole(_value(child, "Index")),
                    gpu_instance_id=whole(_value(child, "GPU Instance ID")),
                    compute_instance_id=whole(_value(child, "Compute Instance ID")),
                    sm_count=whole(
                        _value(child, "Device Attributes", "Shared", "Multiprocessor count")
                    ),
                    memory_mib=whole(_value(child, "Shared FB Memory Usage", "Total")),
                    memory_used_mib=whole(_value(child, "Shared FB Memory Usage", "Used")),
                )
            )
        fabric_node = _child(node, "Fabric")
        name = clean(_value(node, "Product Name")) or "unknown GPU"
        cards.append(
            card_record(
                len(cards),
                name,
                uuid=clean(_value(node, "GPU UUID")),
                pci_bus_id=node["key"].split(" ", 1)[1].strip(),
                memory_mib=card_memory_mib(_value(node, "FB Memory Usage", "Total"), len(cards)),
                memory_used_mib=whole(_value(node, "FB Memory Usage", "Used")),
                utilization_pct=whole(_value(node, "Utilization", "GPU")),
                temperature_c=number(_value(node, "Temperature", "GPU Current Temp")),
                power_w=number(_value(node, "GPU Power Readings", "Instantaneous Power Draw"))
                or number(_value(node, "GPU Power Readings", "Power Draw")),
                mig_mode=_mig_mode(_value(node, "MIG Mode", "Current")),
                mig_pending=_mig_mode(_value(node, "MIG Mode", "Pending")),
                migs=migs,
                fabric=text_fabric(fabric_node) if fabric_node is not None else None,
            )
        )
    header = {child["key"]: child["value"] for child in top if child["value"] is not None}
    return {
        "driver_version": clean(header.get("Driver Version")),
        "cuda_version": clean(header.get("CUDA Version")),
        "cards": cards,
    }


# ---- `nvidia-smi --query-gpu=... --format=csv` ---------------------------------


def _csv_field(row: Dict[str, str], name: str) -> Optional[str]:
    for key, value in row.items():
        if key == name or key.startswith(name + " ["):
            return value
    return None


def parse_query_gpu_csv(text: str) -> List[Record]:
    """`--query-gpu` CSV (with units in the header) -> partial card records.

    Fields are separated by `, `; unsupported ones print `[N/A]` (the
    `fabric.health.*` ones bare `N/A`), both read as None.
    """
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return []
    header = [name.strip() for name in lines[0].split(",")]
    cards = []
    for line in lines[1:]:
        values = [value.strip() for value in line.split(",")]
        row = dict(zip(header, values))
        health = {key: _csv_field(row, "fabric.health." + key) for key in HEALTH_KEYS}
        index = whole(_csv_field(row, "index"))
        cards.append(
            card_record(
                index if index is not None else len(cards),
                clean(_csv_field(row, "name")) or "unknown GPU",
                uuid=clean(_csv_field(row, "uuid")),
                pci_bus_id=clean(_csv_field(row, "pci.bus_id")),
                memory_mib=whole(_csv_field(row, "memory.total")),
                memory_used_mib=whole(_csv_field(row, "memory.used")),
                utilization_pct=whole(_csv_field(row, "utilization.gpu")),
                temperature_c=number(_csv_field(row, "temperature.gpu")),
                power_w=number(_csv_field(row, "power.draw")),
                compute_capability=clean(_csv_field(row, "compute_cap")),
                mig_mode=_mig_mode(_csv_field(row, "mig.mode.current")),
                mig_pending=_mig_mode(_csv_field(row, "mig.mode.pending")),
                fabric=fabric_record(
                    _csv_field(row, "fabric.state"),
                    _csv_field(row, "fabric.status"),
                    _csv_field(row, "fabric.cliqueId"),
                    _csv_field(row, "fabric.clusterUuid"),
                    health,
                ),
            )
        )
    return cards
