"""The same client calls against the real llama.cpp (llama-cpp-python) and the simulated engine.

The simulated engine answers as vLLM does (`docs/engines.md`); this runs the
ordinary calls of an OpenAI client (the official SDK, and raw HTTP where the
SDK hides the status) against both, and holds each engine to what it was
measured to answer — so where llama.cpp differs from vLLM is written down
and stays true. Real llama.cpp is llama-cpp-python's server on the tiny GGUF
(`tests/support/tiny_gguf.py`); it is skipped where llama-cpp-python is absent
(`.ci/run` builds it). llama.cpp's C++ `llama-server` is not installed here.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from engine_process import serving
from tiny_gguf import write_tiny_llama_gguf

openai = pytest.importorskip("openai")

AGENT = Path(__file__).resolve().parents[2] / "agent"
HELLO = [{"role": "user", "content": "Say hello"}]


@pytest.fixture(scope="module")
def llama_cpp(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    pytest.importorskip("llama_cpp.server", reason="llama-cpp-python[server] is not installed")
    model = write_tiny_llama_gguf(tmp_path_factory.mktemp("tiny") / "tiny.gguf")
    argv = [sys.executable, "-m", "llama_cpp.server", "--model", str(model)]
    argv += ["--model_alias", "tiny", "--host", "127.0.0.1", "--n_ctx", "256"]
    with serving(argv, dict(os.environ), ready="/v1/models", wait_s=60) as base:
        yield base


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("LLMGW_")},
        "PYTHONPATH": str(AGENT),
        "LLMGW_AGENT_STATE": str(tmp_path_factory.mktemp("sim-state")),
        "LLMGW_SIM_LOAD_S": "0",
    }
    real = [
        "vllm",
        "serve",
        "/models/tiny",
        "--served-model-name",
        "tiny",
        "--max-model-len",
        "256",
    ]
    argv = [sys.executable, "-S", "-m", "llmgw_agent", "sim-engine", "--", *real]
    with serving(argv, env, ready="/health", wait_s=60) as base:
        yield base


def _calls(base: str) -> dict[str, Callable[[], Any]]:
    client = openai.OpenAI(base_url=base + "/v1", api_key="unused")

    def stream_usage() -> Any:
        chunks = list(
            client.chat.completions.create(
                model="tiny",
                messages=HELLO,
                stream=True,
                stream_options={"include_usage": True},
                max_tokens=8,
            )
        )
        return chunks[-1].usage is not None

    def unknown_model() -> Any:
        try:
            client.chat.completions.create(model="gpt-4o", messages=HELLO, max_tokens=4)
        except openai.NotFoundError:
            return 404
        return 200

    def cut() -> Any:
        answer = client.chat.completions.create(model="tiny", messages=HELLO, max_tokens=3)
        return answer.choices[0].finish_reason, answer.usage.completion_tokens

    def status(method: str, path: str, **kwargs: Any) -> Callable[[], int]:
        return lambda: httpx.request(method, base + path, timeout=30, **kwargs).status_code

    return {
        "models.list owned_by": lambda: [m.owned_by for m in client.models.list()],
        "a model nobody serves": unknown_model,
        "n: 2 choices": lambda: len(
            client.chat.completions.create(model="tiny", messages=HELLO, n=2, max_tokens=4).choices
        ),
        "max_tokens: 3": cut,
        "stream include_usage": stream_usage,
        "logprobs": lambda: (
            client.chat.completions.create(
                model="tiny", messages=HELLO, logprobs=True, top_logprobs=2, max_tokens=3
            )
            .choices[0]
            .logprobs
            is not None
        ),
        "legacy completions": lambda: (
            client.completions.create(model="tiny", prompt="Once", max_tokens=3)
            .choices[0]
            .finish_reason
        ),
        "a body that is not JSON": status(
            "POST",
            "/v1/chat/completions",
            content=b"{no",
            headers={"Content-Type": "application/json"},
        ),
        "n: 0": status(
            "POST", "/v1/chat/completions", json={"model": "tiny", "messages": HELLO, "n": 0}
        ),
        "GET /health": status("GET", "/health"),
    }


MEASURED = {
    # call: (vLLM, and the sim answering as it; llama-cpp-python 0.3.36)
    "models.list owned_by": (["vllm"], ["me"]),
    "a model nobody serves": (404, 200),
    "n: 2 choices": (2, 1),
    "max_tokens: 3": (("length", 3), ("length", 3)),
    "stream include_usage": (True, False),
    "logprobs": (True, True),
    "legacy completions": ("length", "length"),
    "a body that is not JSON": (400, 500),
    "n: 0": (400, 200),
    "GET /health": (200, 404),
}
"""What each engine answered, measured; docs/engines.md's table says the same."""


def _observe(base: str) -> dict[str, Any]:
    return {name: call() for name, call in _calls(base).items()}


def test_the_sim_answers_each_call_as_vllm_does(sim: str):
    assert _observe(sim) == {name: vllm for name, (vllm, _llama) in MEASURED.items()}


def test_real_llama_cpp_answers_each_call_as_measured(llama_cpp: str):
    observed = _observe(llama_cpp)
    for name, (vllm, _llama) in MEASURED.items():
        print(f"{name:26} vLLM/sim: {vllm!s:20} llama-cpp-python: {observed[name]}")
    assert observed == {name: llama for name, (_vllm, llama) in MEASURED.items()}
