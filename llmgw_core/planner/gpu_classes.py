"""The GPU classes llmgw knows by name, for fleets that are described rather than discovered.

A class label is a card's short name and its marketed size (`h100-80g`), or an
instance of a MIG-carved card (`a100-80g-mig-3g.40gb`). What the planner needs
of a class is the memory CUDA can actually hand out, not the number on the
box: an "80 GB" H100 gives vLLM 79.19 GiB. The figures below are the frame
buffer that `nvidia-smi -q` reports less the driver's reservation, in GiB;
MIG instances report their own frame buffer with nothing reserved.

A live fleet reports each card's memory itself; this table is only consulted
for a described fleet and for a class a person types.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from llmgw_core.errors import BadInput

MIB_PER_GIB = 1024


@dataclass(frozen=True)
class GpuClass:
    """What the planner knows of one class of device.

    Attributes:
        label: the class label (`h100-80g`, `a100-80g-mig-3g.40gb`).
        name: the product name as `nvidia-smi` prints it.
        memory_gib: memory visible to CUDA, GiB.
        compute_capability: e.g. 9.0 for Hopper; decides which kernels load.
        nvlink: True when the cards of one node share NVLink (SXM / NVL boards).
        mig_profile: the MIG profile of an instance class, else None.
    """

    label: str
    name: str
    memory_gib: float
    compute_capability: float
    nvlink: bool
    mig_profile: str | None = None

    @property
    def is_mig(self) -> bool:
        """True for a MIG instance: it serves a replica alone, never with another."""
        return self.mig_profile is not None


def _visible_gib(fb_total_mib: int, reserved_mib: int) -> float:
    """Frame buffer less the driver's reservation, in GiB (what CUDA reports as total)."""
    return round((fb_total_mib - reserved_mib) / MIB_PER_GIB, 2)


# Whole cards. Totals and reservations are those `nvidia-smi -q` prints on the
# captured machines (H100, B200, GB200, GB300, L40S, T4, A100-40GB); H200,
# A100-80GB and L4 are the figures torch reports on those cards. H100 is
# pinned to the 79.19 GiB that vLLM logs, which the calibration runs used.
_CARDS: tuple[GpuClass, ...] = (
    GpuClass("h100-80g", "NVIDIA H100 80GB HBM3", 79.19, 9.0, nvlink=True),
    GpuClass("h200-141g", "NVIDIA H200", 139.81, 9.0, nvlink=True),
    GpuClass("b200-180g", "NVIDIA B200", _visible_gib(183359, 728), 10.0, nvlink=True),
    GpuClass("gb200-186g", "NVIDIA GB200", _visible_gib(189471, 742), 10.0, nvlink=True),
    GpuClass("gb300-288g", "NVIDIA GB300", _visible_gib(284208, 947), 10.3, nvlink=True),
    GpuClass("a100-80g", "NVIDIA A100-SXM4-80GB", 79.15, 8.0, nvlink=True),
    GpuClass("a100-40g", "NVIDIA A100-SXM4-40GB", _visible_gib(40960, 518), 8.0, nvlink=True),
    GpuClass("l40s-48g", "NVIDIA L40S", _visible_gib(46068, 609), 8.9, nvlink=False),
    GpuClass("l4-24g", "NVIDIA L4", 22.03, 8.9, nvlink=False),
    GpuClass("t4-16g", "Tesla T4", _visible_gib(15360, 448), 7.5, nvlink=False),
)

# MIG instances: the frame buffer each profile gets, in MiB, as the cards
# report it (A100 and H100 captures; the rest from NVIDIA's profile tables).
_MIG_MIB: dict[str, dict[str, int]] = {
    "a100-80g": {
        "1g.10gb": 9728,
        "1g.20gb": 19968,
        "2g.20gb": 19968,
        "3g.40gb": 40192,
        "4g.40gb": 40192,
        "7g.80gb": 80896,
    },
    "a100-40g": {
        "1g.5gb": 4864,
        "1g.10gb": 9984,
        "2g.10gb": 9984,
        "3g.20gb": 19968,
        "4g.20gb": 19968,
        "7g.40gb": 40192,
    },
    "h100-80g": {
        "1g.10gb": 9984,
        "1g.20gb": 20096,
        "2g.20gb": 20096,
        "3g.40gb": 40448,
        "4g.40gb": 40448,
        "7g.80gb": 80896,
    },
    "h200-141g": {
        "1g.18gb": 16384,
        "1g.35gb": 32768,
        "2g.35gb": 32768,
        "3g.71gb": 69632,
        "4g.71gb": 69632,
        "7g.141gb": 139264,
    },
}

# An unknown profile of a known card: its nominal GB, at the ratio the
# captured instances show (9,984 MiB for a "10gb" instance).
_MIG_GIB_PER_NOMINAL_GB = 0.975

_CARDS_BY_LABEL = {card.label: card for card in _CARDS}
_MIG_LABEL = re.compile(r"^(?P<card>[a-z0-9]+-\d+g)-mig-(?:\d+c\.)?(?P<profile>\d+g\.\d+gb)$")


def known_labels() -> tuple[str, ...]:
    """Every whole-card class label, in table order."""
    return tuple(card.label for card in _CARDS)


def parse_mig_label(label: str) -> tuple[str, str] | None:
    """Split `<card>-mig-<profile>` into the card's label and the profile.

    A compute-instance prefix (`1c.3g.71gb`, as `nvidia-smi -L` prints some
    instances) is dropped: the memory belongs to the GPU instance.

    Returns:
        (card label, profile) or None when the label is not a MIG class.
    """
    match = _MIG_LABEL.match(label.strip().lower())
    if match is None:
        return None
    return match["card"], match["profile"]


def gpu_class(label: str) -> GpuClass:
    """The class of a label, whole card or MIG instance.

    Raises:
        BadInput: the label names no known card, naming the known ones.
    """
    key = label.strip().lower()
    if key in _CARDS_BY_LABEL:
        return _CARDS_BY_LABEL[key]
    parsed = parse_mig_label(key)
    if parsed is not None and parsed[0] in _CARDS_BY_LABEL:
        card_label, profile = parsed
        card = _CARDS_BY_LABEL[card_label]
        mib = _MIG_MIB.get(card_label, {}).get(profile)
        if mib is not None:
            memory_gib = round(mib / MIB_PER_GIB, 2)
        else:
            nominal_gb = float(profile.split(".")[1].removesuffix("gb"))
            memory_gib = round(nominal_gb * _MIG_GIB_PER_NOMINAL_GB, 2)
        return GpuClass(
            label=f"{card_label}-mig-{profile}",
            name=f"{card.name} MIG {profile}",
            memory_gib=min(memory_gib, card.memory_gib),
            compute_capability=card.compute_capability,
            nvlink=False,
            mig_profile=profile,
        )
    raise BadInput(
        f"unknown GPU class {label!r}",
        f"use one of {', '.join(known_labels())}, or <card>-mig-<profile> such as a100-80g-mig-3g.40gb",
    )
