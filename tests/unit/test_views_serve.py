"""A replica and its shards as words and a download bar (`llmgw_core.views.replicas`)."""

from __future__ import annotations

from llmgw_core.serve.view import ReplicaView, ShardView
from llmgw_core.views.replicas import download_bar, replica_row, shard_row


def _replica() -> ReplicaView:
    shards = (
        ShardView("h100-a-01", 0, "s0", ("GPU-0", "GPU-1"), "running", healthy=True),
        ShardView("h100-a-02", 1, "s1", ("GPU-0", "GPU-1"), "failed", reason="OOM"),
    )
    spec = {
        "engine": "vllm",
        "way": {"label": "2 × 2 × h100-80g"},
        "head": "h100-a-01",
        "http_port": 8000,
        "placement": {
            "nodes": [{"node": "h100-a-01", "rank": 0}, {"node": "h100-a-02", "rank": 1}]
        },
    }
    return ReplicaView(
        "llama",
        spec,
        shards,
        "failed",
        "rank 1 on h100-a-02 failed: OOM",
        transports={"s0": {"label": "Socket (TCP)"}, "s1": None},
    )


def test_a_replica_with_one_of_two_shards_running_says_1_of_2_and_its_endpoint():
    row = replica_row(_replica())
    assert (row.shards, row.endpoint, row.way, row.transport) == (
        "1/2",
        "h100-a-01:8000",
        "2 × 2 × h100-80g",
        "Socket (TCP)",
    )


def test_a_failed_shard_row_gives_its_reason_and_cards():
    row = shard_row(_replica().shards[1])
    assert (row.rank, row.gpus, row.phase, row.why) == ("r1", "GPU-0, GPU-1", "failed", "OOM")


def test_half_a_gib_fetched_fills_half_the_bar_with_bytes_and_rate():
    assert download_bar(1024**3 // 2, 410e6) == "▓▓▓▓▓▓░░░░░░ 0.5 GB at 410 MB/s"


def test_eight_cards_are_said_as_a_count_and_the_first_and_last():
    shard = ShardView("h100-a-01", 0, "s0", tuple(f"GPU-{i}" for i in range(8)), "running")
    assert shard_row(shard).gpus == "8: GPU-0 … GPU-7"
