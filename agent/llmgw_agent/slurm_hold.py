"""`llmgw hold DIR`: the agent's place inside a Slurm job, one per allocated node.

A replica on a Slurm cluster is one job whose step runs `hold` on each of its
nodes. `hold` keeps the node's side of the allocation and lets a console in:

* it makes `DIR/<job id>/<node>/` (0700) with two FIFOs, `in` and `out`, and
  its own state folder, so two jobs on one node never share shards;
* it runs `llmgw serve` with stdin and stdout on the FIFOs, over and over: a
  console reaches it with `srun --jobid=J --overlap -w NODE` and a relay that
  copies its stdio to the FIFOs (`llmgw_core.slurm.hold.relay_argv`), and
  when that console goes, the agent sees the end of its input and exits,
  and the next `serve` waits for the next console. The shards it started
  stay, as they do when an SSH link drops, because they live in this step,
  not in the console's: on a site that tracks a step's processes by cgroup
  they would die with the relay's step otherwise;
* when Slurm ends the job (`scancel`, a time limit, preemption) it stops
  every shard of its state folder before it exits: a site that tracks
  processes by process group only (`proctrack/pgid`) would otherwise leave
  the engines running on cards the scheduler has given to someone else.

`LLMGW_AGENT_REPLAY_ROOT` (the suite's cluster, whose nodes are all this
machine) names a folder of captures, one per node name: each node's agent
replays its own simulated hardware.

Stdlib only, Python 3.8+.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

REPLAY_ROOT_ENV = "LLMGW_AGENT_REPLAY_ROOT"
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
    """Hold the node for the job, letting one console at a time in; see the module docstring."""
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
    os.environ["LLMGW_AGENT_STATE"] = os.path.join(folder, "state")
    replay_root = os.environ.get(REPLAY_ROOT_ENV)
    if replay_root:
        os.environ["LLMGW_AGENT_REPLAY"] = os.path.join(replay_root, node)
    for name in ("in", "out"):
        path = os.path.join(folder, name)
        if not os.path.exists(path):
            os.mkfifo(path, 0o600)

    def ending(signum, _frame):
        raise _Ending(signum)

    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, ending)
    serving = None
    try:
        with open(os.path.join(folder, "ready"), "w") as ready:
            ready.write("{}\n".format(os.getpid()))
        while True:
            # Each open waits for a console's relay to open the other end.
            with (
                open(os.path.join(folder, "in"), "rb") as stdin,
                open(os.path.join(folder, "out"), "wb") as stdout,
            ):
                serving = subprocess.Popen(_serve_argv(), stdin=stdin, stdout=stdout)
                serving.wait()
                serving = None
            time.sleep(0.05)
    except _Ending:
        if serving is not None and serving.poll() is None:
            serving.terminate()
        _stop_every_shard()
        return 0
