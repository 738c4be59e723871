"""Simulated hardware profiles: capture directories written by our own code.

Each profile describes a kind of node the demo fleet and the tests need and
writes it as a capture directory (`nvidia-smi-q-x.xml`, `nvidia-smi-L.txt`,
`nvidia-smi-topo-m.txt`, `nvidia-imex-ctl-N.txt`, `ibstat.txt`,
`sys/class/infiniband/...`, `dev/nvidia-caps-imex-channels/`, `host.json`),
modelled field by field on the real captures so the discovery parser reads a
profile exactly as it reads a real node. The real captures are never copied.

    write_profile("hgx-h100", "/tmp/node1", hostname="h100-a1", degraded_rail="mlx5_3")
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Union

from llmgw_agent.sim import hw_fabric, hw_smi

PROFILES = ("hgx-h100", "gb200-tray", "a100-mig", "l40s", "cpu")
"""The kinds `write_profile` knows."""

GB200_STATES = ("joined", "degraded", "not-joined")

_TIMESTAMP = "Sun Nov 29 08:00:00 2026"
_ZERO_UUID = "00000000-0000-0000-0000-000000000000"

_DEFAULT_ENGINES = {
    "vllm": {"version": "0.19.0", "path": "/opt/llm/venv/bin/vllm"},
    "sglang": {"version": "0.5.23", "path": "/opt/llm/venv/bin/python3"},
    "llama.cpp": {"version": "b6500", "path": "/usr/local/bin/llama-server"},
}


class ProfileError(ValueError):
    """An unknown profile kind or option; the message says which and what is allowed."""


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _host_json(dest: Path, options: Dict[str, Any], defaults: Dict[str, Any]) -> None:
    host = dict(defaults)
    for key in ("hostname", "mgmt_address", "mgmt_interface", "cpus", "memory_mib", "pci_gpus"):
        if options.get(key) is not None:
            host[key] = options[key]
    host["engines"] = options.get("engines", defaults.get("engines", _DEFAULT_ENGINES))
    if options.get("mounts"):
        host["mounts"] = options["mounts"]
    _write(dest / "host.json", json.dumps(host, indent=2, sort_keys=True) + "\n")


def _seed(text: str) -> int:
    """A small stable number from a name: the same host gets the same addresses."""
    return sum(ord(c) * (i + 1) for i, c in enumerate(text)) % 997


# ---- the kinds -----------------------------------------------------------------


def _hgx_h100(dest: Path, options: Dict[str, Any]) -> None:
    hostname = options.get("hostname", "hgx-h100-01")
    degraded = options.get("degraded_rail")
    buses = (0x18, 0x2A, 0x3A, 0x5D, 0x9A, 0xAB, 0xBA, 0xDB)
    cards = [
        {
            "index": i,
            "name": "NVIDIA H100 80GB HBM3",
            "architecture": "Hopper",
            "uuid": hw_smi.stable_uuid("GPU", hostname, i),
            "serial": hw_smi.stable_serial(hostname, i),
            "pci_bus": bus,
            "pci_device_id": "233010DE",
            "memory_mib": 81559,
            "reserved_mib": 551,
            "power_limit_w": 700.0,
            "power_w": 68.5 + i * 1.3,
            "temperature_c": 29 + i % 4,
            "fabric": {
                "state": "Completed",
                "status": "Success",
                "clique_id": 0,
                "cluster_uuid": _ZERO_UUID,
                "health": {},
            },
        }
        for i, bus in enumerate(buses)
    ]
    _write(dest / "nvidia-smi-q-x.xml", hw_smi.smi_xml(cards, "580.105.08", "13.0", _TIMESTAMP))
    _write(dest / "nvidia-smi-L.txt", hw_smi.smi_list(cards))
    nics = ["mlx5_{}".format(i) for i in range(8)]
    socket_of = [0, 0, 0, 0, 1, 1, 1, 1]

    def gpu_nic(g: int, n: int) -> str:
        if g == n:
            return "PIX"
        return "NODE" if socket_of[g] == socket_of[n] else "SYS"

    _write(
        dest / "nvidia-smi-topo-m.txt",
        hw_smi.topo_matrix(
            [["NV18"] * 8 for _ in range(8)],
            [[gpu_nic(g, n) for n in range(8)] for g in range(8)],
            [
                ["NODE" if socket_of[a] == socket_of[b] else "SYS" for b in range(8)]
                for a in range(8)
            ],
            [("0-55,112-167", "0") if s == 0 else ("56-111,168-223", "1") for s in socket_of],
            nics,
        ),
    )
    seed = _seed(hostname)
    adapters = []
    for i, name in enumerate(nics):
        adapter = hw_fabric.ib_adapter(name, i, seed, "MT4129", 400, "4X NDR")
        if name == degraded:
            # The rail trained at HDR instead of NDR: up, but at half its rated speed.
            adapter.update({"rate": 200, "width": "4X HDR"})
        adapters.append(adapter)
    hw_fabric.write_adapters(dest, adapters)
    _host_json(
        dest,
        options,
        {
            "hostname": hostname,
            "cpus": 224,
            "pci_gpus": len(cards),
            "memory_mib": 2063937,
            "mgmt_address": options.get("mgmt_address", "10.20.0.{}".format(11 + seed % 200)),
            "mgmt_interface": "eno1",
            "python": "3.10.12",
            "kernel": "5.15.0-126-generic",
            "arch": "x86_64",
            "sim": {"fabric_ratio": {degraded: 0.6} if degraded else {}},
        },
    )


def _gb200_fabric(state: str, cluster_uuid: str, clique_id: int) -> Dict[str, Any]:
    healthy = {
        "summary": "Healthy",
        "bandwidth": "Full",
        "route_recovery_in_progress": "False",
        "route_unhealthy": "False",
        "access_timeout_recovery": "False",
        "incorrect_configuration": "N/A",
        "partition_assigned": "N/A",
    }
    if state == "joined":
        return {
            "state": "Completed",
            "status": "Success",
            "clique_id": clique_id,
            "cluster_uuid": cluster_uuid,
            "health": healthy,
        }
    if state == "degraded":
        health = dict(healthy, summary="Limited Capacity", bandwidth="Degraded")
        return {
            "state": "Completed",
            "status": "Success",
            "clique_id": clique_id,
            "cluster_uuid": cluster_uuid,
            "health": health,
        }
    # Not joined: the fabric manager finished but could not give this tray its
    # routes; the status says why, the clique and cluster stay unset.
    return {
        "state": "Completed",
        "status": "Insufficient Resources",
        "clique_id": 0,
        "cluster_uuid": _ZERO_UUID,
        "health": dict(healthy, summary="N/A", bandwidth="N/A"),
    }


def _gb200_tray(dest: Path, options: Dict[str, Any]) -> None:
    tray = int(options.get("tray", 1))
    rack = str(options.get("rack", "rack-a"))
    state = options.get("state", "joined")
    if state not in GB200_STATES:
        raise ProfileError(
            "gb200-tray state {!r} is not one of {}".format(state, ", ".join(GB200_STATES))
        )
    cluster_uuid = options.get("cluster_uuid") or hw_smi.stable_uuid("X", rack)[2:]
    clique_id = int(options.get("clique_id", 2))
    hostname = options.get("hostname", "{}-tray{:02d}".format(rack, tray))
    chassis = options.get("chassis_serial") or hw_smi.stable_serial("chassis", rack)
    fabric = _gb200_fabric(state, cluster_uuid, clique_id)
    buses = (0x01, 0x01, 0x01, 0x01)
    cards = [
        {
            "index": i,
            "name": "NVIDIA GB200",
            "architecture": "Blackwell",
            "uuid": hw_smi.stable_uuid("GPU", hostname, i),
            "serial": hw_smi.stable_serial(hostname, i),
            "pci_bus": bus,
            "pci_domain": (0x0000, 0x0001, 0x0010, 0x0011)[i],  # Grace: one PCI segment per GPU
            "pci_device_id": "294110DE",
            "pci_sub_system_id": "204610DE",
            "memory_mib": 189471,
            "reserved_mib": 742,
            "power_limit_w": 1200.0,
            "power_w": 160.0 + 4 * i,
            "temperature_c": 27 + i,
            "addressing_mode": "ATS",
            "c2c_mode": "Enabled",
            "vbios": "97.00.B9.00.69",
            "max_clock": "2062 MHz",
            "mem_clock": "3996 MHz",
            "fabric": fabric,
            "platform": {
                "chassis_serial": chassis,
                "slot_number": 9 + tray,
                "tray_index": tray,
                "module_id": i + 1,
                "fabric_guid": (tray << 8) + i + 1,
            },
        }
        for i, bus in enumerate(buses)
    ]
    _write(dest / "nvidia-smi-q-x.xml", hw_smi.smi_xml(cards, "580.173.02", "13.0", _TIMESTAMP))
    _write(dest / "nvidia-smi-L.txt", hw_smi.smi_list(cards))
    nics = ["mlx5_{}".format(i) for i in range(4)]
    _write(
        dest / "nvidia-smi-topo-m.txt",
        hw_smi.topo_matrix(
            [["NV18"] * 4 for _ in range(4)],
            [
                ["PIX" if g == n else ("NODE" if g // 2 == n // 2 else "SYS") for n in range(4)]
                for g in range(4)
            ],
            [["NODE" if a // 2 == b // 2 else "SYS" for b in range(4)] for a in range(4)],
            [("0-71", "0"), ("0-71", "0"), ("72-143", "1"), ("72-143", "1")],
            nics,
        ),
    )
    seed = _seed(hostname)
    hw_fabric.write_adapters(
        dest,
        [hw_fabric.ib_adapter(n, i, seed, "MT4129", 400, "4X NDR") for i, n in enumerate(nics)],
    )
    members = options.get("imex_nodes") or [
        "10.30.{}.{}".format(_seed(rack) % 250, 10 + t) for t in range(1, 19)
    ]
    address = options.get("mgmt_address") or (
        members[tray - 1] if 0 < tray <= len(members) else "10.30.0.{}".format(100 + tray)
    )
    _write(dest / "nvidia-imex-ctl-N.txt", hw_fabric.imex_text(members, "580.173.02"))
    _write(dest / "dev" / "nvidia-caps-imex-channels" / "channel0", "")
    _host_json(
        dest,
        dict(options, mgmt_address=address),
        {
            "hostname": hostname,
            "cpus": 144,
            "pci_gpus": len(cards),
            "memory_mib": 904192,
            "mgmt_address": address,
            "mgmt_interface": "enP6p3s0f0np0",
            "python": "3.12.3",
            "kernel": "6.8.0-1021-nvidia-64k",
            "arch": "aarch64",
        },
    )


_A100_MIG = {
    # profile: (slices, SMs, MiB, GPU instance id of the first of its kind)
    "1g.10gb": (1, 14, 9728, 13),
    "2g.20gb": (2, 28, 19968, 5),
    "3g.40gb": (3, 42, 40448, 2),
    "4g.40gb": (4, 56, 40448, 1),
    "7g.80gb": (7, 98, 81152, 0),
}


def _a100_mig(dest: Path, options: Dict[str, Any]) -> None:
    hostname = options.get("hostname", "a100-mig-01")
    layout: List[Optional[List[str]]] = options.get(
        "mig_layout", [["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"], [], None, None]
    )
    cards = []
    for i, profiles in enumerate(layout):
        migs = None
        if profiles is not None:
            migs = []
            used_ids: Dict[str, int] = {}
            for profile in profiles:
                if profile not in _A100_MIG:
                    raise ProfileError(
                        "A100 MIG profile {!r} is not one of {}".format(
                            profile, ", ".join(_A100_MIG)
                        )
                    )
                slices, sms, mib, first_gi = _A100_MIG[profile]
                gi = first_gi + used_ids.get(profile, 0)
                used_ids[profile] = used_ids.get(profile, 0) + 1
                migs.append(
                    {
                        "profile": profile,
                        "slices": slices,
                        "sm_count": sms,
                        "memory_mib": mib,
                        "gpu_instance_id": gi,
                        "compute_instance_id": 0,
                        "uuid": hw_smi.stable_uuid("MIG", hostname, i, len(migs)),
                    }
                )
        cards.append(
            {
                "index": i,
                "name": "NVIDIA A100-SXM4-80GB",
                "architecture": "Ampere",
                "uuid": hw_smi.stable_uuid("GPU", hostname, i),
                "serial": hw_smi.stable_serial(hostname, i),
                "pci_bus": (0x07, 0x0F, 0x47, 0x4E)[i % 4],
                "pci_device_id": "20B210DE",
                "pci_sub_system_id": "147F10DE",
                "memory_mib": 81920,
                "reserved_mib": 869,
                "power_limit_w": 400.0,
                "power_w": 61.0 + i,
                "temperature_c": 30 + i,
                "vbios": "92.00.36.00.02",
                "max_clock": "1410 MHz",
                "mem_clock": "1593 MHz",
                "mig": migs,
            }
        )
    _write(dest / "nvidia-smi-q-x.xml", hw_smi.smi_xml(cards, "535.183.01", "12.2", _TIMESTAMP))
    _write(dest / "nvidia-smi-L.txt", hw_smi.smi_list(cards))
    n = len(cards)
    _write(
        dest / "nvidia-smi-topo-m.txt",
        hw_smi.topo_matrix(
            [["NV4"] * n for _ in range(n)],
            [["PXB" if g // 2 == k else "SYS" for k in range(2)] for g in range(n)],
            [["SYS"] * 2 for _ in range(2)],
            [("0-31,64-95", "0") if g < 2 else ("32-63,96-127", "1") for g in range(n)],
            ["mlx5_0", "mlx5_1"],
        ),
    )
    seed = _seed(hostname)
    hw_fabric.write_adapters(
        dest,
        [
            hw_fabric.ib_adapter("mlx5_{}".format(i), i, seed, "MT4123", 200, "4X HDR")
            for i in range(2)
        ],
    )
    _host_json(
        dest,
        options,
        {
            "hostname": hostname,
            "cpus": 128,
            "pci_gpus": len(cards),
            "memory_mib": 1031891,
            "mgmt_address": options.get("mgmt_address", "10.20.1.{}".format(11 + seed % 200)),
            "mgmt_interface": "enp225s0f0",
            "python": "3.10.12",
            "kernel": "5.15.0-126-generic",
            "arch": "x86_64",
        },
    )


def _l40s(dest: Path, options: Dict[str, Any]) -> None:
    hostname = options.get("hostname", "l40s-01")
    cards = [
        {
            "index": i,
            "name": "NVIDIA L40S",
            "architecture": "Ada Lovelace",
            "uuid": hw_smi.stable_uuid("GPU", hostname, i),
            "serial": hw_smi.stable_serial(hostname, i),
            "pci_bus": (0x01, 0x21, 0x81, 0xA1)[i],
            "pci_device_id": "26B910DE",
            "pci_sub_system_id": "185110DE",
            "memory_mib": 46068,
            "reserved_mib": 477,
            "power_limit_w": 350.0,
            "power_w": 33.0 + i,
            "temperature_c": 28 + i,
            "fan_speed": "0 %",
            "vbios": "95.02.6F.00.02",
            "max_clock": "2520 MHz",
            "mem_clock": "9001 MHz",
            "mig_mode_text": "N/A",
        }
        for i in range(4)
    ]
    _write(dest / "nvidia-smi-q-x.xml", hw_smi.smi_xml(cards, "595.91.07", "13.2", _TIMESTAMP))
    _write(dest / "nvidia-smi-L.txt", hw_smi.smi_list(cards))
    _write(
        dest / "nvidia-smi-topo-m.txt",
        hw_smi.topo_matrix(
            [["NODE" if a // 2 == b // 2 else "SYS" for b in range(4)] for a in range(4)],
            [["NODE" if g >= 2 else "SYS" for _ in range(2)] for g in range(4)],
            [["PIX"] * 2 for _ in range(2)],
            [("0-47,96-143", "0") if g < 2 else ("48-95,144-191", "1") for g in range(4)],
            ["mlx5_0", "mlx5_1"],
        ),
    )
    seed = _seed(hostname)
    address = options.get("mgmt_address", "10.20.2.{}".format(11 + seed % 200))
    hw_fabric.write_adapters(
        dest,
        [
            hw_fabric.ib_adapter(
                "mlx5_{}".format(i),
                i,
                seed,
                "MT4125",
                100,
                "4X EDR",
                "Ethernet",
                ipv4="10.40.{}.{}".format(i, 11 + seed % 200),
            )
            for i in range(2)
        ],
    )
    _host_json(
        dest,
        options,
        {
            "hostname": hostname,
            "cpus": 192,
            "pci_gpus": len(cards),
            "memory_mib": 772859,
            "mgmt_address": address,
            "mgmt_interface": "eno1",
            "python": "3.11.9",
            "kernel": "6.8.0-48-generic",
            "arch": "x86_64",
        },
    )


def _cpu(dest: Path, options: Dict[str, Any]) -> None:
    hostname = options.get("hostname", "cpu-01")
    seed = _seed(hostname)
    _host_json(
        dest,
        options,
        {
            "hostname": hostname,
            "cpus": 128,
            "pci_gpus": 0,
            "memory_mib": 512 * 1024,
            "mgmt_address": options.get("mgmt_address", "10.20.3.{}".format(11 + seed % 200)),
            "mgmt_interface": "eno1",
            "python": "3.12.3",
            "kernel": "6.8.0-48-generic",
            "arch": "x86_64",
            "cpu_only": True,
            "numa_nodes": [
                {"node": 0, "cpus": 64, "memory_mib": 256 * 1024, "cpulist": "0-31,64-95"},
                {"node": 1, "cpus": 64, "memory_mib": 256 * 1024, "cpulist": "32-63,96-127"},
            ],
            "engines": {
                "llama.cpp": {"version": "b6500", "path": "/usr/local/bin/llama-server"},
                "vllm": {"version": "0.32.0+cpu", "path": "/opt/vllm/bin/vllm"},
            },
        },
    )


_WRITERS: Dict[str, Callable[[Path, Dict[str, Any]], None]] = {
    "hgx-h100": _hgx_h100,
    "gb200-tray": _gb200_tray,
    "a100-mig": _a100_mig,
    "l40s": _l40s,
    "cpu": _cpu,
}


def write_profile(kind: str, dest: Union[Path, str], **options: Any) -> Path:
    """Write a capture directory for a simulated node of `kind` into `dest`; return it.

    Options every kind takes: `hostname`, `mgmt_address`, `mgmt_interface`,
    `engines` ({name: {version, path}}), `pci_gpus` (GPUs on the PCI bus; more than
    the cards written simulates a card the driver lost), `mounts` ([{path, fs_type}] to make a
    model dir look shared). `hgx-h100`: `degraded_rail` (an adapter name that
    links at HDR 200 instead of NDR 400). `gb200-tray`: `tray` (1..18), `rack`,
    `cluster_uuid`, `clique_id`, `state` (joined | degraded | not-joined),
    `imex_nodes` (the domain's addresses), `chassis_serial`. `a100-mig`:
    `mig_layout` (per card: a list of profiles, [] for MIG on with nothing
    carved, None for MIG off).
    """
    writer = _WRITERS.get(kind)
    if writer is None:
        raise ProfileError(
            "unknown hardware profile {!r}: choose one of {}".format(kind, ", ".join(PROFILES))
        )
    path = Path(dest)
    path.mkdir(parents=True, exist_ok=True)
    writer(path, dict(options))
    return path
