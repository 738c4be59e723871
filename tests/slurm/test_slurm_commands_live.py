"""The commands run for real on the private cluster, through a shell as the login node's
would be: a replica submitted with `sbatch_argv` runs on the cards Slurm gave it, a second
one that cannot fit waits with Slurm's reason, both are read back with the readers, and
`cancel_argv` leaves nothing in the queue."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from slurm_cluster import SlurmCluster

from llmgw_core.slurm.commands import (
    ReplicaJob,
    cancel_argv,
    job_argv,
    node_listing_argv,
    queue_argv,
    remote_command,
    sbatch_argv,
    version_argv,
)
from llmgw_core.slurm.jobs import read_jobs_json, read_jobs_oneline, read_submitted
from llmgw_core.slurm.nodes import read_nodes_json
from llmgw_core.slurm.version import read_version

pytestmark = pytest.mark.slow  # real daemons: a few seconds a test

SCRIPT = """#!/bin/sh
echo "gpus=$SLURM_JOB_GPUS visible=$CUDA_VISIBLE_DEVICES node=$SLURMD_NODENAME args=$*"
sleep 120
"""


def on_login(slurm: SlurmCluster, argv: list[str]) -> str:
    """Run `argv` as an SSH exec channel would: one string, read by the login node's shell."""
    done = subprocess.run(
        ["sh", "-c", remote_command(argv)],
        env=slurm.env,
        capture_output=True,
        text=True,
        timeout=15,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_a_replica_runs_on_its_cards_a_second_waits_with_the_reason_and_cancel_leaves_nothing(
    slurm: SlurmCluster, tmp_path: Path
):
    folder = tmp_path / "a folder $HOME 'quoted'"  # what the login node's shell must not read
    folder.mkdir()
    script = folder / "replica.sh"
    script.write_text(SCRIPT)
    script.chmod(0o755)
    version = read_version(on_login(slurm, version_argv()))
    listing = node_listing_argv(version.node_listing)
    assert listing == ["sinfo", "--json"]

    first = ReplicaJob(
        job_name="llmgw-r1", script=str(script), script_args=("--replica", "r1 $(x)"), nodes=1,
        gpus_per_node=2, gpu_type="h100", partition="gpu", nodelist=("h100-1",),
        time_limit="10", output=str(folder / "r1-%j.out"), workdir=str(folder),
    )  # fmt: skip
    first_id = read_submitted(on_login(slurm, sbatch_argv(first)))
    slurm.wait_for(
        "the replica to run",
        lambda: read_jobs_oneline(on_login(slurm, job_argv(first_id)))[0].running,
    )
    (running,) = read_jobs_oneline(on_login(slurm, job_argv(first_id)))
    assert running.nodes == ("h100-1",) and running.card_indices == {"h100-1": (0, 1)}
    out = folder / f"r1-{first_id}.out"
    slurm.wait_for("the replica's first line", lambda: out.exists() and out.read_text() != "")
    assert out.read_text().strip() == "gpus=0,1 visible=0,1 node=h100-1 args=--replica r1 $(x)"

    second = first.model_copy(update={"job_name": "llmgw-r2", "gpus_per_node": 8})
    second_id = read_submitted(on_login(slurm, sbatch_argv(second)))
    slurm.wait_for(
        "the second replica to be given a reason",
        lambda: read_jobs_oneline(on_login(slurm, job_argv(second_id)))[0].reason != "",
    )
    (waiting,) = read_jobs_oneline(on_login(slurm, job_argv(second_id)))
    assert waiting.pending and waiting.reason == "Resources" and waiting.nodes == ()
    assert waiting.gpus_per_node is not None and waiting.gpus_per_node.count == 8

    queued = {
        job.job_id: job
        for job in read_jobs_json(on_login(slurm, queue_argv([first_id, second_id])))
    }
    assert (
        queued[first_id].card_indices == {"h100-1": (0, 1)}
        and queued[second_id].reason == "Resources"
    )
    nodes = {node.name: node for node in read_nodes_json(on_login(slurm, listing))}
    assert (nodes["h100-1"].gpus_used, nodes["h100-1"].gpus_free) == (2, 6)

    for job_id in (second_id, first_id):
        on_login(slurm, cancel_argv(job_id))
        (cancelled,) = read_jobs_oneline(on_login(slurm, job_argv(job_id)))
        assert cancelled.state in ("CANCELLED", "COMPLETING")
    slurm.wait_for("the queue to empty", lambda: slurm.queue() == [])
    assert on_login(slurm, ["squeue", "-h"]) == ""
