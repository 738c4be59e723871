"""What the fleet shows of each Slurm cluster: a heading, then one line per node of its
partition with its cards, state, free cards and the jobs holding them.

The input is a reading as `fleet.slurm_login.read_clusters_or_sentences` gives it (a
`ClusterReading.as_dict()` with its `jobs`, or `{"cluster", "login", "error"}`). It is
read defensively: a field missing or of the wrong type shows as `?` or `-`, never as a
traceback, because one odd cluster must not take the fleet screen down with it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

ANOTHER_JOB = "another job"
"""How a job that is not one of our replicas is named: whose it is is not ours to show."""


@dataclass(frozen=True)
class ClusterNodeLine:
    """One node of a cluster's partition.

    Attributes:
        name: the node's Slurm name.
        state: its state and flags, lower case (`mixed`, `idle+drain`).
        cards: its cards by type (`8×h100`), `-` for none.
        free: cards no job holds over all its cards (`6/8`; `?/8` when Slurm did not say).
        jobs: who holds its cards: `llama (job 12, 2 cards)` for our replica's job,
            `another job (job 13, 2 cards)` for anyone else's.
        reason: why Slurm drained or downed it ("" when none).
    """

    name: str
    state: str
    cards: str
    free: str
    jobs: tuple[str, ...]
    reason: str = ""


@dataclass(frozen=True)
class ClusterSummary:
    """One cluster as the fleet shows it.

    Attributes:
        name: the inventory's name of the cluster.
        heading: `big · partition gpu · Slurm 22.05.8 via slurm-login · 10/20 GPUs free`.
        nodes: a line per node of the partition, in Slurm's order.
        error: the sentence saying why it could not be read (None when it was).
    """

    name: str
    heading: str
    nodes: tuple[ClusterNodeLine, ...] = ()
    error: str | None = None


def _text(value: Any, default: str = "?") -> str:
    """A value shown as one line of text (a newline in hostile output must not add lines)."""
    if value is None or isinstance(value, (dict, list, tuple)):
        return default
    shown = " ".join(str(value).split())
    return shown or default


def _count(value: Any) -> int | None:
    """A non-negative whole number, or None (a bool, a string or a negative is not a count)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def _mappings(value: Any) -> list[Mapping[str, Any]]:
    return [item for item in value if isinstance(item, Mapping)] if isinstance(value, list) else []


def replica_of_job(job_name: str) -> str | None:
    """The replica a job runs when it is one of ours (`llmgw-llama` → `llama`), else None."""
    from llmgw_core.fleet.slurm_jobs import JOB_PREFIX

    if job_name.startswith(JOB_PREFIX) and len(job_name) > len(JOB_PREFIX):
        return job_name[len(JOB_PREFIX) :]
    return None


def _cards_on(job: Mapping[str, Any], node: str) -> int | None:
    """The cards `job` holds on `node`: the indices Slurm named, else what it asks per node."""
    indices = job.get("card_indices")
    if isinstance(indices, Mapping) and isinstance(indices.get(node), list):
        return len(indices[node])
    per_node = job.get("gpus_per_node")
    if isinstance(per_node, Mapping):
        return _count(per_node.get("count"))
    return None


def job_holding(job: Mapping[str, Any], node: str) -> str:
    """`llama (job 12, 2 cards)` for our replica's job; `another job (job 13, 1 card)`."""
    replica = replica_of_job(_text(job.get("name"), ""))
    who = _text(replica) if replica is not None else ANOTHER_JOB
    cards = _cards_on(job, node)
    held = "" if cards is None else f", {cards} card{'' if cards == 1 else 's'}"
    state = _text(job.get("state"))
    running = "" if state == "RUNNING" else f", {state.lower()}"
    return f"{who} (job {_text(job.get('job_id'))}{held}{running})"


def _node_line(node: Mapping[str, Any], jobs: list[Mapping[str, Any]]) -> ClusterNodeLine:
    name = _text(node.get("name"))
    states = node.get("states")
    state = (
        "+".join(_text(s).lower() for s in states) if isinstance(states, list) and states else "?"
    )
    gpus = _mappings(node.get("gpus"))
    counts = [(_text(g.get("type"), "gpu"), _count(g.get("count"))) for g in gpus]
    cards = ", ".join(f"{count}×{kind}" for kind, count in counts if count is not None) or "-"
    total = sum(count for _, count in counts if count is not None)
    used = _count(node.get("gpus_used"))
    free = f"{'?' if used is None else max(0, total - used)}/{total}"
    holding = tuple(
        job_holding(job, name)
        for job in jobs
        if isinstance(job.get("nodes"), list) and name in job["nodes"]
    )
    return ClusterNodeLine(
        name=name,
        state=state,
        cards=cards,
        free=free,
        jobs=holding,
        reason=_text(node.get("reason"), ""),
    )


def cluster_summary(entry: Mapping[str, Any]) -> ClusterSummary:
    """A reading (or a failure) as the fleet shows it."""
    name = _text(entry.get("cluster"))
    login = _text(entry.get("login"))
    if entry.get("error") is not None or not isinstance(entry.get("nodes"), list):
        sentence = _text(entry.get("error"), f"{name}'s login node {login} gave no node list")
        return ClusterSummary(name=name, heading=f"{name} via {login}", error=sentence)
    jobs = _mappings(entry.get("jobs"))
    nodes = tuple(_node_line(node, jobs) for node in _mappings(entry.get("nodes")))
    free = [line.free.split("/") for line in nodes]
    total = sum(int(t) for _, t in free)
    known = [int(f) for f, _ in free if f != "?"]
    free_text = f"{sum(known)}/{total}" if len(known) == len(free) else f"?/{total}"
    heading = (
        f"{name} · partition {_text(entry.get('partition'))} · Slurm {_text(entry.get('slurm'))}"
        f" via {login} · {free_text} GPUs free"
    )
    return ClusterSummary(name=name, heading=heading, nodes=nodes)


def cluster_summaries(entries: Sequence[Any]) -> tuple[ClusterSummary, ...]:
    """Every reading of a list, each as `cluster_summary` (entries not mappings are dropped)."""
    return tuple(cluster_summary(entry) for entry in entries if isinstance(entry, Mapping))


def node_line_text(line: ClusterNodeLine) -> str:
    """`  h100-1  mixed  8×h100  free 6/8  llama (job 12, 2 cards)`: one line of the fleet."""
    held = "; ".join(line.jobs) or "no job"
    why = f"  ({line.reason})" if line.reason else ""
    return f"  {line.name}  {line.state}  {line.cards}  free {line.free}  {held}{why}"
