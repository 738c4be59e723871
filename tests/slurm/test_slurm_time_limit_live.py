"""A replica's job ended by the scheduler at its time limit: a failed replica with Slurm's reason.

In a file of its own (a worker of its own): Slurm's time limits are whole minutes, and its
controller checks them every 30 s, so this test runs over two minutes.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from kept_demo import run_json
from slurm_cluster import SlurmCluster
from slurm_login import login_node
from test_slurm_serve_live import LLAMA_8B, _captures, _cluster_yaml

pytestmark = [pytest.mark.slow]


@pytest.mark.timeout(420)
def test_a_job_the_scheduler_ends_at_its_time_limit_is_a_failed_replica_with_its_reason(
    tmp_path: Path, slurm: SlurmCluster
):
    # `time_limit: 1` is one minute: the bench keeps the console (and its tunnel) busy past it
    # and past the controller's next check of time limits (every 30 s).
    script = (
        "steps:\n"
        f"  - serve: {{model: '{LLAMA_8B}', context: 8192, name: short, cluster: big,"
        " gpu_class: h100-80g, gpus: 1}\n"
        "  - bench: {replica: short, duration_s: 140, concurrency: 1, max_tokens: 4,"
        " on_fail: continue}\n"
        "  - replicas: {grace: 0}\n"
    )
    with login_node(
        tmp_path,
        {"SLURM_CONF": str(slurm.conf)},
        _cluster_yaml(_captures(tmp_path), time_limit="1"),
    ) as (inventory, env):
        # The controller checks time limits every 30 s, later on a loaded machine.
        _, lines, said = run_json(inventory, script, env=env, timeout=360)
    assert lines[0]["ok"], (said, lines)
    (replica,) = lines[2]["result"]["replicas"]
    assert replica["phase"] == "failed", (lines[1]["result"].get("errors"), replica)
    job_id = replica["slurm"]["job_id"]
    # Read as the scheduler ends it (COMPLETING, for a few seconds) or once it has (TIMEOUT).
    assert f"job {job_id} on big ended: " in replica["reason"], replica["reason"]
    assert "(Reason=TimeLimit)" in replica["reason"], replica["reason"]
    assert replica["slurm"]["state"] == "TIMEOUT"
    assert slurm.queue() == []
