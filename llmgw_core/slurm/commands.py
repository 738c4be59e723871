"""The Slurm commands llmgw runs on a login node, as argument lists (never a shell string).

Pure: each function takes values and returns the argv. Where the argv must travel through
a remote shell (an SSH exec channel hands the login node's shell one string),
`remote_command` quotes every word with `shlex`. Options always go in their `--name=value`
form, so a value can never be read as another option. Every value a person wrote has
already passed the inventory's checks (`llmgw_core.slurm.options`), and these functions
check them again, because a caller may build a request by hand.
"""

from __future__ import annotations

import re
import shlex

from pydantic import BaseModel, ConfigDict, Field, field_validator

from llmgw_core.errors import BadInput, shown_value
from llmgw_core.slurm.hostlist import hostlist_text
from llmgw_core.slurm.options import (
    SLURM_NAME,
    check_constraint,
    check_gres_name,
    check_slurm_name,
    check_time_limit,
)

_JOB_ID = re.compile(r"^\d{1,18}(?:_\d{1,18}|\+\d{1,9})?$")
_JOB_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,127}$")
_PATH = re.compile(r"^/[^\x00-\x1f\x7f]*$")
_NODE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_CARD_TYPE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
LISTINGS = ("scontrol-json", "sinfo-json", "oneline")


def version_argv() -> list[str]:
    """Which Slurm the login node runs (read with `llmgw_core.slurm.version.read_version`)."""
    return ["scontrol", "--version"]


def node_listing_argv(listing: str) -> list[str]:
    """The node list in the form a release prints best (`SlurmVersion.node_listing`).

    Raises:
        ValueError: an unknown listing (a bug, not an input).
    """
    if listing == "scontrol-json":
        return ["scontrol", "--json", "show", "node"]
    if listing == "sinfo-json":
        return ["sinfo", "--json"]
    if listing == "oneline":
        # -d: without it no release prints GresUsed, the cards in use.
        return ["scontrol", "-o", "-d", "show", "node"]
    raise ValueError(f"no node listing is called {listing!r}; the listings are {LISTINGS}")


def _checked_job_id(job_id: str) -> str:
    if not isinstance(job_id, str) or not _JOB_ID.match(job_id):
        raise BadInput(f"{shown_value(job_id)} is not a Slurm job id")
    return job_id


def job_argv(job_id: str) -> list[str]:
    """One job's state, reason, nodes and cards (read with `read_jobs_oneline`); works on
    every release, and `-d` names the cards each node gave it.

    Raises:
        BadInput: `job_id` is not a job id.
    """
    return ["scontrol", "-o", "-d", "show", "job", _checked_job_id(job_id)]


def all_jobs_argv() -> list[str]:
    """Every job the controller knows, of every user, with the cards each node gave it (read
    with `read_jobs_oneline`; every release). What the console's fleet shows holding a
    cluster's nodes."""
    return ["scontrol", "-o", "-d", "show", "job"]


def queue_argv(job_ids: list[str] | tuple[str, ...]) -> list[str]:
    """Several jobs at once in one listing (read with `read_jobs_json`; 21.08 on).

    Raises:
        BadInput: an id that is not a job id.
    """
    ids = ",".join(_checked_job_id(job_id) for job_id in job_ids)
    return ["squeue", "--json", f"--jobs={ids}"] if ids else ["squeue", "--json", "--me"]


def cancel_argv(job_id: str) -> list[str]:
    """Stop a job: its steps, its batch script, its allocation.

    Raises:
        BadInput: `job_id` is not a job id.
    """
    return ["scancel", _checked_job_id(job_id)]


class ReplicaJob(BaseModel):
    """One replica as one Slurm job: N nodes, one task per node, K cards of a type on each.

    Attributes:
        job_name: the replica's id, as the job's name (`squeue` shows it).
        script: the batch script on the login node's file system (absolute path).
        script_args: arguments of the script.
        nodes: how many nodes.
        gpus_per_node: cards on each node; 0 for a CPU-only job.
        gpu_type: the GRES type (`h100`); "" asks for any type.
        gres_name: what the site calls its cards (`gpu`).
        partition, account, qos, constraint, reservation, time_limit: the cluster's
            inventory entry (None leaves the option out).
        nodelist: the exact nodes the planner chose (empty: the scheduler picks).
        output: where the job's own output goes (absolute path; `%j` is the job id).
        workdir: the job's working directory (absolute path), None for sbatch's default.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    job_name: str
    script: str
    script_args: tuple[str, ...] = ()
    nodes: int = Field(ge=1, le=100_000)
    gpus_per_node: int = Field(ge=0, le=1024)
    gpu_type: str = ""
    gres_name: str = "gpu"
    partition: str
    account: str | None = None
    qos: str | None = None
    constraint: str | None = None
    reservation: str | None = None
    time_limit: str | None = None
    nodelist: tuple[str, ...] = ()
    output: str | None = None
    workdir: str | None = None

    @field_validator("job_name")
    @classmethod
    def _job_name(cls, text: str) -> str:
        if not _JOB_NAME.match(text):
            raise ValueError("must be letters, digits, '_', '.', ':' or '-', at most 128")
        return text

    @field_validator("script", "output", "workdir")
    @classmethod
    def _absolute_path(cls, text: str | None) -> str | None:
        if text is not None and not _PATH.match(text):
            raise ValueError("must be an absolute path without control characters")
        return text

    @field_validator("gpu_type")
    @classmethod
    def _gpu_type(cls, text: str) -> str:
        if text and not _CARD_TYPE.match(text):
            raise ValueError("must be a GRES type such as h100")
        return text

    @field_validator("nodelist")
    @classmethod
    def _node_names(cls, names: tuple[str, ...]) -> tuple[str, ...]:
        for name in names:
            if not _NODE.match(name):
                raise ValueError(f"holds {shown_value(name)}, not a node name")
        return names

    @field_validator("partition")
    @classmethod
    def _partition(cls, text: str) -> str:
        return check_slurm_name(text)

    @field_validator("gres_name")
    @classmethod
    def _gres_name(cls, text: str) -> str:
        return check_gres_name(text)

    @field_validator("account", "qos", "reservation")
    @classmethod
    def _slurm_name(cls, text: str | None) -> str | None:
        if text is not None and not SLURM_NAME.match(text):
            raise ValueError("must be a Slurm name of letters, digits, '_', '.', '+' or '-'")
        return text

    @field_validator("constraint")
    @classmethod
    def _constraint(cls, text: str | None) -> str | None:
        return None if text is None else check_constraint(text)

    @field_validator("time_limit")
    @classmethod
    def _time_limit(cls, text: str | None) -> str | None:
        return None if text is None else check_time_limit(text)


def sbatch_argv(job: ReplicaJob) -> list[str]:
    """`sbatch --parsable` of a replica (read its answer with `read_submitted`).

    The allocation is the claim: with `--gres=gpu:TYPE:K` on every node and one task per
    node, Slurm gives the job K cards on each node, and no other job gets them.
    """
    argv = [
        "sbatch",
        "--parsable",
        f"--job-name={job.job_name}",
        f"--nodes={job.nodes}",
        "--ntasks-per-node=1",
        f"--partition={job.partition}",
    ]
    if job.gpus_per_node:
        kind = f"{job.gpu_type}:" if job.gpu_type else ""
        argv.append(f"--gres={job.gres_name}:{kind}{job.gpus_per_node}")
    for option, value in (
        ("account", job.account),
        ("qos", job.qos),
        ("constraint", job.constraint),
        ("reservation", job.reservation),
        ("time", job.time_limit),
        ("output", job.output),
        ("chdir", job.workdir),
    ):
        if value is not None:
            argv.append(f"--{option}={value}")
    if job.nodelist:
        argv.append(f"--nodelist={hostlist_text(job.nodelist)}")
    return [*argv, job.script, *job.script_args]


def remote_command(argv: list[str]) -> str:
    """The argv as one string for a remote shell (an SSH exec channel), every word quoted."""
    return shlex.join(argv)
