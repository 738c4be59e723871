"""Rules about GPU devices and NVLink domains that views, facts and steps share, kept light.

The console draws its first frame from `views.fleet`, which needs only these
rules; keeping them here lets that frame come before pydantic loads, and
lets the `nodes` step name a node's domain without loading the views.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

BUSY_MEMORY_MIB = 1024
"""A device holding more than this much memory with no process listed is still in use:
a process of another container is invisible to NVML."""


def device_in_use(has_processes: bool, memory_used_mib: float | None) -> bool:
    """Whether a device is taken by work we may not see: a process on it, or its memory held.

    Args:
        has_processes: the device lists at least one process.
        memory_used_mib: memory in use on it, None when unknown.
    """
    return has_processes or (memory_used_mib is not None and memory_used_mib > BUSY_MEMORY_MIB)


def is_zero_uuid(uuid: str | None) -> bool:
    """True for a missing or all-zero cluster UUID: a single machine's NVSwitch, not a domain.

    The agent reads its cards by the same rule (`llmgw_agent.discover.fields.is_zero_uuid`).
    """
    return not (uuid or "").strip().strip("0-")


def domain_name(domain: Mapping[str, Any] | None) -> str | None:
    """A short, stable name for an NVLink domain: the cluster UUID's first block and the clique."""
    if not domain:
        return None
    uuid = str(domain.get("cluster_uuid") or "")
    if is_zero_uuid(uuid):
        return None
    clique = domain.get("clique_id")
    head = uuid.split("-")[0]
    return f"{head}/{clique}" if clique is not None else head
