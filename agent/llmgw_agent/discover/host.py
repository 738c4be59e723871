"""The host part of the facts: name, CPUs, RAM, NUMA nodes, management address and interface.

Read from `/proc` and the socket layer on a real node, or from `host.json`
in a capture directory. Driver and CUDA versions come from nvidia-smi/NVML;
`host.json` may state them for a node without a GPU.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from llmgw_agent.discover.fields import ascii_int
from llmgw_agent.discover.schema import (
    Either,
    Flag,
    ListOf,
    MapOf,
    Maybe,
    OneOf,
    Real,
    Record,
    Text,
    Whole,
    read_json,
)

TYPE_CHECKING = False  # `typing` costs ms of every agent start; annotations are strings here
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional, Tuple

HOST_KEYS = (
    "hostname",
    "cpus",
    "memory_mib",
    "mgmt_address",
    "mgmt_interface",
    "driver_version",
    "cuda_version",
    "python",
    "kernel",
    "arch",
    "pci_gpus",
    "cpu_flags",
    "numa_nodes",
)

CPU_FLAGS = ("avx2", "avx512f", "amx_int8", "amx_tile", "asimddp", "i8mm", "sve")
"""The CPU features that decide which tensors llama.cpp repacks (a second copy in RAM)."""

_NUMA_NODE = Record(
    {
        "node": Whole(0, 1 << 16),
        "cpus": Whole(0, 1 << 20),
        "memory_mib": Whole(0, 1 << 40),
        "cpulist": Maybe(Text()),
    },
    required=("node", "cpus", "memory_mib"),
    what="a NUMA node {node, cpus, memory_mib}",
    plural="NUMA nodes {node, cpus, memory_mib}",
)

_NVIDIA_VENDOR = "0x10de"
_GPU_CLASSES = ("0x0300", "0x0302")  # VGA and 3D controllers; NVSwitches are bridges (0x0680)


_NAME = Maybe(Text())

HOST_SCHEMA = Record(
    {
        "hostname": _NAME,
        "cpus": Maybe(Whole(1, 1 << 20)),
        "memory_mib": Maybe(Whole(0, 1 << 40)),
        "mgmt_address": _NAME,
        "mgmt_interface": _NAME,
        "driver_version": _NAME,
        "cuda_version": _NAME,
        "python": _NAME,
        "kernel": _NAME,
        "arch": _NAME,
        "pci_gpus": Maybe(Whole(0, 4096)),
        "cpu_flags": Maybe(ListOf(Text())),
        "cpu_only": Maybe(Flag()),
        "numa_nodes": Maybe(ListOf(_NUMA_NODE)),
        "mounts": Maybe(
            ListOf(
                Record(
                    {"path": Text(), "fs_type": Text()},
                    required=("path", "fs_type"),
                    what="a mount {path, fs_type}",
                    plural="mounts {path, fs_type}",
                )
            )
        ),
        "engines": Maybe(
            MapOf(
                Either(
                    Record(
                        {"version": _NAME, "path": _NAME},
                        what="an engine {version, path}",
                        plural="engines {version, path}",
                    ),
                    Text(),
                )
            )
        ),
        "keepalive": Maybe(
            Record(
                {"method": Maybe(OneOf("setsid", "systemd-run")), "reason": Text()},
                what="a keepalive {method, reason}",
            )
        ),
        "sim": Maybe(Record({"fabric_ratio": MapOf(Real(0.0, 1.0))})),
    },
    what="a JSON object",
)
"""What a capture's `host.json` may hold, field by field (other keys are not read).

`mounts` make a replayed model directory look shared; `engines` are
`{name: {version, path}}` (or `{name: version}`); `keepalive` overrides this
machine's own; `sim.fabric_ratio` is the share of its rate a simulated rail carries.
"""


def read_host_json(path: Path, problems: Optional[List[str]] = None) -> Dict[str, Any]:
    """A capture's `host.json`, every field of the type `HOST_SCHEMA` gives it ({} when absent).

    With `problems`, a field of the wrong shape is left out and its sentence
    appended (the rest of the node is still known); without, it raises.

    Raises:
        CaptureError: (a ValueError) a file that is not JSON or not an object, or,
            without `problems`, the first field of the wrong shape.
    """
    present, document = read_json(path)
    if not present:
        return {}
    if problems is None:
        return HOST_SCHEMA.read(document, str(path))
    return HOST_SCHEMA.read_fields(document, str(path), problems)


def memory_mib(meminfo: str) -> Optional[int]:
    """`MemTotal:  263842660 kB` from `/proc/meminfo` text -> MiB."""
    for line in meminfo.splitlines():
        if line.startswith("MemTotal:"):
            parts = line.split()
            kib = ascii_int(parts[1]) if len(parts) >= 2 else None
            if kib is not None:
                return kib // 1024
    return None


def cpu_list_ids(cpulist: str) -> "Optional[List[int]]":
    """The CPUs a kernel cpulist names (`0-2,8` -> [0, 1, 2, 8]); None when it is not one."""
    ids = []  # type: List[int]
    for part in cpulist.strip().split(","):
        if not part:
            continue
        low, dash, high = part.partition("-")
        first, last = ascii_int(low), ascii_int(high) if dash else ascii_int(low)
        if first is None or last is None or last < first or last - first > 1 << 20:
            return None
        ids.extend(range(first, last + 1))
    return ids


def numa_node_memory_mib(meminfo: str) -> Optional[int]:
    """`Node 0 MemTotal:  131890244 kB` from a NUMA node's `meminfo` -> MiB."""
    for line in meminfo.splitlines():
        parts = line.split()
        if len(parts) >= 4 and parts[2] == "MemTotal:":
            kib = ascii_int(parts[3])
            return kib // 1024 if kib is not None else None
    return None


def numa_nodes(nodes_dir: Path) -> "Optional[List[Dict[str, int]]]":
    """Each NUMA node with memory (`/sys/devices/system/node/nodeN`): its CPUs and RAM.

    vLLM's CPU backend puts one tensor-parallel rank on each NUMA node and
    sizes its KV cache against that node's memory, so the planner needs them
    apart. None when the kernel shows no NUMA nodes (then the host is one).
    """
    if not nodes_dir.is_dir():
        return None
    found = []
    for entry in sorted(nodes_dir.iterdir(), key=lambda path: path.name):
        number = ascii_int(entry.name[4:]) if entry.name.startswith("node") else None
        if number is None:
            continue
        cpulist = _read_text(str(entry / "cpulist")).strip()
        ids = cpu_list_ids(cpulist)
        cpus = len(ids) if ids is not None else None
        memory = numa_node_memory_mib(_read_text(str(entry / "meminfo")))
        if not cpus or not memory:
            continue  # a memory-less or CPU-less node (CXL, HBM) holds no rank
        found.append({"node": number, "cpus": cpus, "memory_mib": memory, "cpulist": cpulist})
    found.sort(key=lambda node: node["node"])
    return found or None


def default_route_interface(route_table: str) -> Optional[str]:
    """The interface of the default route in `/proc/net/route` text, or None."""
    for line in route_table.splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 2 and fields[1] == "00000000":
            return fields[0]
    return None


def _interface_address(interface: str) -> Optional[str]:
    try:
        import fcntl  # POSIX only; the agent runs on Linux nodes
    except ImportError:
        return None
    import socket
    import struct

    siocgifaddr = 0x8915
    packed = struct.pack("256s", interface[:15].encode())
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            answer = fcntl.ioctl(sock.fileno(), siocgifaddr, packed)
        except OSError:
            return None
    return socket.inet_ntoa(answer[20:24])


def _read_text(path: str) -> str:
    """A /proc file's text; "" when unreadable or not ASCII (the kernel writes ASCII only)."""
    try:
        with open(path, errors="replace") as handle:
            text = handle.read()
    except OSError:
        return ""
    return text if text.isascii() else ""


def cpu_flags(cpuinfo: str) -> "List[str]":
    """Of `CPU_FLAGS`, those /proc/cpuinfo's first `flags` (x86) or `Features` (ARM) line names."""
    for line in cpuinfo.splitlines():
        name, colon, value = line.partition(":")
        if colon and name.strip() in ("flags", "Features"):
            have = set(value.split())
            return [flag for flag in CPU_FLAGS if flag in have]
    return []


def management_interface() -> Tuple[Optional[str], Optional[str]]:
    """(address, interface) of the default route: where NCCL's and Gloo's sockets go."""
    interface = default_route_interface(_read_text("/proc/net/route"))
    address = _interface_address(interface) if interface else None
    if address is None:
        import socket

        try:
            address = socket.gethostbyname(socket.gethostname())
        except OSError:
            address = None
    return address, interface


def count_pci_gpus(devices_dir: Path) -> Optional[int]:
    """NVIDIA GPUs on the PCI bus (`/sys/bus/pci/devices`), whatever the driver sees.

    A card that fell off the bus or failed to initialise is still here while
    nvidia-smi no longer lists it; the doctor compares the two counts.
    """
    if not devices_dir.is_dir():
        return None
    count = 0
    for device in devices_dir.iterdir():
        try:
            vendor = (device / "vendor").read_text().strip().lower()
            pci_class = (device / "class").read_text().strip().lower()
        except OSError:
            continue
        if vendor == _NVIDIA_VENDOR and pci_class.startswith(_GPU_CLASSES):
            count += 1
    return count


def live_host() -> Dict[str, Any]:
    """This machine's host facts (driver and CUDA left None for the GPU path to fill)."""
    address, interface = management_interface()
    uname = os.uname()  # what socket.gethostname and platform would say, without importing them
    return {
        "hostname": uname.nodename,
        "cpus": os.cpu_count(),
        "memory_mib": memory_mib(_read_text("/proc/meminfo")),
        "mgmt_address": address,
        "mgmt_interface": interface,
        "driver_version": None,
        "cuda_version": None,
        "python": "{}.{}.{}".format(*sys.version_info[:3]),
        "kernel": uname.release,
        "arch": uname.machine,
        "pci_gpus": count_pci_gpus(Path("/sys/bus/pci/devices")),
        "cpu_flags": cpu_flags(_read_text("/proc/cpuinfo")),
        "numa_nodes": numa_nodes(Path("/sys/devices/system/node")),
    }


def replay_host(recorded: Dict[str, Any]) -> Dict[str, Any]:
    """Host facts from a capture's `host.json`: its keys, None where it is silent."""
    return {key: recorded.get(key) for key in HOST_KEYS}
