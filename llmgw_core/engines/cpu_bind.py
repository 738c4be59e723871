"""Which cores a vLLM replica on a CPU node binds its OpenMP threads to (pure).

vLLM's CPU backend binds rank N's OpenMP threads to the N-th NUMA node's
cores by itself (`VLLM_CPU_OMP_THREADS_BIND=auto`, one logical CPU a physical
core, the last cores kept for its scheduler). Two replicas on one node — a
roll's old and new one, or two services — then bind the same cores, and the
busy one starves the other: measured here, a new replica's start stalled for
over 400 s beside an old one under traffic, on the same core.

So the first vLLM replica on a node binds as vLLM chooses (nothing is set);
a replica started beside others binds, rank by rank, to the cores of its NUMA
node that none of them binds (`VLLM_CPU_OMP_THREADS_BIND=0-31|32-63`). Where
every core is bound already, it is left to vLLM's choice, and said.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from llmgw_agent.discover.host import cpu_list_ids
from llmgw_core.facts import NumaNode

BIND_VARIABLE = "VLLM_CPU_OMP_THREADS_BIND"
AUTO = "auto"


def cpu_ids(cpulist: str) -> list[int]:
    """The CPUs a kernel cpulist names (`0-3,8` -> [0, 1, 2, 3, 8]); [] when it is not one
    (read as the agent reads it from `/sys`: `cpu_list_ids`)."""
    return cpu_list_ids(cpulist) or []


def cpulist_of(ids: Iterable[int]) -> str:
    """[0, 1, 2, 5] -> `0-2,5`."""
    runs: list[list[int]] = []
    for cpu in sorted(set(ids)):
        if runs and cpu == runs[-1][1] + 1:
            runs[-1][1] = cpu
        else:
            runs.append([cpu, cpu])
    return ",".join(f"{a}-{b}" if a != b else str(a) for a, b in runs)


def bound_cores(binding: str | None, width: int, numa: Sequence[NumaNode]) -> set[int]:
    """The cores a running replica's OpenMP threads use: its explicit binding, else (vLLM's
    own choice) its NUMA nodes' cores less the last one of each, kept for the scheduler."""
    if binding and binding not in (AUTO, "nobind"):
        return {cpu for part in binding.split("|") for cpu in cpu_ids(part)}
    taken: set[int] = set()
    for node in numa[:width]:
        ids = cpu_ids(node.cpulist or "")
        taken.update(ids[:-1] if len(ids) > 1 else ids)
    return taken


def binding_beside(
    numa: Sequence[NumaNode], width: int, others: Sequence[tuple[str | None, int]]
) -> tuple[str | None, str | None]:
    """`VLLM_CPU_OMP_THREADS_BIND` for a new replica of `width` ranks, and a sentence.

    Args:
        numa: the node's NUMA nodes (with their cpulists), by number.
        width: the new replica's ranks (one a NUMA node).
        others: each vLLM replica running there: (its binding, None for vLLM's own; its ranks).

    Returns:
        (None, None) when nothing else runs there or the cores are not known: vLLM
        chooses; (binding, None) when free cores are left on each NUMA node; (None,
        sentence) when some NUMA node has none left: it shares, and the sentence says so.
    """
    if not others or len(numa) < width or any(not n.cpulist for n in numa[:width]):
        return None, None
    taken: set[int] = set()
    for binding, ranks in others:
        taken |= bound_cores(binding, ranks, numa)
    parts = []
    for node in numa[:width]:
        free = [cpu for cpu in cpu_ids(node.cpulist or "") if cpu not in taken]
        if not free:
            return None, (
                f"every core of NUMA node {node.node} is bound by another vLLM replica on this"
                " node: this one shares them"
            )
        parts.append(cpulist_of(free))
    return "|".join(parts), None
