"""The fleet's summary of a Slurm cluster (`views.clusters`), from readings as the login node
gives them and from hostile ones: a field missing or of the wrong type must show as `?`,
never take the fleet screen down."""

from __future__ import annotations

from typing import Any

import pytest

from llmgw_core.slurm.jobs import read_jobs_oneline
from llmgw_core.slurm.nodes import read_nodes_oneline
from llmgw_core.views.clusters import (
    cluster_summaries,
    cluster_summary,
    job_holding,
    node_line_text,
    replica_of_job,
)

NODES = (
    "NodeName=h100-1 Arch=x86_64 CPUTot=8 CPUAlloc=2 Gres=gpu:h100:8 "
    "GresUsed=gpu:h100:4(IDX:0-3) State=MIXED Partitions=gpu RealMemory=64000 AllocMem=2000\n"
    "NodeName=h100-2 Arch=x86_64 CPUTot=8 CPUAlloc=0 Gres=gpu:h100:8 "
    "GresUsed=gpu:h100:0(IDX:N/A) State=IDLE+DRAIN Partitions=gpu RealMemory=64000 "
    "Reason=fan [root@2026-01-01T00:00:00]\n"
)
JOBS = (
    "JobId=12 JobName=llmgw-llama JobState=RUNNING Reason=None Partition=gpu NodeList=h100-1 "
    "NumNodes=1 TresPerNode=gres:gpu:h100:2 Nodes=h100-1 CPU_IDs=0 Mem=1000 "
    "GRES=gpu:h100:2(IDX:0-1)\n"
    "JobId=13 JobName=train JobState=RUNNING Reason=None Partition=gpu NodeList=h100-1 "
    "NumNodes=1 TresPerNode=gres:gpu:h100:2 Nodes=h100-1 CPU_IDs=1 Mem=1000 "
    "GRES=gpu:h100:2(IDX:2-3)\n"
)


def _reading() -> dict[str, Any]:
    """A reading as `ClusterReading.as_dict()` gives it, from real `scontrol -o -d` lines."""
    return {
        "cluster": "big",
        "login": "slurm-login",
        "partition": "gpu",
        "slurm": "22.05.8",
        "listing": "oneline",
        "nodes": [n.model_dump(mode="json") for n in read_nodes_oneline(NODES, "nodes")],
        "jobs": [j.model_dump(mode="json") for j in read_jobs_oneline(JOBS, "jobs")],
    }


def test_our_replicas_job_is_named_by_its_replica_and_anothers_only_as_another_job():
    summary = cluster_summary(_reading())
    assert summary.error is None
    assert (
        summary.heading == "big · partition gpu · Slurm 22.05.8 via slurm-login · 12/16 GPUs free"
    )
    first, second = summary.nodes
    assert (first.name, first.state, first.cards, first.free) == (
        "h100-1",
        "mixed",
        "8×h100",
        "4/8",
    )
    assert first.jobs == ("llama (job 12, 2 cards)", "another job (job 13, 2 cards)")
    assert node_line_text(first) == (
        "  h100-1  mixed  8×h100  free 4/8  llama (job 12, 2 cards); another job (job 13, 2 cards)"
    )
    assert node_line_text(second) == "  h100-2  idle+drain  8×h100  free 8/8  no job  (fan)"


def test_a_cluster_whose_login_failed_is_its_sentence_and_no_node():
    summary = cluster_summary(
        {"cluster": "big", "login": "slurm-login", "error": "`scontrol --version` failed: nope"}
    )
    assert summary.nodes == ()
    assert summary.heading == "big via slurm-login"
    assert summary.error == "`scontrol --version` failed: nope"


def test_a_pending_job_says_its_state_and_an_unknown_use_of_cards_is_a_question_mark():
    reading = _reading()
    reading["nodes"][0]["gpus_used"] = None
    reading["jobs"][0] = {**reading["jobs"][0], "state": "COMPLETING", "card_indices": {}}
    summary = cluster_summary(reading)
    assert summary.nodes[0].free == "?/8"
    assert summary.heading.endswith("?/16 GPUs free")
    assert summary.nodes[0].jobs[0] == "llama (job 12, 2 cards, completing)"


@pytest.mark.parametrize(
    "hostile",
    [
        {},
        {"cluster": None, "nodes": "h100-1"},
        {"cluster": "big", "nodes": [None, 3, {"name": ["x"], "states": "IDLE"}]},
        {"cluster": "big", "nodes": [{"name": "n", "gpus": [{"count": -4}, {"count": True}]}]},
        {"cluster": "big", "nodes": [{"name": "n", "gpus_used": "4"}], "jobs": [{"nodes": "n"}]},
        {"cluster": "big\nforged line", "nodes": [{"name": "a\nb", "states": ["IDLE\n"]}]},
        {"cluster": "big", "nodes": [{"name": "n"}], "jobs": [{"nodes": ["n"], "name": {}}]},
    ],
)
def test_hostile_readings_show_question_marks_on_one_line_each_and_never_raise(hostile):
    summary = cluster_summary(hostile)
    assert "\n" not in summary.heading
    for line in summary.nodes:
        assert "\n" not in node_line_text(line)


def test_entries_that_are_not_readings_are_left_out():
    assert [s.name for s in cluster_summaries([None, "big", _reading()])] == ["big"]


def test_only_a_job_named_llmgw_and_something_is_one_of_our_replicas():
    assert replica_of_job("llmgw-chat-1") == "chat-1"
    assert replica_of_job("llmgw-") is None
    assert replica_of_job("my-llmgw-x") is None
    assert (
        job_holding({"job_id": "7", "name": "x", "state": "RUNNING"}, "n") == "another job (job 7)"
    )
