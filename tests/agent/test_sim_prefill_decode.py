"""The sim engine's time for a prompt and for a split request: reading a long prompt stalls the
answers it writes meanwhile, a decode worker given the prompt's KV reads no prompt but waits
for the bytes at its path's speed, and `ignore_eos` gives `max_tokens` tokens (the shape a
benchmark asks for)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import ThreadingHTTPServer

import httpx
import pytest

from llmgw_agent.sim.engine.args import parse_engine_argv
from llmgw_agent.sim.engine.serving import SimHandler, SimState

ARGV = ["vllm", "serve", "/models/llama", "--served-model-name", "llama", "--max-num-seqs", "8"]


@pytest.fixture
def engine() -> Iterator[tuple[str, SimState]]:
    state = SimState(parse_engine_argv("vllm", ARGV), {})
    state.token_s, state.prefill_s, state.kv_gbps = 0.002, 0.0001, 8.0
    state.ready.set()
    server = ThreadingHTTPServer(("127.0.0.1", 0), type("Bound", (SimHandler,), {"sim": state}))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", state
    finally:
        server.shutdown()
        server.server_close()


def _ask(url: str, words: int, max_tokens: int = 40, **more) -> tuple[float, dict]:
    body = {"model": "llama", "prompt": "w " * words, "max_tokens": max_tokens, **more}
    started = time.monotonic()
    answer = httpx.post(url + "/v1/completions", json=body, timeout=30).json()
    return time.monotonic() - started, answer


def test_ignore_eos_answers_with_max_tokens_tokens(engine):
    url, _ = engine
    _, answer = _ask(url, 5, max_tokens=40, ignore_eos=True)
    assert answer["usage"]["completion_tokens"] == 40
    assert answer["choices"][0]["finish_reason"] == "length"


def test_a_long_prompt_read_meanwhile_stalls_an_answer_being_written(engine):
    url, _ = engine
    stalled: list[float] = []  # 40 tokens: 0.08 s when nothing else runs
    writer = threading.Thread(target=lambda: stalled.append(_ask(url, 5, ignore_eos=True)[0]))
    writer.start()
    time.sleep(0.02)
    _ask(url, 3000, max_tokens=1)  # 0.3 s of prompt on the engine's one compute
    writer.join()
    assert stalled[0] > 0.3, stalled  # its tokens waited for the whole prompt (lower bounds only:
    # a loaded machine makes every sleep longer, never shorter)


def test_a_prefill_worker_hands_off_and_a_decode_worker_waits_for_the_bytes_not_the_prompt(
    engine,
):
    url, state = engine
    _, handed = _ask(url, 1000, max_tokens=1, kv_transfer_params={"do_remote_decode": True})
    params = handed["kv_transfer_params"]
    assert params["do_remote_prefill"] is True and params["kv_bytes"] == 1000 * 128 * 1024
    assert len(params["remote_block_ids"]) == 63  # 1000 tokens in blocks of 16
    took, answer = _ask(url, 1000, max_tokens=1, kv_transfer_params=params)
    # 131 MB at 8 Gb/s: 0.13 s of transfer, and none of the prompt's 0.1 s.
    assert took > 0.13
    assert state.kv_received_bytes == params["kv_bytes"]
    assert state.kv_received_s == pytest.approx(1000 * 128 * 1024 * 8 / 8e9)
    assert answer["kv_transfer_params"] is None
