"""Writing the fabric side of a simulated node: RDMA adapters (sysfs, ibstat) and IMEX.

The sysfs tree mirrors `/sys/class/infiniband/<dev>/ports/<n>/` (state, rate,
link layer, and for RoCE the GID table with its types), and `ibstat.txt`
says the same in ibstat's words, so either discovery path reads one node.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Sequence


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def write_adapters(dest: Path, adapters: Sequence[Dict[str, Any]]) -> None:
    """`sys/class/infiniband/<dev>/...` and the matching `ibstat.txt`."""
    blocks = []
    for adapter in adapters:
        device = dest / "sys" / "class" / "infiniband" / adapter["name"]
        port = device / "ports" / "1"
        state_words = {"ACTIVE": "4: ACTIVE", "DOWN": "1: DOWN"}[adapter["state"]]
        phys_words = "5: LinkUp" if adapter["state"] == "ACTIVE" else "3: Disabled"
        _write(device / "hca_type", adapter["hca_type"] + "\n")
        _write(device / "fw_ver", adapter["fw"] + "\n")
        _write(device / "board_id", adapter.get("board_id", "MT_0000000838") + "\n")
        _write(port / "state", state_words + "\n")
        _write(port / "phys_state", phys_words + "\n")
        _write(port / "rate", "{} Gb/sec ({})\n".format(adapter["rate"], adapter["width"]))
        _write(port / "link_layer", adapter["link_layer"] + "\n")
        (device / "device" / "net" / adapter["netdev"]).mkdir(parents=True, exist_ok=True)
        if adapter["link_layer"] == "Ethernet":
            # RoCE: entries 0/1 are the link-local GID (v1, v2), 2/3 the IPv4-mapped one.
            ipv4 = adapter["ipv4"].split(".")
            mapped = "0000:0000:0000:0000:0000:ffff:{:02x}{:02x}:{:02x}{:02x}".format(
                *map(int, ipv4)
            )
            link_local = "fe80:0000:0000:0000:{}".format(adapter["guid_tail"])
            for index, (kind, gid) in enumerate(
                (
                    ("IB/RoCE v1", link_local),
                    ("RoCE v2", link_local),
                    ("IB/RoCE v1", mapped),
                    ("RoCE v2", mapped),
                )
            ):
                _write(port / "gid_attrs" / "types" / str(index), kind + "\n")
                _write(port / "gids" / str(index), gid + "\n")
        blocks.append(
            "CA '{name}'\n\tCA type: {hca}\n\tNumber of ports: 1\n\tFirmware version: {fw}\n"
            "\tHardware version: 0\n\tNode GUID: 0x{guid}\n\tSystem image GUID: 0x{guid}\n"
            "\tPort 1:\n\t\tState: {state}\n\t\tPhysical state: {phys}\n\t\tRate: {rate}\n"
            "\t\tBase lid: {lid}\n\t\tLMC: 0\n\t\tSM lid: {sm}\n\t\tCapability mask: {mask}\n"
            "\t\tPort GUID: 0x{guid}\n\t\tLink layer: {layer}\n".format(
                name=adapter["name"],
                hca=adapter["hca_type"],
                fw=adapter["fw"],
                guid=adapter["guid_tail"].replace(":", ""),
                state="Active" if adapter["state"] == "ACTIVE" else "Down",
                phys="LinkUp" if adapter["state"] == "ACTIVE" else "Disabled",
                rate=adapter["rate"],
                lid=adapter.get("lid", 0),
                sm=1 if adapter["link_layer"] == "InfiniBand" else 0,
                mask="0xa751e848" if adapter["link_layer"] == "InfiniBand" else "0x00010000",
                layer=adapter["link_layer"],
            )
        )
    if blocks:
        _write(dest / "ibstat.txt", "".join(blocks))


def ib_adapter(
    name: str,
    index: int,
    host_seed: int,
    hca: str,
    rate: int,
    width: str,
    layer: str = "InfiniBand",
    ipv4: str = "",
) -> Dict[str, Any]:
    """One simulated ConnectX port: name, type, rate and width, link layer, stable GUID."""
    tail = "a088:c203:00{:02x}:{:02x}{:02x}".format(host_seed % 256, index, (host_seed * 7) % 256)
    return {
        "name": name,
        "hca_type": hca,
        "fw": "28.41.1000" if hca == "MT4129" else "22.39.1002",
        "state": "ACTIVE",
        "rate": rate,
        "width": width,
        "link_layer": layer,
        "netdev": ("ibp{}s0" if layer == "InfiniBand" else "ens{}f0np0").format(24 + 16 * index),
        "guid_tail": tail,
        "lid": 100 + host_seed % 200 + index if layer == "InfiniBand" else 0,
        "ipv4": ipv4,
    }


def imex_text(members: Sequence[str], version: str) -> str:
    """`nvidia-imex-ctl -N` for a domain whose nodes are all up and connected."""
    lines = [
        "Connectivity Table Legend:",
        "I - Invalid - Node wasn't reachable, no connection status available",
        "N - Never Connected",
        "R - Recovering - Connection was lost, but clean up has not yet been triggered.",
        "D - Disconnected - Connection was lost, and clean up has been triggreed.",
        "A - Authenticating - If GSSAPI enabled, client has initiated mutual authentication.",
        "!V! - Version mismatch, communication disabled.",
        "!M! - Node map mismatch, communication disabled.",
        "C - Connected - Ready for operation",
        "",
        "11/29/2026 08:00:00.000",
        "Nodes:",
    ]
    for index, address in enumerate(members):
        lines.append(
            "{:<9} - {:<15} - READY                - Version: {}".format(
                "Node #{}".format(index), address, version
            )
        )
    lines.append("")
    lines.append(
        " Nodes From\\To  " + "".join("{:<4}".format(i) for i in range(len(members))).rstrip()
    )
    for index in range(len(members)):
        lines.append("{:>8}        ".format(index) + "   ".join("C" * len(members)))
    lines.append("")
    lines.append("Domain State: UP")
    return "\n".join(lines) + "\n"
