"""RDMA adapters from `/sys/class/infiniband`, with `ibstat` (and kin) as fallbacks.

An *adapter record* is one port: `name, port, state, phys_state, rate_gbps,
link_layer, gid_index, hca_type, fw_version, netdev`. The link layer is what
tells InfiniBand from RoCE: `ibv_devinfo` says `transport: InfiniBand` even
on RoCE, so the transport line is never used. A down port still reports a
rate; the state says it is down.
"""

from __future__ import annotations

import re
from pathlib import Path

from llmgw_agent.discover.fields import ascii_int, finite

TYPE_CHECKING = False  # `typing` costs ms of every agent start; annotations are strings here
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional

    Record = Dict[str, Any]
else:
    Record = dict  # the same shape at run time, without importing typing

_STATE_WORD = re.compile(r"([A-Za-z_]+)")


def port_state(text: Optional[str]) -> Optional[str]:
    """`4: ACTIVE`, `Active`, `PORT_ACTIVE (4)` -> `ACTIVE`; `Down` -> `DOWN`."""
    if not text:
        return None
    value = text.strip()
    if ":" in value:
        value = value.split(":", 1)[1]
    value = value.replace("PORT_", "")
    match = _STATE_WORD.search(value)
    return match.group(1).upper() if match else None


def phys_state(text: Optional[str]) -> Optional[str]:
    """`5: LinkUp` -> `LinkUp`."""
    if not text:
        return None
    value = text.strip()
    return value.split(":", 1)[1].strip() if ":" in value else value


def rate_gbps(text: Optional[str]) -> Optional[float]:
    """`400 Gb/sec (4X NDR)` or `400` -> 400.0."""
    if not text:
        return None
    match = re.match(r"\s*([0-9]+(?:\.[0-9]+)?)", text)
    return finite(float(match.group(1))) if match else None  # 400 digits: no rate


def link_layer(text: Optional[str]) -> Optional[str]:
    """`InfiniBand` or `Ethernet` (RoCE), as sysfs and ibstat print it."""
    if not text:
        return None
    value = text.strip().lower()
    if value.startswith("infiniband") or value == "ib":
        return "InfiniBand"
    if value.startswith("ethernet") or value == "eth":
        return "Ethernet"
    return text.strip()


def _adapter(name: str, port: int) -> Record:
    return {
        "name": name,
        "port": port,
        "state": None,
        "phys_state": None,
        "rate_gbps": None,
        "link_layer": None,
        "gid_index": None,
        "hca_type": None,
        "fw_version": None,
        "netdev": None,
    }


def _read(path: Path) -> Optional[str]:
    """A sysfs value, None when unreadable — or not ASCII, which the kernel never writes
    (Python's `int` and `\\d` would take `٤٠٠` for 400)."""
    try:
        text = path.read_text(errors="replace").strip()
    except OSError:
        return None
    return text if text.isascii() else None


def roce_gid_index(port_dir: Path) -> Optional[int]:
    """The RoCE v2 GID index of a port: the first `RoCE v2` entry holding an IPv4-mapped GID.

    `gid_attrs/types/<i>` names each entry's type and `gids/<i>` its value; NCCL
    wants the v2 entry of the interface's IPv4 address (`::ffff:a.b.c.d`), else
    the first non-zero v2 entry.
    """
    types_dir = port_dir / "gid_attrs" / "types"
    if not types_dir.is_dir():
        return None
    fallback = None
    named = (ascii_int(p.name) for p in types_dir.iterdir())
    for index in sorted(index for index in named if index is not None):
        kind = (_read(types_dir / str(index)) or "").lower()
        if "v2" not in kind:
            continue
        gid = (_read(port_dir / "gids" / str(index)) or "").lower()
        if not gid or not gid.replace("0", "").replace(":", ""):
            continue
        if gid.startswith("0000:0000:0000:0000:0000:ffff:"):
            return index
        if fallback is None:
            fallback = index
    return fallback


def read_sysfs(class_dir: Path) -> List[Record]:
    """Every port under a `/sys/class/infiniband` directory (a capture's copy or the real one).

    Values are stripped: real files end in a newline, captured ones may not.
    """
    adapters: List[Record] = []
    if not class_dir.is_dir():
        return adapters
    for device in sorted(class_dir.iterdir(), key=lambda p: _natural(p.name)):
        ports_dir = device / "ports"
        if not ports_dir.is_dir():
            continue
        net_dir = device / "device" / "net"
        netdevs = sorted(p.name for p in net_dir.iterdir()) if net_dir.is_dir() else []
        for port_dir in sorted(ports_dir.iterdir(), key=lambda p: _natural(p.name)):
            port = ascii_int(port_dir.name)
            if port is None:
                continue  # `²`, `1x`: no port the kernel names
            adapter = _adapter(device.name, port)
            adapter["state"] = port_state(_read(port_dir / "state"))
            adapter["phys_state"] = phys_state(_read(port_dir / "phys_state"))
            adapter["rate_gbps"] = rate_gbps(_read(port_dir / "rate"))
            adapter["link_layer"] = link_layer(_read(port_dir / "link_layer"))
            adapter["hca_type"] = _read(device / "hca_type")
            adapter["fw_version"] = _read(device / "fw_ver")
            adapter["netdev"] = netdevs[0] if netdevs else None
            if adapter["link_layer"] == "Ethernet":
                adapter["gid_index"] = roce_gid_index(port_dir)
            adapters.append(adapter)
    return adapters


def _natural(name: str) -> List[Any]:
    """`mlx5_10` after `mlx5_9`: ASCII digit runs compared as numbers, the rest as text."""
    key = []
    for at, part in enumerate(re.split(r"([0-9]+)", name)):
        number = ascii_int(part) if at % 2 else None  # odd places hold the digit runs
        key.append((0, number, "") if number is not None else (1, 0, part))
    return key


def parse_ibstat(text: str) -> List[Record]:
    """`ibstat` -> adapter records. Keeps the CA blocks read before an `ibpanic:` line."""
    adapters: List[Record] = []
    name: Optional[str] = None
    hca_type = fw_version = None
    current: Optional[Record] = None
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("ibpanic:"):
            break
        ca = re.match(r"^CA '([^']+)'", line)
        if ca:
            name, hca_type, fw_version, current = ca.group(1), None, None, None
            continue
        port = re.match(r"^Port ([0-9]+):$", line)
        number = ascii_int(port.group(1)) if port else None
        if port and name and number is None:
            current = None  # a port we cannot name: what follows belongs to none
            continue
        if number is not None and name:
            current = _adapter(name, number)
            current["hca_type"], current["fw_version"] = hca_type, fw_version
            adapters.append(current)
            continue
        key, _, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if current is None:
            if key == "CA type":
                hca_type = value or None
            elif key == "Firmware version":
                fw_version = value or None
            continue
        if key == "State":
            current["state"] = port_state(value)
        elif key == "Physical state":
            current["phys_state"] = value or None
        elif key == "Rate":
            current["rate_gbps"] = rate_gbps(value)
        elif key == "Link layer":
            current["link_layer"] = link_layer(value)
    return adapters


def parse_ibstatus(text: str) -> List[Record]:
    """`ibstatus` -> adapter records (`rate: 200 Gb/sec (4X HDR)`, `state: 4: ACTIVE`)."""
    adapters: List[Record] = []
    current: Optional[Record] = None
    for raw in text.splitlines():
        line = raw.strip()
        head = re.match(r"^Infiniband device '([^']+)' port ([0-9]+) status:", line)
        if head:
            number = ascii_int(head.group(2))
            current = _adapter(head.group(1), number) if number is not None else None
            if current is not None:
                adapters.append(current)
            continue
        if current is None or ":" not in line:
            continue
        key, _, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if key == "state":
            current["state"] = port_state(value)
        elif key == "phys state":
            current["phys_state"] = phys_state(value)
        elif key == "rate":
            current["rate_gbps"] = rate_gbps(value)
        elif key == "link_layer":
            current["link_layer"] = link_layer(value)
    return adapters


def parse_ibv_devinfo(text: str) -> List[Record]:
    """`ibv_devinfo` -> adapter records. No rate without `-v`; the link layer, not the transport."""
    adapters: List[Record] = []
    name: Optional[str] = None
    fw_version = hca_type = None
    current: Optional[Record] = None
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("hca_id:"):
            name, current = line.split(":", 1)[1].strip(), None
            fw_version = hca_type = None
            continue
        if ":" not in line or name is None:
            continue
        key, _, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if key == "port":
            number = ascii_int(value)
            if number is None:
                current = None  # a damaged port line: what follows belongs to no port we can name
                continue
            current = _adapter(name, number)
            current["fw_version"], current["hca_type"] = fw_version, hca_type
            adapters.append(current)
        elif current is None:
            if key == "fw_ver":
                fw_version = value
            elif key == "vendor_part_id":
                hca_type = "MT" + value
        elif key == "state":
            current["state"] = port_state(value)
        elif key == "link_layer":
            current["link_layer"] = link_layer(value)
    return adapters


def rated_speeds(adapters: List[Record]) -> Dict[str, Optional[float]]:
    """Each adapter's rated speed: the best rate among its siblings on this node.

    Rails are built from identical adapters, so a port that linked slower than
    the others of its type and link layer (a bad cable, a port trained at HDR
    instead of NDR) stands out; a lone adapter is rated at its own rate.
    """
    best: Dict[tuple, float] = {}
    for adapter in adapters:
        key = (adapter.get("hca_type"), adapter.get("link_layer"))
        rate = adapter.get("rate_gbps")
        if rate is not None and adapter.get("state") == "ACTIVE":
            best[key] = max(best.get(key, 0.0), rate)
    rated: Dict[str, Optional[float]] = {}
    for adapter in adapters:
        key = (adapter.get("hca_type"), adapter.get("link_layer"))
        label = "{}:{}".format(adapter["name"], adapter["port"])
        rated[label] = best.get(key, adapter.get("rate_gbps"))
    return rated
