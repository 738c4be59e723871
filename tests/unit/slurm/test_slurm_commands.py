"""The Slurm commands as argument lists: what each holds, what is refused before anything
runs, and that quoting for the login node's shell gives back exactly the same words."""

from __future__ import annotations

import shlex

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from llmgw_core.errors import BadInput
from llmgw_core.slurm.commands import (
    ReplicaJob,
    cancel_argv,
    job_argv,
    node_listing_argv,
    queue_argv,
    remote_command,
    sbatch_argv,
)

REPLICA = {
    "job_name": "llmgw-r1.0",
    "script": "/home/ops/.cache/llmgw/replica.sh",
    "nodes": 2,
    "gpus_per_node": 8,
    "gpu_type": "h100",
    "partition": "gpu",
}


def test_a_two_node_replica_asks_eight_typed_cards_and_one_task_on_each_node():
    argv = sbatch_argv(ReplicaJob(**REPLICA))
    assert argv == [
        "sbatch", "--parsable", "--job-name=llmgw-r1.0", "--nodes=2", "--ntasks-per-node=1",
        "--partition=gpu", "--gres=gpu:h100:8", "/home/ops/.cache/llmgw/replica.sh",
    ]  # fmt: skip


def test_every_option_of_the_cluster_and_the_planner_s_nodes_are_passed_through():
    job = ReplicaJob(
        **REPLICA, account="ml-team", qos="normal", constraint="h100&nvlink", reservation="llm",
        time_limit="1-00:00:00", nodelist=("h100-1", "h100-2"), output="/scratch/r1-%j.out",
        workdir="/scratch", script_args=("--replica", "r1"),
    )  # fmt: skip
    argv = sbatch_argv(job)
    for word in (
        "--account=ml-team", "--qos=normal", "--constraint=h100&nvlink", "--reservation=llm",
        "--time=1-00:00:00", "--nodelist=h100-[1-2]", "--output=/scratch/r1-%j.out", "--chdir=/scratch",
    ):  # fmt: skip
        assert word in argv
    assert argv[-3:] == ["/home/ops/.cache/llmgw/replica.sh", "--replica", "r1"]


def test_untyped_cards_and_a_site_s_own_gres_name():
    argv = sbatch_argv(ReplicaJob(**{**REPLICA, "gpu_type": "", "gres_name": "tpu"}))
    assert "--gres=tpu:8" in argv
    assert not any(
        word.startswith("--gres")
        for word in sbatch_argv(ReplicaJob(**{**REPLICA, "gpus_per_node": 0}))
    )


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("job_name", "r1; reboot"),
        ("job_name", "-r1"),
        ("script", "relative/replica.sh"),
        ("script", "/tmp/a\nb"),
        ("partition", "gpu --qos=high"),
        ("account", "-oProxyCommand=x"),
        ("qos", "$(id)"),
        ("constraint", "h100 nvlink"),
        ("reservation", "a|b"),
        ("time_limit", "forever"),
        ("gpu_type", "h100:8"),
        ("gres_name", "gpu:h100"),
        ("nodelist", ("h100-1", "-h100-2")),
        ("nodes", 0),
        ("gpus_per_node", -1),
    ],
)
def test_a_value_that_is_not_what_its_option_takes_is_refused_before_anything_runs(field, value):
    with pytest.raises(ValidationError) as caught:
        ReplicaJob(**{**REPLICA, field: value})
    assert (
        caught.value.errors()[0]["loc"] == (field,) or caught.value.errors()[0]["loc"][0] == field
    )


def test_listings_and_job_commands():
    assert node_listing_argv("scontrol-json") == ["scontrol", "--json", "show", "node"]
    assert node_listing_argv("sinfo-json") == ["sinfo", "--json"]
    assert node_listing_argv("oneline") == ["scontrol", "-o", "-d", "show", "node"]
    assert job_argv("4411") == ["scontrol", "-o", "-d", "show", "job", "4411"]
    assert queue_argv(["4411", "4412_3"]) == ["squeue", "--json", "--jobs=4411,4412_3"]
    assert cancel_argv("4411") == ["scancel", "4411"]


@pytest.mark.parametrize("job_id", ["", "12;id", "-1", "$(id)", "12 13"])
def test_a_job_id_that_is_not_one_is_one_sentence(job_id: str):
    for build in (job_argv, cancel_argv, lambda job: queue_argv([job])):
        with pytest.raises(BadInput) as caught:
            build(job_id)
        assert caught.value.sentence().endswith("is not a Slurm job id")


@settings(max_examples=300, deadline=None)
@given(
    args=st.lists(
        st.text(alphabet=st.characters(blacklist_categories=("Cc", "Cs")), max_size=20), max_size=5
    ),
    folder=st.text(alphabet=st.characters(blacklist_categories=("Cc", "Cs")), max_size=20),
)
def test_through_the_login_node_s_shell_every_word_arrives_as_it_was(args, folder):
    job = ReplicaJob(
        **{**REPLICA, "script": f"/home/ops/{folder}/replica.sh", "script_args": tuple(args)}
    )
    argv = sbatch_argv(job)
    assert shlex.split(remote_command(argv)) == argv
