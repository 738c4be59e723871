"""A replica's job, decided from the scheduler's reading: its GRES type and nodes, the
`--nodelist` of nodes with the cards free now, the relay into a node, and the job's cards
as the agent offers them (pure, with plain values)."""

from __future__ import annotations

import shlex

import pytest

from llmgw_agent.discover import job_cards_only
from llmgw_core.errors import BadInput
from llmgw_core.slurm.gres import GresCount
from llmgw_core.slurm.hold import fleet_node_name, relay_argv, relay_command
from llmgw_core.slurm.nodes import SlurmNode
from llmgw_core.slurm.shape import class_of_type, described_partition, job_shape


def _node(name: str, gpu_type: str, count: int, used: int, *states: str) -> SlurmNode:
    return SlurmNode(
        name=name,
        states=states or ("MIXED",),
        partitions=("gpu",),
        gpus=(GresCount(name="gpu", type=gpu_type, count=count),),
        gpus_used=used,
    )


def test_a_gres_type_is_read_as_its_largest_gpu_class_and_an_unknown_type_as_none():
    assert class_of_type("h100") == "h100-80g"
    assert class_of_type("a100") == "a100-80g"
    assert class_of_type("H100") == "h100-80g"
    assert class_of_type("tesla_x") is None


def test_the_partition_is_described_to_the_planner_by_type_and_count_leaving_drained_nodes_out():
    nodes = [
        _node("h100-1", "h100", 8, 8),
        _node("h100-2", "h100", 8, 0),
        _node("h100-3", "h100", 8, 0, "IDLE", "DRAIN"),
        _node("a100-1", "a100", 4, 0),
    ]
    assert described_partition(nodes) == [
        {"name": "slurm-a100-80g-4", "count": 1, "gpu": "a100-80g", "gpus": 4},
        {"name": "slurm-h100-80g-8", "count": 2, "gpu": "h100-80g", "gpus": 8},
    ]


def test_a_partition_without_known_cards_is_refused_with_the_types_it_has():
    with pytest.raises(BadInput) as refused:
        described_partition([_node("x-1", "tesla_x", 2, 0)])
    assert "(tesla_x)" in refused.value.message


def test_the_nodelist_names_the_nodes_with_the_cards_free_now_most_free_first():
    nodes = [
        _node("h100-1", "h100", 8, 6),
        _node("h100-2", "h100", 8, 0),
        _node("h100-3", "h100", 8, 4),
    ]
    shape = job_shape(nodes, gpu_class="h100-80g", gpus_per_node=2, node_count=2)
    assert (shape.gpu_type, shape.nodes, shape.gpus_per_node) == ("h100", 2, 2)
    assert shape.nodelist == ("h100-2", "h100-3")


def test_without_enough_free_nodes_no_nodelist_is_given_and_slurm_queues_the_job():
    nodes = [_node("h100-1", "h100", 8, 8), _node("h100-2", "h100", 8, 7)]
    shape = job_shape(nodes, gpu_class="h100-80g", gpus_per_node=2, node_count=1)
    assert shape.nodelist == ()


def test_the_relay_is_one_srun_overlap_step_into_the_node_quoted_word_by_word():
    argv = relay_argv("42", "h100-1", "/home/ops/.cache/llmgw/slurm")
    assert argv[:7] == [
        "srun",
        "--jobid=42",
        "--overlap",
        "--nodes=1",
        "--ntasks=1",
        "--nodelist=h100-1",
        "--quiet",
    ]
    assert argv[-2] == "/home/ops/.cache/llmgw/slurm/42/h100-1"
    assert shlex.split(relay_command("42", "h100-1", "/home/a b/slurm")) == relay_argv(
        "42", "h100-1", "/home/a b/slurm"
    )
    assert fleet_node_name("h100-1", "42") == "h100-1.j42"


@pytest.mark.parametrize(
    ("job_id", "node"), [("42;rm", "h100-1"), ("42", "-oProxyCommand=x"), ("", "h100-1")]
)
def test_a_relay_to_a_job_id_or_node_slurm_would_not_print_is_refused(job_id: str, node: str):
    with pytest.raises(BadInput):
        relay_argv(job_id, node, "/home/ops/slurm")


def _facts() -> dict:
    return {
        "cards": [{"index": i} for i in range(8)],
        "gpus": [{"id": i, "card_index": i} for i in range(8)],
        "errors": [],
    }


def test_inside_a_jobs_hold_the_agent_offers_only_the_cards_slurm_gave_the_step():
    facts = job_cards_only(_facts(), {"LLMGW_JOB_GPUS": "6,7"})
    assert [c["index"] for c in facts["cards"]] == [6, 7]
    assert [g["card_index"] for g in facts["gpus"]] == [6, 7]


def test_outside_hold_the_facts_are_left_as_read_even_inside_someones_job():
    assert len(job_cards_only(_facts(), {})["gpus"]) == 8
    # The demo run from a shell inside a job: Slurm's own variables are not ours to obey.
    inside = {"SLURM_JOB_ID": "7", "SLURM_JOB_GPUS": "0,1"}
    assert len(job_cards_only(_facts(), inside)["gpus"]) == 8


def test_cards_slurm_names_unreadably_are_none_offered_and_said():
    facts = job_cards_only(_facts(), {"LLMGW_JOB_GPUS": "0,x"})
    assert facts["gpus"] == [] and "cannot be read" in facts["errors"][0]


def test_the_consoles_replica_row_names_the_slurm_job_beside_the_way():
    from llmgw_core.serve.view import ReplicaView
    from llmgw_core.views.replicas import replica_row

    spec = {
        "way": {"label": "1 × h100-80g"},
        "slurm": {"cluster": "big", "job_id": "12", "nodes": ["h100-1"]},
    }
    view = ReplicaView(name="llama", spec=spec, shards=(), phase="ready", reason=None)
    assert replica_row(view).way == "1 × h100-80g · job 12 on big"


def test_the_replica_row_adds_the_jobs_state_and_slurms_reason_once_the_scheduler_said():
    from llmgw_core.serve.view import ReplicaView
    from llmgw_core.views.replicas import replica_row, slurm_job_text

    spec = {"way": {"label": "2 × h100-80g"}, "slurm": {"cluster": "big", "job_id": "12"}}
    view = ReplicaView(name="llama", spec=spec, shards=(), phase="starting", reason=None)
    pending = {"cluster": "big", "job_id": "12", "state": "PENDING", "reason": "Resources"}
    assert replica_row(view, pending).way == "2 × h100-80g · job 12 on big · PENDING (Resources)"
    running = {**pending, "state": "RUNNING", "reason": None}
    assert replica_row(view, running).way == "2 × h100-80g · job 12 on big · RUNNING"
    assert slurm_job_text({**pending, "state": "GONE", "reason": None}) == "job 12 on big · GONE"
    # The login node did not answer: the job as recorded, no state guessed.
    assert slurm_job_text({**pending, "state": None}) == "job 12 on big"
    # A hostile reason stays on the row's one line; a replica that is no job has no text.
    hostile = {**pending, "reason": "Resources\nforged row"}
    assert slurm_job_text(hostile) == "job 12 on big · PENDING (Resources forged row)"
    assert slurm_job_text({"cluster": "big"}) == ""
