"""Writing nvidia-smi output for simulated cards: `-q -x`, `-L` and `topo -m`.

The text is built from a small card description, element by element in the
order and formatting the real driver uses (tab indentation, units in the
values, `N/A` where a field does not apply, the fabric section of the
driver's schema generation), so the same parser reads it as reads a capture.
"""

from __future__ import annotations

import hashlib
import uuid as uuid_mod
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

Tree = List[Tuple[str, Any]]
Value = Union[str, Tree, None]

_NAMESPACE = uuid_mod.UUID("6f1c5e0a-8a52-4c1e-9d43-3b1f0d6a2c11")


def stable_uuid(prefix: str, *parts: object) -> str:
    """A UUID that is the same every time for the same parts (`GPU-…`, `MIG-…`)."""
    name = "/".join(str(p) for p in parts)
    return "{}-{}".format(prefix, uuid_mod.uuid5(_NAMESPACE, name))


def stable_serial(*parts: object) -> str:
    """A 13-digit board serial, stable for the same parts."""
    digest = hashlib.sha256("/".join(str(p) for p in parts).encode()).hexdigest()
    return "165" + str(int(digest[:12], 16))[:10].rjust(10, "0")


def _emit(tag: str, value: Value, depth: int, out: List[str], attrs: str = "") -> None:
    pad = "\t" * depth
    if value is None:
        out.append("{}<{}{}></{}>".format(pad, tag, attrs, tag))
    elif isinstance(value, str):
        out.append("{}<{}{}>{}</{}>".format(pad, tag, attrs, value, tag))
    else:
        out.append("{}<{}{}>".format(pad, tag, attrs))
        for child_tag, child in value:
            _emit(child_tag, child, depth + 1, out)
        out.append("{}</{}>".format(pad, tag))


def _mib(value: int) -> str:
    return "{} MiB".format(value)


def _fabric_tree(fabric: Optional[Dict[str, Any]], schema: int) -> Tree:
    """The `<fabric>` element as the driver generation `schema` (535, 570, 580) prints it."""
    if fabric is None:
        return [("state", "N/A"), ("status", "N/A")] + (
            []
            if schema < 570
            else [("cliqueId", "N/A"), ("clusterUuid", "N/A"), ("health", _health_tree({}, schema))]
        )
    tree: Tree = [("state", fabric["state"]), ("status", fabric["status"])]
    if schema >= 570:
        tree += [
            ("cliqueId", str(fabric.get("clique_id", 0))),
            ("clusterUuid", fabric.get("cluster_uuid") or "00000000-0000-0000-0000-000000000000"),
            ("health", _health_tree(fabric.get("health") or {}, schema)),
        ]
    return tree


def _health_tree(health: Dict[str, str], schema: int) -> Tree:
    tree: Tree = []
    if schema >= 580:
        tree.append(("summary", health.get("summary", "N/A")))
    for key in (
        "bandwidth",
        "route_recovery_in_progress",
        "route_unhealthy",
        "access_timeout_recovery",
        "incorrect_configuration",
    ):
        tree.append((key, health.get(key, "N/A")))
    if schema >= 580 and "partition_assigned" in health:
        tree.append(("partition_assigned", health["partition_assigned"]))
    return tree


def _mig_tree(migs: Sequence[Dict[str, Any]]) -> Value:
    if not migs:
        return "None"
    devices: Tree = []
    for position, mig in enumerate(migs):
        slices = mig["slices"]
        devices.append(
            (
                "mig_device",
                [
                    ("index", str(position)),
                    ("gpu_instance_id", str(mig["gpu_instance_id"])),
                    ("compute_instance_id", str(mig.get("compute_instance_id", 0))),
                    (
                        "device_attributes",
                        [
                            (
                                "shared",
                                [
                                    ("multiprocessor_count", str(mig["sm_count"])),
                                    ("copy_engine_count", str(slices)),
                                    ("encoder_count", "0"),
                                    ("decoder_count", str(max(slices // 2, 0))),
                                    ("ofa_count", "1" if slices == 7 else "0"),
                                    ("jpg_count", "1" if slices == 7 else "0"),
                                ],
                            )
                        ],
                    ),
                    ("ecc_error_count", [("volatile_count", [("sram_uncorrectable", "0")])]),
                    (
                        "fb_memory_usage",
                        [
                            ("total", _mib(mig["memory_mib"])),
                            ("reserved", _mib(0)),
                            ("used", _mib(mig.get("used_mib", 12))),
                            ("free", _mib(mig["memory_mib"] - mig.get("used_mib", 12))),
                        ],
                    ),
                    (
                        "bar1_memory_usage",
                        [("total", _mib(32767)), ("used", _mib(0)), ("free", _mib(32767))],
                    ),
                ],
            )
        )
    return devices


def gpu_tree(card: Dict[str, Any], schema: int) -> Tree:
    """One `<gpu>` element's children for a simulated card description."""
    total = card["memory_mib"]
    reserved = card.get("reserved_mib", 551)
    used = card.get("used_mib", 0)
    mig_enabled = card.get("mig") is not None
    migs = card.get("mig") or []
    tree: Tree = [
        ("product_name", card["name"]),
        ("product_brand", "NVIDIA"),
        ("product_architecture", card["architecture"]),
        ("display_mode", "Requested functionality has been deprecated"),
        ("display_attached", "No"),
        ("display_active", "Disabled"),
        ("persistence_mode", "Enabled"),
        ("addressing_mode", card.get("addressing_mode", "HMM")),
        (
            "mig_mode",
            [
                (
                    "current_mig",
                    card.get("mig_mode_text", "Enabled" if mig_enabled else "Disabled"),
                ),
                (
                    "pending_mig",
                    card.get("mig_mode_text", "Enabled" if mig_enabled else "Disabled"),
                ),
            ],
        ),
        ("mig_devices", _mig_tree(migs) if mig_enabled else "None"),
        ("accounting_mode", "Disabled"),
        ("accounting_mode_buffer_size", "4000"),
        ("serial", card["serial"]),
        ("uuid", card["uuid"]),
        ("minor_number", str(card["index"])),
        ("vbios_version", card.get("vbios", "96.00.A5.00.01")),
        ("multigpu_board", "No"),
        ("board_id", "0x{:x}00".format(card["pci_bus"])),
    ]
    platform = card.get("platform")
    if platform is not None:
        tree.append(
            (
                "platformInfo",
                [
                    ("chassis_serial_number", platform["chassis_serial"]),
                    ("slot_number", str(platform["slot_number"])),
                    ("tray_index", str(platform["tray_index"])),
                    ("host_id", "1"),
                    ("peer_type", platform.get("peer_type", "Switch Connected")),
                    ("module_id", str(platform["module_id"])),
                    ("gpu_fabric_guid", "0x{:016x}".format(platform.get("fabric_guid", 0))),
                ],
            )
        )
    bus = "{:08X}:{:02X}:00.0".format(card.get("pci_domain", 0), card["pci_bus"])
    tree += [
        ("c2c_mode", card.get("c2c_mode", "Disabled")),
        (
            "pci",
            [
                ("pci_bus", "{:02X}".format(card["pci_bus"])),
                ("pci_device", "00"),
                ("pci_domain", "{:04X}".format(card.get("pci_domain", 0))),
                ("pci_device_id", card["pci_device_id"]),
                ("pci_bus_id", bus),
                ("pci_sub_system_id", card.get("pci_sub_system_id", "16C110DE")),
                ("tx_util", "0 KB/s"),
                ("rx_util", "0 KB/s"),
            ],
        ),
        ("fan_speed", card.get("fan_speed", "N/A")),
        ("performance_state", "P0"),
        (
            "fb_memory_usage",
            [
                ("total", _mib(total)),
                ("reserved", _mib(reserved)),
                ("used", _mib(used)),
                ("free", _mib(total - reserved - used)),
            ],
        ),
        ("bar1_memory_usage", [("total", _mib(131072)), ("used", _mib(1)), ("free", _mib(131071))]),
        ("compute_mode", "Default"),
        (
            "utilization",
            [
                ("gpu_util", "N/A" if mig_enabled else "{} %".format(card.get("util_pct", 0))),
                ("memory_util", "N/A" if mig_enabled else "0 %"),
                ("encoder_util", "0 %"),
                ("decoder_util", "0 %"),
            ],
        ),
        ("ecc_mode", [("current_ecc", "Enabled"), ("pending_ecc", "Enabled")]),
        (
            "temperature",
            [
                ("gpu_temp", "{} C".format(card.get("temperature_c", 31))),
                ("gpu_temp_tlimit", "N/A"),
                ("memory_temp", "{} C".format(card.get("temperature_c", 31) + 4)),
            ],
        ),
        (
            "gpu_power_readings",
            [
                ("power_state", "P0"),
                ("average_power_draw", "{:.2f} W".format(card.get("power_w", 70.0))),
                ("instant_power_draw", "{:.2f} W".format(card.get("power_w", 70.0))),
                ("current_power_limit", "{:.2f} W".format(card["power_limit_w"])),
                ("default_power_limit", "{:.2f} W".format(card["power_limit_w"])),
                ("max_power_limit", "{:.2f} W".format(card["power_limit_w"])),
            ],
        ),
        (
            "clocks",
            [
                ("graphics_clock", "345 MHz"),
                ("sm_clock", "345 MHz"),
                ("mem_clock", card.get("mem_clock", "2619 MHz")),
                ("video_clock", "765 MHz"),
            ],
        ),
        (
            "max_clocks",
            [
                ("graphics_clock", card.get("max_clock", "1980 MHz")),
                ("sm_clock", card.get("max_clock", "1980 MHz")),
                ("mem_clock", card.get("mem_clock", "2619 MHz")),
            ],
        ),
        ("fabric", _fabric_tree(card.get("fabric"), schema)),
        ("processes", []),
        ("accounted_processes", []),
    ]
    return tree


def smi_xml(cards: Sequence[Dict[str, Any]], driver: str, cuda: str, timestamp: str) -> str:
    """The whole `nvidia-smi -q -x` document for the cards."""
    schema = int(driver.split(".")[0])
    dtd = 13 if schema >= 575 else 12
    out = [
        '<?xml version="1.0" ?>',
        '<!DOCTYPE nvidia_smi_log SYSTEM "nvsmi_device_v{}.dtd">'.format(dtd),
        "<nvidia_smi_log>",
        "\t<timestamp>{}</timestamp>".format(timestamp),
        "\t<driver_version>{}</driver_version>".format(driver),
        "\t<cuda_version>{}</cuda_version>".format(cuda),
        "\t<attached_gpus>{}</attached_gpus>".format(len(cards)),
    ]
    for card in cards:
        bus = "{:08X}:{:02X}:00.0".format(card.get("pci_domain", 0), card["pci_bus"])
        _emit("gpu", gpu_tree(card, schema), 1, out, attrs=' id="{}"'.format(bus))
    out.append("</nvidia_smi_log>")
    return "\n".join(out) + "\n"


def smi_list(cards: Sequence[Dict[str, Any]]) -> str:
    """`nvidia-smi -L`: cards, and MIG devices indented under theirs."""
    lines = []
    for card in cards:
        lines.append("GPU {}: {} (UUID: {})".format(card["index"], card["name"], card["uuid"]))
        for position, mig in enumerate(card.get("mig") or []):
            lines.append(
                "  MIG {:<11} Device {:>2}: (UUID: {})".format(
                    mig["profile"], position, mig["uuid"]
                )
            )
    return "\n".join(lines) + "\n"


_LEGEND = """Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks
"""


def topo_matrix(
    gpu_link: List[List[str]],
    nic_link: List[List[str]],
    nic_nic: List[List[str]],
    affinity: List[Tuple[str, str]],
    nic_names: Sequence[str],
) -> str:
    """`nvidia-smi topo -m` as the driver prints it: tabs, ANSI-underlined header, legends.

    `gpu_link[i][j]` is the GPU-GPU cell, `nic_link[i][n]` the GPU-NIC cell,
    `nic_nic[n][m]` the NIC-NIC cell, `affinity[i]` = (cpu list, numa node).
    """
    gpus = len(gpu_link)
    columns = ["GPU{}".format(i) for i in range(gpus)] + [
        "NIC{}".format(n) for n in range(len(nic_names))
    ]
    header = (
        "\t\x1b[4m"
        + "\t".join([*columns, "CPU Affinity", "NUMA Affinity", "GPU NUMA ID"])
        + "\x1b[0m"
    )
    lines = [header]
    for i in range(gpus):
        cells = [" X " if i == j else gpu_link[i][j] for j in range(gpus)]
        cells += [nic_link[i][n] for n in range(len(nic_names))]
        cpus, numa = affinity[i]
        lines.append("\t".join(["GPU{}".format(i), *cells, cpus, numa, "N/A"]))
    for n in range(len(nic_names)):
        cells = [nic_link[i][n] for i in range(gpus)]
        cells += [" X " if n == m else nic_nic[n][m] for m in range(len(nic_names))]
        lines.append("\t".join(["NIC{}".format(n), *cells]))
    text = "\n".join(lines) + "\n\n" + _LEGEND
    if nic_names:
        text += "\nNIC Legend:\n\n" + "".join(
            "  NIC{}: {}\n".format(n, name) for n, name in enumerate(nic_names)
        )
    return text
