"""`llmgw hold DIR`: the agent's place inside a Slurm job, one per allocated node.

A replica on a Slurm cluster is one job whose step runs `hold` on each of its
nodes. `hold` keeps the node's side of the allocation and lets consoles in:

* it makes `DIR/<job id>/<node>/` (0700) with a Unix socket, `agent.sock`, and
  its own state folder, so two jobs on one node never share shards;
* for each connection to the socket it starts `llmgw serve` with its stdio on
  that connection: a console reaches it with `srun --jobid=J --overlap -w NODE`
  and a relay that copies its stdio to the socket
  (`llmgw_core.slurm.hold.relay_argv`), as an SSH channel runs one agent per
  console. When that console goes, its agent sees the end of its input and
  exits. The shards it started stay, as they do when an SSH link drops, because
  they live in this step, not in the relay's: on a site that tracks a step's
  processes by cgroup they would die with the relay's step otherwise;
* when Slurm ends the job (`scancel`, a time limit, preemption) it stops
  every shard of its state folder before it exits: a site that tracks
  processes by process group only (`proctrack/pgid`) would otherwise leave
  the engines running on cards the scheduler has given to someone else.

Nothing listens on the network: the socket is a file in a folder only its user
may enter.

`LLMGW_AGENT_REPLAY_ROOT` (the suite's cluster, whose nodes are all this
machine) names a folder of captures, one per node name: each node's agent
replays its own simulated hardware.

Stdlib only, Python 3.8+.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys

REPLAY_ROOT_ENV = "LLMGW_AGENT_REPLAY_ROOT"
SOCKET_NAME = "agent.sock"
"""The socket each console's relay connects to, in the job's folder on the node."""
STOP_TIMEOUT_S = 10.0
"""How long each shard is given to stop when the job ends (Slurm's KillWait is 30 s)."""


def node_folder(root, job_id, node):
    """The folder of one job's agent on one node (the console's relay names the same)."""
    return os.path.join(root, job_id, node)


def _serve_argv():
    """`llmgw serve` in a fresh Python, from wherever this agent was imported."""
    package_parent = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    code = (
        "import sys; sys.path.insert(0, {!r}); "
        "from llmgw_agent.__main__ import main; sys.exit(main(['serve']))"
    ).format(package_parent)
    return [sys.executable, "-c", code]


def _stop_every_shard():
    """Stop every shard this job's agent started (the job is ending)."""
    from llmgw_agent.shards.records import list_shards, stop_shard

    for shard in list_shards():
        if shard.get("phase") in ("running", "starting"):
            try:
                stop_shard(shard["shard_id"], STOP_TIMEOUT_S)
            except Exception as exc:  # one shard's failure must not keep the others running
                sys.stderr.write("llmgw hold: stopping {}: {}\n".format(shard["shard_id"], exc))


class _Ending(Exception):
    pass


def hold_main(argv):
    """Hold the node for the job, one agent per console; see the module docstring."""
    if len(argv) != 1 or not argv[0].startswith("/"):
        sys.stderr.write("usage: llmgw hold DIR (an absolute folder)\n")
        return 2
    job_id = os.environ.get("SLURM_JOB_ID", "")
    node = os.environ.get("SLURMD_NODENAME", "")
    if not job_id or not node:
        sys.stderr.write("llmgw hold: runs in a Slurm job's step (no SLURM_JOB_ID here)\n")
        return 2
    folder = node_folder(argv[0], job_id, node)
    os.makedirs(folder, mode=0o700, exist_ok=True)
    os.chmod(folder, 0o700)
    os.environ["LLMGW_AGENT_STATE"] = os.path.join(folder, "state")
    cards = os.environ.get("SLURM_STEP_GPUS") or os.environ.get("SLURM_JOB_GPUS")
    if cards is not None:
        # The job's cards on this node, as Slurm gave them to this step: its agents offer
        # these and no others (`discover.job_cards_only`).
        os.environ["LLMGW_JOB_GPUS"] = cards
    replay_root = os.environ.get(REPLAY_ROOT_ENV)
    if replay_root:
        os.environ["LLMGW_AGENT_REPLAY"] = os.path.join(replay_root, node)
    path = os.path.join(folder, SOCKET_NAME)
    if os.path.exists(path):
        os.unlink(path)  # a socket left by a `hold` of this job that was killed
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    # Bound by its name in the folder: a whole path may be longer than a socket's 108 bytes.
    here = os.getcwd()
    os.chdir(folder)
    try:
        listener.bind(SOCKET_NAME)
    finally:
        os.chdir(here)
    listener.listen(16)

    def ending(signum, _frame):
        raise _Ending(signum)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, ending)
    agents = []
    try:
        while True:
            connection, _ = listener.accept()
            try:
                agents.append(subprocess.Popen(_serve_argv(), stdin=connection, stdout=connection))
            finally:
                connection.close()  # the agent holds its own copy
            agents = [agent for agent in agents if agent.poll() is None]
    except _Ending:
        for agent in agents:
            if agent.poll() is None:
                agent.terminate()
        _stop_every_shard()
        return 0
    finally:
        listener.close()
        with contextlib.suppress(OSError):
            os.unlink(path)
