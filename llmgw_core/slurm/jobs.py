"""A Slurm job as the scheduler reports it: its state, the reason it waits or ended, the
nodes and the cards it holds.

Readers:

- `read_jobs_oneline`: `scontrol -o -d show job [ID]` (20.11 to current). `-d` adds each
  node's `Nodes= CPU_IDs= Mem= GRES=gpu:h100:2(IDX:0-1)` detail, which names the cards.
- `read_jobs_json`: the `jobs` list of `squeue --json` (21.08 on) and `scontrol --json show
  job` (23.02 on): `job_state` a string (to 22.05) or a list (23.02 on), `gres_detail` one
  entry per allocated node, counts plain or `{"set", "infinite", "number"}`.
- `read_submitted`: what `sbatch --parsable` prints (`123` or `123;cluster`).

A pending job's `reason` is the scheduler's word for why (`Resources`, `Priority`,
`QOSMaxGRESPerUser`, `ReqNodeNotAvail` …, with `reason_detail` saying more where Slurm does:
`ReqNodeNotAvail, UnavailableNodes:h100-2`); a finished one's says how
it ended (`NonZeroExitCode`, `TimeLimit`, `BadConstraints` …).
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict

from llmgw_core.errors import shown_value
from llmgw_core.slurm.gres import (
    GresCount,
    cards,
    read_gres,
    read_tres,
    requested_per_node,
    tres_cards,
)
from llmgw_core.slurm.hostlist import expand_hostlist
from llmgw_core.slurm.text import (
    NO_VALUE,
    SlurmOutputUnreadable,
    checked_text,
    count_text,
    json_document,
    number_or_none,
    one_line_fields,
    text_or_empty,
)

FINISHED = frozenset(
    {"COMPLETED", "CANCELLED", "FAILED", "TIMEOUT", "PREEMPTED", "NODE_FAIL", "BOOT_FAIL",
     "DEADLINE", "OUT_OF_MEMORY", "SPECIAL_EXIT", "REVOKED"}
)  # fmt: skip
"""States a job never leaves (a requeued job comes back under the same id as PENDING)."""
_JOB_ID = re.compile(r"^\d{1,18}(?:_\d{1,18}|_\[[0-9,\-%]+\]|\+\d{1,9})?$")
"""`123`, an array task `123_4` (or pending tasks `123_[5-9]`), a het job component `123+0`."""
_STATE = re.compile(r"^[A-Z][A-Z_]*$")


class SlurmJob(BaseModel):
    """One job (a snapshot).

    Attributes:
        job_id: as Slurm prints it (`123`, `123_4`, `123+0`).
        name: the job's name (`--job-name`).
        state: `PENDING`, `RUNNING`, `COMPLETING`, `COMPLETED`, `FAILED`, `CANCELLED`,
            `TIMEOUT`, `PREEMPTED`, `NODE_FAIL` …
        state_flags: what a version lists after the state (23.02 on: `["RUNNING", "COMPLETING"]`).
        reason: Slurm's reason code ("" where it prints `None`): `Resources`, `ReqNodeNotAvail`.
        reason_detail: the reason as Slurm explains it, where it says more than the code
            (`ReqNodeNotAvail, UnavailableNodes:h100-2`); else the code.
        partition, account, qos: as the scheduler resolved them ("" when unset).
        nodes: the nodes it holds, expanded (empty while pending).
        node_count: how many nodes it has or asks for.
        batch_host: the node its batch script runs on.
        gpus_per_node: what it asks of each node (`--gres=gpu:h100:8`), None when no cards.
        card_indices: per node, the indices of the cards Slurm gave it (from `-d` detail or
            `gres_detail`; empty when the output does not name them, and once it finished).
        gpus_allocated: the cards it holds in all, where the output says (0 once finished).
    """

    model_config = ConfigDict(frozen=True)

    job_id: str
    name: str = ""
    state: str
    state_flags: tuple[str, ...] = ()
    reason: str = ""
    reason_detail: str = ""
    partition: str = ""
    account: str = ""
    qos: str = ""
    nodes: tuple[str, ...] = ()
    node_count: int | None = None
    batch_host: str = ""
    gpus_per_node: GresCount | None = None
    card_indices: dict[str, tuple[int, ...]] = {}
    gpus_allocated: int | None = None

    @property
    def pending(self) -> bool:
        """Waiting for the scheduler (its `reason` says why)."""
        return self.state == "PENDING"

    @property
    def running(self) -> bool:
        """Its nodes are allocated and its script runs."""
        return self.state == "RUNNING"

    @property
    def finished(self) -> bool:
        """It ended and will not run again under this id."""
        return self.state in FINISHED


def _job_id(value: Any, what: str) -> str:
    text = str(value) if isinstance(value, int) and not isinstance(value, bool) else value
    if not isinstance(text, str) or not _JOB_ID.match(text):
        raise SlurmOutputUnreadable(f"{what} is {shown_value(value)}, not a job id")
    return text


def _states(value: Any, what: str) -> tuple[str, tuple[str, ...]]:
    if isinstance(value, str):
        parts = [value]
    elif isinstance(value, list) and value and all(isinstance(part, str) for part in value):
        parts = value
    else:
        raise SlurmOutputUnreadable(f"{what} is {shown_value(value)}, not a job state")
    for part in parts:
        if not _STATE.match(part):
            raise SlurmOutputUnreadable(f"{what} holds {shown_value(part)}, not a job state")
    return parts[0], tuple(parts[1:])


def _unset_empty(text: str) -> str:
    return "" if text in NO_VALUE else text


def _reason_code(detail: str) -> str:
    """`ReqNodeNotAvail, UnavailableNodes:h100-2` → `ReqNodeNotAvail`."""
    return detail.split(",", 1)[0].strip()


def _one_line_reason(text: str) -> str:
    """scontrol writes the reason's spaces as `_` (`ReqNodeNotAvail,_UnavailableNodes:a`);
    only the one after a comma is put back, as node names may hold `_`."""
    return _unset_empty(text).replace(",_", ", ")


def _indices_by_node(
    groups: list[tuple[str, str]], gres_name: str, what: str
) -> dict[str, tuple[int, ...]]:
    found: dict[str, tuple[int, ...]] = {}
    for hosts, gres in groups:
        held = cards(read_gres(gres, what), gres_name)
        if not held:
            continue  # a node of the job that holds none of the cards (or no longer does)
        indices = tuple(index for entry in held for index in entry.indices)
        for host in expand_hostlist(hosts, f"{what}'s Nodes"):
            found[host] = indices
    return found


def _detail_groups(pairs: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """The `-d` per-node groups: each `Nodes=` with the `GRES=` that follows it."""
    groups: list[tuple[str, str]] = []
    for key, value in pairs:
        if key == "Nodes":
            groups.append((value, ""))
        elif key == "GRES" and groups:
            groups[-1] = (groups[-1][0], value)
    return groups


def read_jobs_oneline(
    text: str, source: str = "the job list", gres_name: str = "gpu"
) -> list[SlurmJob]:
    """The jobs of `scontrol -o -d show job` (one job a line).

    Raises:
        SlurmOutputUnreadable: one sentence naming the line or job and the field.
    """
    jobs = []
    for pairs, fields in one_line_fields(text, source, "JobId", "scontrol -o -d show job"):
        job_id = _job_id(fields["JobId"], f"{source}: JobId")
        where = f"{source}: job {job_id}"
        if "JobState" not in fields:
            raise SlurmOutputUnreadable(f"{where} has no JobState")
        state, flags = _states(fields["JobState"], f"{where}'s JobState")
        nodes = tuple(expand_hostlist(fields.get("NodeList", ""), f"{where}'s NodeList"))
        indices = _indices_by_node(_detail_groups(pairs), gres_name, where)
        tres = read_tres(fields.get("TRES", ""), f"{where}'s TRES")
        reason = _one_line_reason(fields.get("Reason", ""))
        jobs.append(
            SlurmJob(
                job_id=job_id,
                name=fields.get("JobName", ""),
                state=state,
                state_flags=flags,
                reason=_reason_code(reason),
                reason_detail=reason,
                partition=_unset_empty(fields.get("Partition", "")),
                account=_unset_empty(fields.get("Account", "")),
                qos=_unset_empty(fields.get("QOS", "")),
                nodes=nodes,
                node_count=_node_count(fields.get("NumNodes", ""), f"{where}'s NumNodes"),
                batch_host=_unset_empty(fields.get("BatchHost", "")),
                gpus_per_node=requested_per_node(
                    fields.get("TresPerNode", ""), gres_name, f"{where}'s TresPerNode"
                ),
                card_indices={} if state in FINISHED else indices,
                gpus_allocated=_allocated(state, indices, tres, nodes, gres_name, where),
            )
        )
    return jobs


def _node_count(text: str, what: str) -> int | None:
    """`NumNodes=2` or, for a pending job, the range `2-2` / `1-4` (its first bound)."""
    return count_text(text.split("-", 1)[0], what)


def _allocated(
    state: str,
    indices: dict[str, tuple[int, ...]],
    tres: dict[str, str],
    nodes: tuple[str, ...],
    gres_name: str,
    what: str,
) -> int | None:
    """The cards a job holds: none once it has finished (Slurm still names its nodes)."""
    if state in FINISHED:
        return 0
    if indices:
        return sum(len(found) for found in indices.values())
    counted = tres_cards(tres, gres_name, what)
    if counted is not None:
        return counted
    return 0 if not nodes else None


def read_jobs_json(
    text: str, source: str = "the job list", gres_name: str = "gpu"
) -> list[SlurmJob]:
    """The jobs of `squeue --json` (21.08 on) or `scontrol --json show job` (23.02 on).

    Raises:
        SlurmOutputUnreadable: one sentence naming the job and the field.
    """
    jobs = []
    for index, raw in enumerate(json_document(text, source, "jobs")):
        if not isinstance(raw, dict):
            raise SlurmOutputUnreadable(
                f"{source}: job {index} is {shown_value(raw)}, not an object"
            )
        job_id = _job_id(raw.get("job_id"), f"{source}: job {index}'s job_id")
        where = f"{source}: job {job_id}"
        state, flags = _states(raw.get("job_state"), f"{where}'s job_state")
        nodes = tuple(
            expand_hostlist(text_or_empty(raw.get("nodes"), f"{where}'s nodes"), f"{where}'s nodes")
        )
        detail = raw.get("gres_detail", [])
        if not isinstance(detail, list) or not all(isinstance(entry, str) for entry in detail):
            raise SlurmOutputUnreadable(
                f"{where}'s gres_detail is {shown_value(detail)}, not a list"
            )
        indices = (
            _indices_by_node(list(zip(nodes, detail, strict=True)), gres_name, where)
            if len(detail) == len(nodes)
            else {}
        )
        tres = read_tres(
            text_or_empty(raw.get("tres_alloc_str"), f"{where}'s tres_alloc_str"), where
        )
        code = _unset_empty(text_or_empty(raw.get("state_reason"), f"{where}'s state_reason"))
        described = text_or_empty(raw.get("state_description"), f"{where}'s state_description")
        jobs.append(
            SlurmJob(
                job_id=job_id,
                name=text_or_empty(raw.get("name"), f"{where}'s name"),
                state=state,
                state_flags=flags,
                reason=code,
                reason_detail=described if described.startswith(code) and code else code,
                partition=text_or_empty(raw.get("partition"), f"{where}'s partition"),
                account=text_or_empty(raw.get("account"), f"{where}'s account"),
                qos=text_or_empty(raw.get("qos"), f"{where}'s qos"),
                nodes=nodes,
                node_count=number_or_none(raw.get("node_count"), f"{where}'s node_count"),
                batch_host=text_or_empty(raw.get("batch_host"), f"{where}'s batch_host"),
                gpus_per_node=requested_per_node(
                    text_or_empty(raw.get("tres_per_node"), f"{where}'s tres_per_node"),
                    gres_name,
                    f"{where}'s tres_per_node",
                ),
                card_indices={} if state in FINISHED else indices,
                gpus_allocated=_allocated(state, indices, tres, nodes, gres_name, where),
            )
        )
    return jobs


def read_submitted(text: str, source: str = "sbatch's answer") -> str:
    """The job id `sbatch --parsable` printed (`123`, or `123;cluster` on a federation).

    Raises:
        SlurmOutputUnreadable: anything but one job id.
    """
    lines = [line.strip() for line in checked_text(text, source).splitlines() if line.strip()]
    if len(lines) != 1:
        raise SlurmOutputUnreadable(
            f"{source} is {shown_value(chr(10).join(lines)) if lines else 'empty'}, not one job id"
        )
    job_id, _, cluster = lines[0].partition(";")
    if cluster and not re.match(r"^[A-Za-z0-9_.-]{1,64}$", cluster):
        raise SlurmOutputUnreadable(
            f"{source} is {shown_value(lines[0])}, not a job id and a cluster"
        )
    return _job_id(job_id, source)
