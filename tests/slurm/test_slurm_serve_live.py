"""A replica as a Slurm job, end to end: served through the login node on the suite's cluster,
asked through a gateway, listed with its job, and stopped with nothing left in the queue.

The console talks to the login node only (asyncssh's server on loopback, its sessions given
the cluster's `SLURM_CONF`); each allocated node's agent runs inside the job's step and is
reached with `srun --overlap` from the login node. Every node of the suite's cluster is this
machine, so each node's agent replays a simulated node of its own (`replay:`) and starts
the sim engine, as the demo's nodes do.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from kept_demo import run_json
from slurm_cluster import SlurmCluster
from slurm_login import login_node, write_captures

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

LLAMA_8B = "catalog:meta-llama/Llama-3.1-8B-Instruct"


def _cluster_yaml(captures: Path, **more: str) -> str:
    extra = "".join(f", {key}: {value}" for key, value in more.items())
    return (
        "  - name: big\n"
        f"    slurm: {{login: slurm-login, partition: gpu, replay: {captures}{extra}}}\n"
    )


def _captures(tmp_path: Path) -> Path:
    return write_captures(
        tmp_path / "captures", {"h100-1": "hgx-h100", "h100-2": "hgx-h100", "a100-1": "hgx-h100"}
    )


def test_a_replica_is_one_job_asked_through_a_gateway_and_stopped_with_its_job(
    tmp_path: Path, slurm: SlurmCluster
):
    script = (
        "steps:\n"
        f"  - serve: {{model: '{LLAMA_8B}', context: 8192, name: llama, cluster: big}}\n"
        "  - replicas: {}\n"
        "  - gateway: {name: gw}\n"
        "  - ask: {gateway: gw, prompt: 'hello from slurm', max_tokens: 8}\n"
        "  - stop: {gateway: gw}\n"
        "  - stop: {replica: llama}\n"
    )
    with login_node(
        tmp_path, {"SLURM_CONF": str(slurm.conf)}, _cluster_yaml(_captures(tmp_path))
    ) as (inventory, env):
        code, lines, said = run_json(inventory, script, env=env, timeout=200)
    assert code == 0, (said, lines)
    served, listed, gateway, asked, _, stopped = (line["result"] for line in lines)
    assert served["phase"] == "ready"
    steps = [step["step"] for step in served["trace"] if step["step"].startswith("job ")]
    # The controller's first scheduling pass may come after the first poll: pending first.
    assert [s for s in steps if s != "job pending"] == [
        "job submitted",
        "job running",
        "job joined",
    ]
    (replica,) = listed["replicas"]
    job_id = replica["slurm"]["job_id"]
    assert replica["slurm"] == {
        "cluster": "big",
        "job_id": job_id,
        "nodes": [replica["slurm"]["nodes"][0]],
        "state": "RUNNING",
        "reason": None,
    }
    (shard,) = replica["shards"]
    assert shard["node"] == f"{replica['slurm']['nodes'][0]}.j{job_id}"
    assert gateway["node"] == shard["node"]
    assert "simulated" in asked["text"]
    assert stopped["slurm_jobs_cancelled"] == [job_id]
    assert slurm.queue() == []
