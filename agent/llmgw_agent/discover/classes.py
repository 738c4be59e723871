"""GPU class labels, compute capability and MIG profiles: one rule each.

A class label is what placement pools cards by: the model family and the
memory the vendor sells it with (`h100-80g`, `gb200-186g`, `l40s-48g`), and
for a MIG instance the card's class plus the profile
(`a100-80g-mig-1g.20gb`). Every discovery path calls `card_class` and
`mig_class`; nothing else builds a label.
"""

from __future__ import annotations

import math
import re

from llmgw_agent.discover.fields import ascii_int

TYPE_CHECKING = False  # `typing` costs ms of every agent start; annotations are strings here
if TYPE_CHECKING:
    from typing import Dict, Optional

# The sizes cards are sold with, in GB. The driver reports a little less
# (81559 MiB on an "80GB" H100, 189471 MiB on a "186GB" GB200), so the label
# takes the nominal size that the reported memory rounds up to.
_NOMINAL_GB = (8, 10, 12, 16, 20, 24, 32, 40, 48, 80, 94, 96, 141, 144, 180, 186, 192, 288)

# The size by family, for a card whose memory is unknown (the `-L` path) and
# whose name does not print it.
_NOMINAL_BY_FAMILY = {
    "gb300": 288,
    "b300": 288,
    "gb200": 186,
    "b200": 180,
    "gh200": 96,
    "h200": 141,
    "l40s": 48,
    "l40": 48,
    "l4": 24,
    "a40": 48,
    "a10": 24,
    "t4": 16,
}

# Compute capability by family, for the paths (nvidia-smi XML) that do not print it.
_COMPUTE_CAPABILITY = (
    ("gb300", "10.3"),
    ("b300", "10.3"),
    ("gb200", "10.0"),
    ("b200", "10.0"),
    ("b100", "10.0"),
    ("rtx pro 6000", "12.0"),
    ("gh200", "9.0"),
    ("h200", "9.0"),
    ("h100", "9.0"),
    ("h800", "9.0"),
    ("l40s", "8.9"),
    ("l40", "8.9"),
    ("l4", "8.9"),
    ("rtx 6000 ada", "8.9"),
    ("a100", "8.0"),
    ("a800", "8.0"),
    ("a30", "8.0"),
    ("a40", "8.6"),
    ("a10", "8.6"),
    ("a16", "8.6"),
    ("a2", "8.6"),
    ("t4", "7.5"),
    ("v100", "7.0"),
)

# MIG slices (the `Ng` of a profile) by multiprocessor count, per family: the
# XML and `-q` text give SMs and memory but no profile name.
_MIG_SLICES_BY_SMS = {
    "a100": {14: 1, 28: 2, 42: 3, 56: 4, 98: 7},
    "a30": {14: 1, 28: 2, 56: 4},
    "h100": {16: 1, 26: 1, 32: 2, 60: 3, 64: 4, 132: 7},
    "h200": {16: 1, 26: 1, 32: 2, 60: 3, 64: 4, 132: 7},
    "gh200": {16: 1, 26: 1, 32: 2, 60: 3, 64: 4, 132: 7},
    "b200": {18: 1, 36: 2, 66: 3, 72: 4, 148: 7},
    "gb200": {18: 1, 36: 2, 66: 3, 72: 4, 148: 7},
}


def _has_word(text: str, key: str) -> bool:
    """Whether `key` stands in `text` between its ends, spaces or hyphens.

    A string search, not one regular expression per family: compiling ~20 of
    them cost a few ms of the agent's first facts.
    """
    start = text.find(key)
    while start != -1:
        end = start + len(key)
        if (start == 0 or text[start - 1] in " -") and (end == len(text) or text[end] in " -"):
            return True
        start = text.find(key, start + 1)
    return False


def family(name: str) -> str:
    """The model family of a product name: `NVIDIA H100 80GB HBM3` -> `h100`."""
    lowered = name.lower().replace("nvidia", " ").replace("tesla", " ")
    lowered = " ".join(lowered.split())  # whitespace runs to one space, as a key's spaces are
    for key, _ in _COMPUTE_CAPABILITY:
        if _has_word(lowered, key):
            return key.replace(" ", "-")
    token = re.split(r"[\s-]", lowered)[0] if lowered else "gpu"
    return re.sub(r"[^a-z0-9]", "", token) or "gpu"


def nominal_gb(memory_mib: Optional[int], name: str = "") -> Optional[int]:
    """The memory size the card is sold with, in GB, from what the driver reports.

    A size printed in the name wins (`A100-SXM4-80GB`, `H100 80GB HBM3`); else the
    smallest nominal size at or a little above the reported GiB (within 8 %);
    else the GiB rounded.
    """
    printed = re.search(r"([0-9]+)\s*GB", name, re.IGNORECASE)
    size = ascii_int(printed.group(1)) if printed else None
    if size is not None:
        return size
    if not memory_mib:
        return _NOMINAL_BY_FAMILY.get(family(name)) if name else None
    gib = memory_mib / 1024.0
    for size in _NOMINAL_GB:
        if gib - 0.5 <= size <= gib * 1.08:
            return size
    return round(gib)


def card_class(name: str, memory_mib: Optional[int]) -> str:
    """The class label of a whole card: `h100-80g`, `gb200-186g`, `l40s-48g`."""
    size = nominal_gb(memory_mib, name)
    base = family(name)
    return "{}-{}g".format(base, size) if size else base


def mig_class(card_label: str, profile: str) -> str:
    """The class label of a MIG instance: the card's class plus the profile."""
    return "{}-mig-{}".format(card_label, profile)


def compute_capability(name: str) -> Optional[str]:
    """The CUDA compute capability of a product name (`9.0` for an H100), or None."""
    key = family(name).replace("-", " ")
    for known, capability in _COMPUTE_CAPABILITY:
        if known == key:
            return capability
    return None


def mig_profile(name: str, sm_count: Optional[int], memory_mib: Optional[int]) -> Optional[str]:
    """Infer a MIG profile (`3g.20gb`) from the instance's SMs and memory.

    Used only when `nvidia-smi -L` is not there to name the profile. The memory
    part is the instance's GiB rounded half up, as the profile names print it.
    """
    if not sm_count or not memory_mib:
        return None
    table: Dict[int, int] = _MIG_SLICES_BY_SMS.get(family(name), {})
    slices = table.get(int(sm_count))
    if slices is None:
        return None
    memory_gb = math.floor(memory_mib / 1024.0 + 0.5)
    return "{}g.{}gb".format(slices, memory_gb)
