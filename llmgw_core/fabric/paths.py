"""The path between the cards inside a node, from NCCL's channel lines and the node's topology (pure).

NCCL names the transport of each rank pair (`via P2P/CUMEM`, `via
SHM/direct/direct`, `via P2P/MNNVL`) but not the wire under a `P2P` one;
the node's `nvidia-smi topo -m` matrix (the agent's `nvlink` facts) does:
`NV<n>` is NVLink, anything else is PCIe. So each pair is one of:

* **NVLink** — P2P between cards the matrix joins with `NV<n>`;
* **PCIe P2P** — P2P between cards joined through PCIe switches;
* **host memory (SHM)** — NCCL copies through the CPU's memory, several
  times slower. Expected between PCIe cards that sit behind different host
  bridges (NCCL's default `NCCL_P2P_LEVEL` is `PXB` on Intel and ARM hosts);
  a fault between NVLink cards (P2P disabled: `NCCL_P2P_DISABLE`, ACS, an
  IOMMU, a virtual machine);
* **NVLink across trays (MNNVL)** — a multi-node NVLink domain (GB200 NVL72).

A one-node replica's network plugin (`Using network Socket`) carries none of
its traffic, so its label never names it (`transport_label`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from llmgw_core.fabric.nccl import NcclPath, NcclTransport

Link = Literal["nvlink", "mnnvl", "pcie_p2p", "p2p", "shm"]
"""A rank pair's path inside a node; `p2p` when the topology is not known."""

LINK_LABELS: dict[Link, str] = {
    "nvlink": "NVLink",
    "mnnvl": "NVLink across trays (MNNVL)",
    "pcie_p2p": "PCIe P2P",
    "p2p": "P2P (link not known)",
    "shm": "host memory (SHM)",
}
"""The words people read, in the order a label lists them (fastest first)."""

NvlinkMatrix = Mapping[str, Mapping[str, str]]
"""The agent's `nvlink` facts: `{"0": {"1": "NV18", "2": "SYS"}}` by card index."""


def link_of(path: NcclPath, nvlink: NvlinkMatrix | None) -> Link | None:
    """What one channel line's pair runs over inside the node; None for a network path."""
    if path.kind == "net":
        return None
    if path.kind in ("shm", "mnnvl"):
        return path.kind
    cell = cell_between(path, nvlink)
    if cell is None:
        return "p2p"
    return "nvlink" if cell.startswith("NV") else "pcie_p2p"


def cell_between(path: NcclPath, nvlink: NvlinkMatrix | None) -> str | None:
    """The topology matrix's cell between the pair's cards (`NV18`, `SYS`), None when unknown."""
    if not nvlink or path.src_card is None or path.dst_card is None:
        return None
    return nvlink.get(str(path.src_card), {}).get(str(path.dst_card))


def expected_link(cell: str | None) -> Link:
    """The path NCCL takes by default between two cards the topology joins with `cell`.

    `NV<n>`: NVLink. `PIX`/`PXB` (PCIe switches): P2P. Past a host bridge
    (`PHB`, `NODE`, `SYS`): host memory — NCCL's P2P level on Intel and ARM
    hosts (on AMD ones it would still take P2P). Unknown: `p2p`, unsaid.
    """
    if cell is None:
        return "p2p"
    if cell.startswith("NV"):
        return "nvlink"
    return "pcie_p2p" if cell in ("PIX", "PXB") else "shm"


def expected_inside(nvlink: NvlinkMatrix | None, cards: Sequence[int]) -> str | None:
    """What a replica's cards on one node should talk over (`NVLink`); None for one card."""
    links: set[Link] = set()
    for index, a in enumerate(cards):
        for b in cards[index + 1 :]:
            links.add(expected_link((nvlink or {}).get(str(a), {}).get(str(b))))
    return " + ".join(LINK_LABELS[link] for link in LINK_LABELS if link in links) or None


@dataclass(frozen=True)
class InsidePath:
    """How one shard's ranks talk inside its node.

    Attributes:
        pairs: how many distinct rank pairs ran over each link.
        shm_on_nvlink: card pairs NVLink joins that NCCL took through host memory.
    """

    pairs: Mapping[Link, int]
    shm_on_nvlink: tuple[tuple[int, int], ...] = ()

    @property
    def label(self) -> str:
        """`NVLink`, `host memory (SHM)`, or both when the pairs differ (`NVLink + host memory (SHM)`)."""
        return " + ".join(LINK_LABELS[link] for link in LINK_LABELS if self.pairs.get(link))


def inside_path(transport: NcclTransport, nvlink: NvlinkMatrix | None) -> InsidePath | None:
    """The shard's inside path from its channel lines; None when NCCL printed none inside."""
    pairs: dict[Link, set[tuple[int, int]]] = {}
    shm_on_nvlink: set[tuple[int, int]] = set()
    for path in transport.paths:
        link = link_of(path, nvlink)
        if link is None:
            continue
        pair = (min(path.src, path.dst), max(path.src, path.dst))
        pairs.setdefault(link, set()).add(pair)
        cell = cell_between(path, nvlink)
        if link == "shm" and cell is not None and cell.startswith("NV"):
            cards = (path.src_card or 0, path.dst_card or 0)
            shm_on_nvlink.add((min(cards), max(cards)))
    if not pairs:
        return None
    return InsidePath(
        pairs={link: len(found) for link, found in pairs.items()},
        shm_on_nvlink=tuple(sorted(shm_on_nvlink)),
    )


def transport_label(
    transport: NcclTransport, inside: InsidePath | None, node_count: int
) -> str | None:
    """What a shard's NCCL runs over, for people; None when its lines do not say.

    The inside path first; then the network between nodes, for a replica that
    spans several and reaches them over it (`NVLink + IB + GDR`). One node's
    network plugin is never named: it carries nothing.
    """
    parts = [inside.label] if inside is not None else []
    over_network = any(p.kind == "net" for p in transport.paths)
    spans = node_count > 1 or (transport.nodes or 1) > 1
    # Across the trays of an NVLink domain the network carries nothing either.
    nvlink_between = inside is not None and bool(inside.pairs.get("mnnvl")) and not over_network
    if spans and not nvlink_between and (transport.network or transport.mnnvl):
        parts.append(transport.label)
    return " + ".join(parts) or None


def shm_warning(replica: str, node: str, inside: InsidePath) -> str | None:
    """The red sentence for NVLink cards NCCL joined through host memory; None when none were."""
    if not inside.shm_on_nvlink:
        return None
    cards = ", ".join(f"{a}–{b}" for a, b in inside.shm_on_nvlink)
    return (
        f"{replica}: on {node}, NCCL joined NVLink cards ({cards}) through host memory (SHM), "
        "several times slower than NVLink — peer-to-peer is off: NCCL_P2P_DISABLE or "
        "NCCL_P2P_LEVEL in the environment, PCIe ACS or an IOMMU, or a virtual machine "
        "(see docs/fabric.md)"
    )
