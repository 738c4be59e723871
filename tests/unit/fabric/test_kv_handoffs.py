"""A decode worker's per-request KV hand-offs, read onto the replica page beside the KV's path.

The path a worker was given (its start-up line) says where the KV may go; the lines it logs per
request it received say how fast it went. These read the sim's own lines, written by the sim's
own `received_line`, so the two cannot drift apart; and hostile lines never raise.
"""

from __future__ import annotations

import math

from hypothesis import given, settings
from hypothesis import strategies as st

from llmgw_agent.sim.engine.transfer import received_line
from llmgw_core.fabric.kv_transfer import (
    KvTransport,
    kv_warning,
    label,
    rate_words,
    read_kv_handoffs,
)
from llmgw_core.serve.transport import kv_dict
from llmgw_core.serve.view import ReplicaView, ShardView
from llmgw_core.views.replicas import shard_transport

IB_RAILS = KvTransport(
    "NixlConnector", "either", "InfiniBand", ("mlx5_0", "mlx5_1", "mlx5_2", "mlx5_3")
)
OVER_TCP = KvTransport("mooncake", "decode", "TCP", ("eno1",))
PREFIX = "[decode h100-a-02] "
"""How a log line may start before the sim's own words (the reader searches, never anchors)."""


def _handoff(gbits_per_s: float, moved: int = 80 * 131072) -> str:
    """The line the sim's decode worker prints for one request moved at `gbits_per_s`."""
    return PREFIX + received_line(moved, moved * 8 / (gbits_per_s * 1e9), gbits_per_s)


def test_four_ib_rails_at_32_8_gbits_each_read_as_4_1_gb_per_s_per_request():
    lines = [_handoff(4 * 8.2) for _ in range(3)]
    found = read_kv_handoffs(["NCCL INFO Using network IB", *lines])
    assert found is not None
    assert (found.count, found.bytes_moved) == (3, 3 * 80 * 131072)
    assert label(IB_RAILS, found) == "KV over mlx5_0..3 (IB), 4.1 GB/s per request"


def test_the_median_request_is_shown_so_one_slow_hand_off_does_not_move_it():
    found = read_kv_handoffs([_handoff(1920.0), _handoff(80.0), _handoff(1920.0)])
    assert found is not None
    assert found.gbytes_per_s == 240.0 and found.last_gbytes_per_s == 240.0
    assert rate_words(found) == "240.0 GB/s per request"


def test_a_crawl_under_one_gb_per_s_keeps_two_figures_rather_than_reading_as_zero():
    crawl = "KV transfer: received 1048576 bytes in 20.97 ms (0.05 GB/s)"
    found = read_kv_handoffs([crawl])
    assert found is not None and rate_words(found) == "0.05 GB/s per request"


def test_a_worker_that_received_nothing_shows_its_path_alone():
    assert (
        read_kv_handoffs(["KV transfer: NixlConnector either over InfiniBand on mlx5_0:1"]) is None
    )
    assert label(IB_RAILS, None) == "KV over mlx5_0..3 (IB)"
    assert kv_dict(IB_RAILS)["per_request"] is None


def test_kv_over_tcp_is_a_red_line_that_says_what_its_requests_got():
    found = read_kv_handoffs([_handoff(10.0) for _ in range(4)])
    assert label(OVER_TCP, found) == "KV over TCP (eno1), 1.2 GB/s per request"
    warning = kv_warning("chat-pd-decode-1", "h100-a-02", OVER_TCP, found)
    assert warning == (
        "chat-pd-decode-1 on h100-a-02: the KV cache crosses TCP (eno1), not the fabric's"
        " rails: every prompt waits for it (1.2 GB/s per request over its last 4) (check"
        " UCX_NET_DEVICES, the rails' fabric test, or allow_tcp)"
    )
    assert kv_warning("chat-pd-decode-1", "h100-a-02", IB_RAILS, found) is None


def test_the_replica_page_shows_the_rate_beside_nccls_transport():
    found = read_kv_handoffs([_handoff(4 * 8.2)])
    shards = (ShardView("h100-a-02", 0, "s0", ("GPU-0",), "running"),)
    view = ReplicaView(
        "chat-pd-decode-1",
        {"engine": "vllm"},
        shards,
        "ready",
        transports={"s0": {"label": "NVLink", "kv": kv_dict(IB_RAILS, found)}},
    )
    assert shard_transport(view, shards[0]) == (
        "NVLink · KV over mlx5_0..3 (IB), 4.1 GB/s per request"
    )
    assert kv_dict(IB_RAILS, found)["per_request"] == {
        "gbytes_per_s": 4.1,
        "last_gbytes_per_s": 4.1,
        "requests": 1,
        "bytes": 80 * 131072,
    }


HOSTILE = [
    "KV transfer: received -5 bytes in 1.00 ms (4.1 GB/s)",
    "KV transfer: received 12 bytes in nan ms (inf GB/s)",
    "KV transfer: received 12 bytes in 1 ms (" + "9" * 400 + " GB/s)",
    "KV transfer: received " + "9" * 5000 + " bytes in 1.00 ms (4.1 GB/s)",
    "KV transfer: received 12 bytes in 1.00 ms (4.1 GB/s",
    "KV transfer: received 12 bytes in 1.00 ms (1e999 GB/s)",
    "KV transfer: received \x00\udcff bytes",
    "KV transfer: received 12 bytes in 1.00 ms (٣.٤ GB/s)",  # Arabic-Indic digits
    "",
]


def test_hostile_hand_off_lines_are_skipped_not_read():
    assert read_kv_handoffs(HOSTILE) is None
    found = read_kv_handoffs([*HOSTILE, _handoff(80.0)])
    assert found is not None and (found.count, found.gbytes_per_s) == (1, 10.0)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.text(max_size=80),
            st.builds(
                lambda b, ms, rate: f"KV transfer: received {b} bytes in {ms} ms ({rate} GB/s)",
                st.text(max_size=25) | st.integers(-(10**30), 10**30).map(str),
                st.text(max_size=12) | st.floats(allow_nan=True, allow_infinity=True).map(str),
                st.text(max_size=12) | st.floats(allow_nan=True, allow_infinity=True).map(str),
            ),
        ),
        max_size=12,
    )
)
def test_any_lines_read_as_finite_hand_offs_or_none_never_an_exception(lines: list[str]):
    found = read_kv_handoffs(lines)
    if found is None:
        return
    assert found.count >= 1 and found.bytes_moved >= 0
    assert math.isfinite(found.gbytes_per_s) and found.gbytes_per_s >= 0
    assert label(IB_RAILS, found).startswith("KV over mlx5_0..3 (IB), ")
