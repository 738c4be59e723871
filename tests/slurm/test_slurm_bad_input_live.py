"""Serving on a Slurm cluster with a wrong inventory entry: one sentence, exit code 2, nothing
left in the queue, never a traceback (against the suite's real cluster, over real SSH)."""

from __future__ import annotations

from pathlib import Path

import pytest
from kept_demo import run_json
from slurm_cluster import SlurmCluster
from slurm_login import login_node

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

SERVE = (
    "steps:\n  - serve: {model: 'catalog:meta-llama/Llama-3.1-8B-Instruct', context: 8192,"
    " cluster: big, gpu_class: h100-80g, gpus: 1, wait_s: 5}\n"
)


def _serve(tmp_path: Path, login_env: dict[str, str], slurm_yaml: str) -> tuple[int, str, str]:
    cluster = f"  - name: big\n    slurm: {{login: slurm-login, {slurm_yaml}}}\n"
    with login_node(tmp_path, login_env, cluster) as (inventory, env):
        code, lines, said = run_json(inventory, SERVE, env=env)
    assert "Traceback" not in said, said
    return code, lines[-1]["error"], said


def test_a_login_host_without_slurm_is_one_sentence_and_exit_2(tmp_path: Path, slurm: SlurmCluster):
    code, error, _ = _serve(tmp_path, {"PATH": "/nonexistent"}, "partition: gpu")
    assert code == 2
    assert error.startswith("`scontrol --version` on big's login node slurm-login failed: ")
    assert "\n" not in error


def test_a_partition_the_cluster_does_not_have_is_one_sentence_and_exit_2(
    tmp_path: Path, slurm: SlurmCluster
):
    code, error, _ = _serve(tmp_path, {"SLURM_CONF": str(slurm.conf)}, "partition: nope")
    assert code == 2
    assert error == (
        "big's partition nope has no nodes: Slurm has no partition of that name there, "
        "or it is empty: set big's `partition` to one `sinfo` lists on its login node"
    )
    assert slurm.queue() == []


def test_a_request_slurm_refuses_is_its_own_sentence_and_exit_2(
    tmp_path: Path, slurm: SlurmCluster
):
    code, error, _ = _serve(
        tmp_path, {"SLURM_CONF": str(slurm.conf)}, "partition: gpu, constraint: nosuchfeature"
    )
    assert code == 2
    assert error.startswith("Slurm refused the job of ")
    assert "Invalid feature specification" in error, error
    assert slurm.queue() == []
