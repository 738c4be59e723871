"""A replica's job on a Slurm cluster: the batch script that holds its nodes, and the relay
that lets the console's agent channel into them (pure: text and argv only).

The job's one step runs `llmgw hold DIR` on every allocated node (one task per
node, `--kill-on-bad-exit`, so a node lost ends the whole job and the replica
fails as on SSH nodes). `hold` listens on a Unix socket,
`DIR/<job>/<node>/agent.sock`, and starts one agent per connection. The console never logs into a compute node:
over its SSH connection to the login node it runs `relay_argv`, an `srun
--jobid=J --overlap -w NODE` step whose stdio is copied to that socket, where
`hold` starts an agent for it, so the agent protocol travels through Slurm
itself, and `pam_slurm_adopt` has nothing to refuse.

The home folder (where the agent's zipapp and `DIR` live) is assumed shared by
the login and compute nodes, as it is on nearly every Slurm site.
"""

from __future__ import annotations

import re
import shlex

from llmgw_core.errors import BadInput, shown_value

HOLD_SCRIPT = """#!/bin/sh
# llmgw: one replica's allocation. Its step holds every node for the console's agent
# (llmgw hold), one task per node; a node lost ends the job, and so the replica.
# $1: the agent's zipapp, $2: the folder of the jobs' sockets, $3: captures to replay (tests).
if [ -n "${3:-}" ]; then
    LLMGW_AGENT_REPLAY_ROOT=$3
    export LLMGW_AGENT_REPLAY_ROOT
fi
exec srun --ntasks-per-node=1 --kill-on-bad-exit=1 python3 "$1" hold "$2"
"""
"""The batch script of every replica's job (its arguments, not its text, change)."""

RELAY_WAIT_S = 60
"""How long a relay waits for the job's `hold` to open its socket (a node's first Python start
unpacks the agent)."""

_RELAY_COPY = """
import os, socket, threading
link = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
link.connect("agent.sock")
def to_agent():
    while True:
        data = os.read(0, 65536)
        if not data:
            break
        link.sendall(data)
    link.shutdown(socket.SHUT_WR)
threading.Thread(target=to_agent, daemon=True).start()
while True:
    data = link.recv(65536)
    if not data:
        break
    while data:
        data = data[os.write(1, data):]
"""
"""Copies the relay's stdio to and from the job's agent socket (Python 3.8, stdlib); the
agent sees its input end when the console's does."""

_RELAY = (
    'd=$1; n=0; while [ ! -S "$d/agent.sock" ]; do n=$((n+1)); '
    f"if [ $n -gt {RELAY_WAIT_S * 10} ]; then "
    'echo "llmgw: the job\'s agent did not start in $d" >&2; exit 3; fi; sleep 0.1; done; '
    # Connected by its name in the folder: a whole path may be longer than a socket's 108 bytes.
    'cd "$d" && exec python3 -c "$2"'
)
_NODE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_JOB_ID = re.compile(r"^\d{1,18}$")


def node_folder(hold_root: str, job_id: str, node: str) -> str:
    """The folder of one job's agent on one node (`llmgw_agent.slurm_hold.node_folder`)."""
    return f"{hold_root.rstrip('/')}/{job_id}/{node}"


def relay_argv(job_id: str, node: str, hold_root: str) -> list[str]:
    """The step that carries the console's agent channel to `node` of job `job_id`.

    Raises:
        BadInput: a job id or node name Slurm would not print.
    """
    if not _JOB_ID.match(job_id):
        raise BadInput(f"{shown_value(job_id)} is not a Slurm job id")
    if not _NODE.match(node):
        raise BadInput(f"{shown_value(node)} is not a Slurm node name")
    return [
        "srun",
        f"--jobid={job_id}",
        "--overlap",
        "--nodes=1",
        "--ntasks=1",
        f"--nodelist={node}",
        "--quiet",
        "/bin/sh",
        "-c",
        _RELAY,
        "llmgw-relay",
        node_folder(hold_root, job_id, node),
        _RELAY_COPY,
    ]


def relay_command(job_id: str, node: str, hold_root: str) -> str:
    """`relay_argv` as one string for the login node's shell, every word quoted."""
    return shlex.join(relay_argv(job_id, node, hold_root))


def fleet_node_name(node: str, job_id: str) -> str:
    """How the console names one node of one job: two replicas' jobs may share a node, and
    each has its own agent there (`h100-1.j42`)."""
    return f"{node}.j{job_id}"
