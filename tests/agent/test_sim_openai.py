"""The simulated engine answers a client as vLLM does: models, errors, n, max_tokens, stop,
logprobs, and a stream that ends with its usage when asked (read as raw server-sent events)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import ThreadingHTTPServer

import httpx
import pytest

from llmgw_agent.sim.engine.args import parse_engine_argv
from llmgw_agent.sim.engine.serving import SimHandler, SimState

ANSWER = "Hello from the simulated vllm engine serving llama."  # eight words: eight tokens


@pytest.fixture(scope="module")
def engine() -> Iterator[str]:
    argv = [
        "vllm",
        "serve",
        "/models/llama",
        "--served-model-name",
        "llama",
        "--max-model-len",
        "8192",
    ]
    state = SimState(parse_engine_argv("vllm", argv), {})
    state.ready.set()
    server = ThreadingHTTPServer(("127.0.0.1", 0), type("Bound", (SimHandler,), {"sim": state}))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _chat(engine: str, **body: object) -> httpx.Response:
    messages = [{"role": "user", "content": "Say hello"}]
    return httpx.post(f"{engine}/v1/chat/completions", json={"messages": messages, **body})


def test_models_lists_the_served_name_with_vllms_card_fields(engine: str):
    (card,) = httpx.get(f"{engine}/v1/models").json()["data"]
    assert (card["id"], card["object"], card["owned_by"]) == ("llama", "model", "vllm")
    assert (card["root"], card["parent"], card["max_model_len"]) == ("/models/llama", None, 8192)
    assert card["permission"][0]["object"] == "model_permission"


def test_a_model_nobody_serves_is_a_404_with_vllms_error_body(engine: str):
    answer = _chat(engine, model="gpt-4o")
    assert answer.status_code == 404
    assert answer.json() == {  # vLLM 0.32's, measured (tests/e2e/test_vllm_vs_sim.py)
        "error": {
            "message": "The model `gpt-4o` does not exist. Valid aliases: llama.",
            "type": "NotFoundError",
            "param": "model",
            "code": 404,
        }
    }


def test_a_bad_request_is_a_400_in_vllms_two_kinds(engine: str):
    # vLLM's own checks: a BadRequestError (`n` names no parameter; `max_tokens` does).
    answer = _chat(engine, model="llama", n=0)
    assert answer.status_code == 400
    assert answer.json()["error"] == {
        "message": "n must be at least 1, got 0.",
        "type": "BadRequestError",
        "param": None,
        "code": 400,
    }
    assert _chat(engine, model="llama", max_tokens=0).json()["error"]["param"] == "max_tokens"
    # Its schema's: a `Bad Request` naming where in the body.
    no_messages = httpx.post(f"{engine}/v1/chat/completions", json={"model": "llama"})
    refused = no_messages.json()["error"]
    assert no_messages.status_code == 400
    assert (refused["type"], refused["param"]) == ("Bad Request", "body.messages")
    assert refused["message"].startswith("1 validation error:\n  {'type': 'missing'")
    not_json = httpx.post(f"{engine}/v1/completions", content=b"{")
    assert not_json.status_code == 400 and not_json.json()["error"]["param"] == "body.1"


def test_n_gives_as_many_choices_and_usage_counts_them_all(engine: str):
    body = _chat(engine, model="llama", n=2).json()
    assert [c["index"] for c in body["choices"]] == [0, 1]
    assert {c["message"]["content"] for c in body["choices"]} == {ANSWER}
    assert body["usage"] == {
        "prompt_tokens": 2,
        "completion_tokens": 16,
        "total_tokens": 18,
        "prompt_tokens_details": None,
        "completion_tokens_details": None,
    }


def test_max_tokens_cuts_the_text_and_says_length(engine: str):
    body = _chat(engine, model="llama", max_tokens=3).json()
    (choice,) = body["choices"]
    assert choice["message"]["content"] == "Hello from the"
    assert choice["finish_reason"] == "length"
    assert body["usage"]["completion_tokens"] == 3
    whole = _chat(engine, model="llama").json()["choices"][0]
    assert whole["finish_reason"] == "stop"


def test_a_stop_sequence_ends_the_text_before_it(engine: str):
    (choice,) = _chat(engine, model="llama", stop=["engine"]).json()["choices"]
    assert choice["message"]["content"] == "Hello from the simulated vllm"
    assert choice["finish_reason"] == "stop"


def test_logprobs_are_given_when_asked_for_chat_and_completions(engine: str):
    (choice,) = _chat(engine, model="llama", logprobs=True, top_logprobs=1).json()["choices"]
    tokens = [entry["token"] for entry in choice["logprobs"]["content"]]
    assert " ".join(tokens) == ANSWER
    legacy = httpx.post(
        f"{engine}/v1/completions", json={"model": "llama", "prompt": "Say", "logprobs": 1}
    ).json()["choices"][0]
    assert legacy["text"] == ANSWER and len(legacy["logprobs"]["tokens"]) == 8


def test_a_stream_read_as_raw_events_ends_with_usage_then_done(engine: str):
    frames = []
    with httpx.stream(
        "POST",
        f"{engine}/v1/chat/completions",
        json={
            "model": "llama",
            "messages": [{"role": "user", "content": "Say hello"}],
            "stream": True,
            "stream_options": {"include_usage": True},
            "max_tokens": 4,
        },
    ) as response:
        assert response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if line:
                assert line.startswith("data: "), line
                frames.append(line.removeprefix("data: "))
    assert frames[-1] == "[DONE]"
    chunks = [json.loads(frame) for frame in frames[:-1]]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert text == "Hello from the simulated"
    finishes = [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]]
    assert finishes[-1] == "length" and set(finishes[:-1]) == {None}
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"] == {"prompt_tokens": 2, "completion_tokens": 4, "total_tokens": 6}
    assert {c["object"] for c in chunks} == {"chat.completion.chunk"}


# --- the official SDK, as a client of the sim engine --------------------------------------


@pytest.fixture(scope="module")
def client(engine: str):
    import openai

    return openai.OpenAI(base_url=f"{engine}/v1", api_key="unused", max_retries=0)


def test_the_sdk_lists_the_model(client):
    assert [model.id for model in client.models.list()] == ["llama"]


def test_the_sdk_raises_not_found_for_a_model_nobody_serves(client):
    import openai

    with pytest.raises(openai.NotFoundError) as raised:
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    assert raised.value.status_code == 404 and "does not exist" in str(raised.value)


def test_the_sdk_gets_two_choices_a_length_finish_and_the_usage_of_a_stream(client):
    messages = [{"role": "user", "content": "Say hello"}]
    two = client.chat.completions.create(model="llama", messages=messages, n=2)
    assert len(two.choices) == 2 and two.usage.completion_tokens == 16
    cut = client.chat.completions.create(model="llama", messages=messages, max_tokens=3)
    assert cut.choices[0].finish_reason == "length"
    stream = client.chat.completions.create(
        model="llama", messages=messages, stream=True, stream_options={"include_usage": True}
    )
    chunks = list(stream)
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 8
    legacy = client.completions.create(model="llama", prompt="Say hello", max_tokens=2)
    assert legacy.choices[0].text == "Hello from" and legacy.choices[0].finish_reason == "length"


def test_a_refused_post_leaves_no_body_behind_on_a_kept_alive_connection(engine: str):
    # A router keeps connections open and POSTs routes the sim does not serve
    # (vllm-router 0.1.17 asks `/v1/chat/completions/render` first): the body
    # must not be read as the next request.
    import http.client

    host, port = engine.removeprefix("http://").split(":")
    connection = http.client.HTTPConnection(host, int(port))
    body = json.dumps({"model": "llama", "messages": [{"role": "user", "content": "Hi"}]})
    headers = {"Content-Type": "application/json"}
    connection.request("POST", "/v1/chat/completions/render", body, headers)
    first = connection.getresponse()
    first.read()
    assert first.status == 404
    connection.request("POST", "/v1/chat/completions", body, headers)
    second = connection.getresponse()
    assert second.status == 200 and json.loads(second.read())["model"] == "llama"
    connection.close()


def test_tokenize_counts_a_prompt_and_messages_as_vllm_shapes_it(engine: str):
    counted = httpx.post(f"{engine}/tokenize", json={"model": "llama", "prompt": "one two three"})
    assert counted.status_code == 200
    body = counted.json()
    assert (body["count"], body["max_model_len"], len(body["tokens"])) == (3, 8192, 3)
    chat = {"model": "llama", "messages": [{"role": "user", "content": "Say hello"}]}
    assert httpx.post(f"{engine}/tokenize", json=chat).json()["count"] == 2
    unknown = httpx.post(f"{engine}/tokenize", json={"model": "gpt-4o", "prompt": "x"})
    assert unknown.status_code == 404
