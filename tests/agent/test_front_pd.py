"""The front's prefill/decode mode, piece by piece: what the prefill worker is sent, what the
decode worker then gets, and which worker a request may go to (the whole path through real
engines is `tests/e2e/test_disaggregation_start_demo.py`)."""

from __future__ import annotations

import json

import pytest

from llmgw_agent.front.pd import decode_body, prefill_body
from llmgw_agent.front.routing import Pool, Worker


def test_the_prefill_worker_is_asked_for_one_token_whole_keeping_the_kv_for_a_remote_decode():
    client = {
        "model": "m",
        "messages": [{"role": "user", "content": "Hi"}],
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": 300,
        "max_completion_tokens": 300,
    }
    sent = json.loads(prefill_body(json.dumps(client).encode()))
    assert sent["stream"] is False and "stream_options" not in sent
    assert sent["max_tokens"] == 1 and sent["max_completion_tokens"] == 1
    assert sent["kv_transfer_params"]["do_remote_decode"] is True
    assert sent["kv_transfer_params"]["do_remote_prefill"] is False
    assert sent["messages"] == client["messages"]


def test_the_decode_worker_gets_the_clients_request_with_the_prefill_workers_kv_params():
    client = json.dumps({"model": "m", "prompt": "Hi", "stream": True, "max_tokens": 300})
    params = {"do_remote_prefill": True, "remote_engine_id": "e1", "remote_block_ids": [0, 1]}
    answer = json.dumps({"choices": [{"text": "x"}], "kv_transfer_params": params}).encode()
    sent = json.loads(decode_body(client.encode(), answer))
    assert sent["kv_transfer_params"] == params
    assert sent["stream"] is True and sent["max_tokens"] == 300


@pytest.mark.parametrize(
    "answer", [b'{"choices": []}', b'{"kv_transfer_params": null}', b"not json", b"[]"]
)
def test_an_answer_without_kv_params_leaves_nothing_for_the_decode_worker(answer: bytes):
    assert decode_body(b'{"model": "m", "prompt": "Hi"}', answer) is None


def test_a_body_that_is_no_json_object_is_not_rewritten_for_the_prefill_worker():
    assert prefill_body(b"[1, 2]") is None and prefill_body(b"\xff") is None


def test_a_prefill_worker_is_chosen_only_for_the_prefill_leg():
    pool = Pool("round_robin", log=lambda _line: None)
    pool.add(Worker("http://127.0.0.1:9001", "m", role="prefill"))
    pool.add(Worker("http://127.0.0.1:9002", "m", role="decode"))
    assert pool.split("m") and not pool.split("other")
    assert {pool.choose("m", b"{}").url for _ in range(4)} == {"http://127.0.0.1:9002"}
    assert pool.choose("m", b"{}", role="prefill").url == "http://127.0.0.1:9001"


def test_a_worker_of_no_known_side_is_refused():
    with pytest.raises(ValueError, match="a worker's role is prefill or decode, not 'both'"):
        Worker("http://127.0.0.1:9001", "m", role="both")
