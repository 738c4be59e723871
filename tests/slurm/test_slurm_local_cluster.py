"""The private Slurm cluster the Slurm tests run on: real daemons, GPUs as GRES, nothing left
behind. What these tests pin is what the readers and the commands rely on."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from slurm_cluster import SlurmCluster, slurm_missing, start_cluster

pytestmark = pytest.mark.slow  # real daemons: a few seconds a test


def submit(slurm: SlurmCluster, folder: Path, *options: str, script: str = "sleep 30") -> str:
    """Submit a batch job whose script is `script`; return its id."""
    path = folder / "job.sh"
    path.write_text(f"#!/bin/sh\n{script}\n")
    out = slurm.run("sbatch", "--parsable", "-D", str(folder), "-o", str(folder / "out-%j.txt"),
                    *options, str(path))  # fmt: skip
    return out.strip()


def test_every_node_comes_up_idle_with_its_gpus_features_and_partition(slurm: SlurmCluster):
    assert slurm.node_states() == {
        "h100-1": "idle",
        "h100-2": "idle",
        "a100-1": "idle",
        "cpu-1": "idle",
    }
    lines = slurm.run("sinfo", "-h", "-N", "-o", "%N|%P|%G|%f").split("\n")
    assert "h100-1|gpu*|gpu:h100:8|h100,nvlink" in lines
    assert "a100-1|gpu*|gpu:a100:4|a100" in lines
    assert "cpu-1|cpu|(null)|cpu" in lines


def test_a_job_given_two_h100_sees_the_first_two_cards(slurm: SlurmCluster, tmp_path: Path):
    script = 'echo "$SLURM_JOB_GPUS|$CUDA_VISIBLE_DEVICES|$SLURMD_NODENAME"'
    job = submit(slurm, tmp_path, "--gres=gpu:h100:2", script=script)
    out = tmp_path / f"out-{job}.txt"
    slurm.wait_for(
        "the job to write its cards", lambda: out.exists() and out.read_text().strip() != ""
    )
    gpus, visible, node = out.read_text().strip().split("|")
    assert (gpus, visible) == ("0,1", "0,1")
    assert node in ("h100-1", "h100-2")


def test_a_job_over_two_nodes_holds_eight_cards_on_each(slurm: SlurmCluster, tmp_path: Path):
    job = submit(slurm, tmp_path, "--nodes=2", "--ntasks-per-node=1", "--gres=gpu:h100:8")
    slurm.wait_for(
        "the job to run", lambda: "RUNNING" in slurm.run("squeue", "-h", "-j", job, "-o", "%T")
    )
    used = slurm.run(
        "sinfo", "-h", "-N", "-n", "h100-1,h100-2", "-O", "NodeList:8,StateLong:8,GresUsed:30"
    )
    assert used.split() == [
        "h100-1",
        "mixed",
        "gpu:h100:8(IDX:0-7)",
        "h100-2",
        "mixed",
        "gpu:h100:8(IDX:0-7)",
    ]


@pytest.mark.skipif(bool(slurm_missing()), reason=slurm_missing() or "-")
def test_a_cluster_whose_controller_died_under_a_running_job_still_leaves_no_process(
    tmp_path: Path,
):
    cluster = start_cluster(tmp_path / "c")
    try:
        submit(cluster, tmp_path, "--gres=gpu:a100:1", script="sleep 300")
        cluster.wait_for(
            "the job to run", lambda: "R" in cluster.run("squeue", "-h", "-o", "%t").split()
        )
        daemons = [process.pid for process in cluster.processes]
        assert len(daemons) == 1 + 1 + 4  # munged, slurmctld, a slurmd per node
        # slurmscriptd, then the job's slurmstepd, its script and the script's sleep.
        cluster.wait_for("the job's processes", lambda: len(cluster.stray_pids()) >= 4)
        cluster.processes[1].kill()  # no controller: the job cannot be cancelled, only ended
        cluster.processes[1].wait()
    finally:
        cluster.stop()
    assert cluster.stray_pids() == []
    for pid in daemons:
        assert not Path(f"/proc/{pid}").exists() or _zombie(pid)
    assert os.listdir(tmp_path / "c" / "run")  # everything it wrote stayed in its folder


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(")")[1].split()[0] == "Z"
    except OSError:
        return True
