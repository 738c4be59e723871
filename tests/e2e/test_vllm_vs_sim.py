"""The same client calls against the real vLLM and the simulated engine that stands in for it.

The demo and most of the suite talk to the simulated engine, so what it
answers is what the product is tested against. Here the ordinary calls of an
OpenAI client — the official SDK, and raw HTTP where the SDK hides the status
— go to both: the real vLLM 0.32 (its CPU build from `.venv-vllm`, which
`.ci/run` installs; skipped, saying why, where it is absent) serving a tiny
random Llama (`tests/support/tiny_hf_llama.py`) with a key, and the sim
engine given the same command line and key. Each call's status, error body
and field set must be the same, except where `DIFFERS` says why.

Both are started with a LoRA adapter (`--enable-lora --lora-modules`, a PEFT
folder written as `peft` writes one) and with runtime updates allowed, so the
adapter's card in `/v1/models`, a request by its name, and the load and
unload routes `apply` uses are held to vLLM's too.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from engine_process import SIM_VLLM, WEATHER_TOOL, serving, sim_env
from lora_files import Widths, write_peft_adapter
from real_vllm import VLLM, make_tiny_llama, skip_without_real_vllm

openai = pytest.importorskip("openai")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

KEY = "sk-compare-0123456789"
HELLO = [{"role": "user", "content": "Say hello"}]
TOOLS = [WEATHER_TOOL]


LOGS: dict[str, Path] = {}
"""Where each engine's output went, and the real one's model."""
LORA: dict[str, str] = {}
"""The adapters' folders: `sql`, served from the start, and `extra`, loaded at runtime."""
TINY = Widths(hidden=256, intermediate=512, heads=4, kv_heads=2, layers=4)
"""`tiny_hf_llama`'s widths, which the adapters follow."""


@pytest.fixture(scope="module", autouse=True)
def adapters(tmp_path_factory: pytest.TempPathFactory) -> None:
    root = tmp_path_factory.mktemp("adapters")
    for name, targets in (("sql", ("q_proj", "v_proj")), ("extra", ("q_proj", "o_proj"))):
        folder = write_peft_adapter(root / name, TINY, rank=8, targets=targets, base_model="tiny")
        LORA[name] = str(folder)


def _command(model: str) -> list[str]:
    """The `vllm serve` arguments both engines are started with (`--port` is added)."""
    return [
        "serve",
        model,
        "--served-model-name",
        "tiny",
        "--max-model-len",
        "512",
        "--enforce-eager",
        "--host",
        "127.0.0.1",
        "--enable-lora",
        "--max-loras",
        "2",
        "--max-lora-rank",
        "8",
        "--lora-modules",
        f'{{"name": "sql", "path": "{LORA["sql"]}", "base_model_name": "tiny"}}',
    ]


@pytest.fixture(scope="module")
def real_vllm(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    skip_without_real_vllm()
    folder = tmp_path_factory.mktemp("vllm")
    make_tiny_llama(folder / "tiny")
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("LLMGW_", "VLLM_"))},
        "VLLM_API_KEY": KEY,
        "VLLM_CPU_KVCACHE_SPACE": "1",
        # One core for its kernels: the suite's other workers share the machine's two.
        "VLLM_CPU_OMP_THREADS_BIND": "0",
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True",
        # Its one worker in the engine core's own process: one start of torch fewer (21 s to
        # healthy on an idle machine, 15 s with it), and the same HTTP answers. On the CPU,
        # vLLM 0.32 takes `uni` only with this set (else it runs `mp`, `platforms/cpu.py`).
        "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
    }
    argv = [str(VLLM), *_command(str(folder / "tiny")), "--distributed-executor-backend", "uni"]
    LOGS["vllm"], LOGS["model"] = folder / "vllm.log", folder / "tiny"
    with serving(argv, env, ready="/health", wait_s=400, log=folder / "vllm.log") as base:
        yield base


@pytest.fixture(scope="module")
def sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    folder = tmp_path_factory.mktemp("sim")
    env = sim_env(folder / "state", VLLM_API_KEY=KEY, VLLM_ALLOW_RUNTIME_LORA_UPDATING="True")
    argv = [*SIM_VLLM[:-1], *_command("/models/tiny")]  # `serve` is the command's own first
    LOGS["sim"] = folder / "sim.log"
    with serving(argv, env, ready="/health", wait_s=60, log=LOGS["sim"]) as base:
        yield base


def _shape(value: Any) -> Any:
    """A JSON value's shape: its keys (nested), and for a list the shape of its first item."""
    if isinstance(value, dict):
        return {key: _shape(item) for key, item in sorted(value.items())}
    if isinstance(value, list):
        return [_shape(value[0])] if value else []
    return type(value).__name__


def _stream_shapes(base: str, path: str, body: dict[str, Any]) -> list[Any]:
    """The shapes of a stream's chunks, read as raw server-sent events: the first, the last
    with choices, and the usage chunk after them."""
    import json

    headers = {"Authorization": f"Bearer {KEY}"}
    with httpx.stream("POST", base + path, json=body, headers=headers, timeout=120) as answer:
        events = [line[6:] for line in answer.iter_lines() if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(event) for event in events[:-1]]
    return [_shape(chunks[0]), _shape(chunks[-2]), _shape(chunks[-1])]


def _calls(base: str) -> dict[str, Callable[[], Any]]:
    """Each call, and what is compared of its answer."""
    client = openai.OpenAI(base_url=base + "/v1", api_key=KEY)
    keyed = {"Authorization": f"Bearer {KEY}"}

    def answered(method: str, path: str, headers: dict[str, str] | None = None, **kw: Any) -> Any:
        """The status, and the body's shape (its text where it is not JSON)."""
        answer = httpx.request(
            method, base + path, headers=keyed if headers is None else headers, timeout=120, **kw
        )
        if "json" not in answer.headers.get("content-type", ""):
            return answer.status_code
        return answer.status_code, _shape(answer.json())

    def chat_body(**body: Any) -> Callable[[], Any]:
        return lambda: answered(
            "POST", "/v1/chat/completions", json={"model": "tiny", "messages": HELLO, **body}
        )

    def chat(**body: Any) -> Any:
        return client.chat.completions.create(model="tiny", messages=HELLO, **body)

    def cut() -> Any:
        # A random model may end at once: vLLM's own `ignore_eos` keeps it going.
        answer = chat(max_tokens=3, extra_body={"ignore_eos": True})
        return answer.choices[0].finish_reason, answer.usage.completion_tokens

    stream = {"stream": True, "stream_options": {"include_usage": True}, "max_tokens": 3}
    load, unload = "/v1/load_lora_adapter", "/v1/unload_lora_adapter"
    extra = {"lora_name": "extra", "lora_path": LORA["extra"]}
    return {
        "GET /health": lambda: answered("GET", "/health"),
        "GET /health, no key": lambda: answered("GET", "/health", headers={}),
        "GET /metrics": lambda: answered("GET", "/metrics", headers={}),
        "models.list": lambda: [(m.id, m.object, m.owned_by) for m in client.models.list()],
        "GET /v1/models": lambda: answered("GET", "/v1/models"),
        "chat, no key": lambda: answered(
            "POST", "/v1/chat/completions", headers={}, json={"model": "tiny", "messages": HELLO}
        ),
        "chat, a wrong key": lambda: answered(
            "POST",
            "/v1/chat/completions",
            headers={"Authorization": "Bearer nope"},
            json={"model": "tiny", "messages": HELLO},
        ),
        "chat, a model nobody serves": chat_body(model="gpt-4o"),
        "chat, a body that is not JSON": lambda: answered(
            "POST",
            "/v1/chat/completions",
            headers={**keyed, "Content-Type": "application/json"},
            content=b"{no",
        ),
        "chat, a body that is a list": lambda: answered("POST", "/v1/chat/completions", json=[1]),
        "chat, no messages": lambda: answered(
            "POST", "/v1/chat/completions", json={"model": "tiny"}
        ),
        "chat, n: 0": chat_body(n=0),
        "chat, max_tokens: 0": chat_body(max_tokens=0),
        "chat, stop: 5": chat_body(stop=5),
        "chat, stream_options without stream": chat_body(stream_options={"include_usage": True}),
        "chat, tools: 5": chat_body(tools=5),
        "chat, tool_choice naming no tool": chat_body(
            tools=TOOLS, tool_choice={"type": "function", "function": {"name": "other"}}
        ),
        "chat, tools auto without a parser": chat_body(tools=TOOLS, tool_choice="auto"),
        "chat": chat_body(max_tokens=3),
        "chat, n: 2": lambda: len(chat(n=2, max_tokens=4).choices),
        "chat, max_tokens: 3": cut,
        "chat, logprobs": chat_body(max_tokens=1, logprobs=True, top_logprobs=1),
        "chat, a stream with usage": lambda: _stream_shapes(
            base, "/v1/chat/completions", {"model": "tiny", "messages": HELLO, **stream}
        ),
        "completions": lambda: answered(
            "POST", "/v1/completions", json={"model": "tiny", "prompt": "Once", "max_tokens": 2}
        ),
        "completions, no prompt": lambda: answered(
            "POST", "/v1/completions", json={"model": "tiny"}
        ),
        "completions, SDK": lambda: (
            client.completions.create(model="tiny", prompt="Once", max_tokens=3).object
        ),
        "chat, an adapter": chat_body(model="sql", max_tokens=3),
        "load an adapter": lambda: answered("POST", load, json=extra),
        "load it again": lambda: answered("POST", load, json=extra),
        "chat, the adapter loaded": chat_body(model="extra", max_tokens=3),
        "models, with it": lambda: sorted((m.id, m.parent) for m in client.models.list()),
        "unload it": lambda: answered("POST", unload, json={"lora_name": "extra"}),
        "unload it again": lambda: answered("POST", unload, json={"lora_name": "extra"}),
        "chat, the adapter unloaded": chat_body(model="extra", max_tokens=3),
        "load, no path": lambda: answered("POST", load, json={"lora_name": "x"}),
        "load, a path with no adapter": lambda: answered(
            "POST", load, json={"lora_name": "x", "lora_path": LORA["sql"] + "-not-there"}
        ),
        "load, a served model's name": lambda: answered(
            "POST", load, json={"lora_name": "tiny", "lora_path": LORA["extra"]}
        ),
    }


DIFFERS: dict[str, str] = {}
"""Calls the sim answers otherwise than vLLM, on purpose, and why (none yet)."""


@pytest.fixture(scope="module")
def answered(real_vllm: str, sim: str) -> dict[str, tuple[Any, Any]]:
    real, simulated = _calls(real_vllm), _calls(sim)
    found = {}
    for name in real:
        found[name] = (_safely(real[name]), _safely(simulated[name]))
    return found


def _safely(call: Callable[[], Any]) -> Any:
    try:
        value = call()
    except Exception as exc:  # an SDK error is an answer too: its class is what is compared
        return f"raised {type(exc).__name__}"
    return value


def test_the_sim_answers_every_call_as_the_real_vllm_does(answered: dict[str, tuple[Any, Any]]):
    for name, (real, simulated) in answered.items():
        print(f"{name:30} vLLM: {real!s:.90}\n{'':30} sim:  {simulated!s:.90}")
    differ = {
        name: pair for name, pair in answered.items() if pair[0] != pair[1] and name not in DIFFERS
    }
    assert differ == {}, "the sim answers these otherwise than vLLM"


def _families(base: str) -> dict[str, str]:
    """Each metric family `/metrics` declares (`# TYPE name kind`), with its kind."""
    text = httpx.get(base + "/metrics", timeout=60).text
    return {
        parts[2]: parts[3]
        for parts in (line.split() for line in text.splitlines() if line.startswith("# TYPE "))
        if len(parts) == 4
    }


def test_the_metrics_the_product_reads_are_in_the_real_vllm_and_the_sim_invents_none(
    real_vllm: str, sim: str
):
    from llmgw_core.engines.signals import IN_FLIGHT, KV_USE, gauge_sums

    real, simulated = _families(real_vllm), _families(sim)
    read = {*IN_FLIGHT["vllm"], KV_USE["vllm"][0]}  # what keep, scale and the drain read
    assert {name: real.get(name) for name in read} == dict.fromkeys(read, "gauge")
    assert {name: simulated.get(name) for name in read} == dict.fromkeys(read, "gauge")
    invented = {name for name in simulated if name.startswith("vllm:")} - set(real)
    assert invented == set(), "families the sim exports that vLLM 0.32 does not"
    idle = gauge_sums(httpx.get(real_vllm + "/metrics", timeout=60).text, IN_FLIGHT["vllm"])
    assert idle == dict.fromkeys(IN_FLIGHT["vllm"], 0.0)
    vllm_families = sorted(name for name in real if name.startswith("vllm:"))
    print(f"vLLM 0.32: {len(vllm_families)} vllm: families; the sim: {len(simulated)}")


START_UP = {
    "weights loaded": r"Loading weights took [\d.]+ seconds",
    "the KV cache and the concurrency it holds": r"(GPU|CPU) KV cache size: ([\d,]+) tokens, "
    r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x",
    "the engine's init": r"init engine \(profile, create kv cache, warmup model\) took [\d.]+ s",
    "its server": r"Starting vLLM server on https?://127\.0\.0\.1:\d+",
    "ready": r"Application startup complete\.",
}
"""The start-up lines an operator reads in a replica's log, as vLLM 0.32 prints them."""


def test_the_sim_prints_the_start_up_lines_vllm_prints_and_the_kv_figure_is_our_rule(
    real_vllm: str, sim: str
):
    import json
    import re

    from llmgw_core.memory.kv_vllm import kv_token_bytes
    from llmgw_core.model.shape import shape_from_config

    logs = {name: LOGS[name].read_text(errors="replace") for name in ("vllm", "sim")}
    missing = [
        f"{name} in {engine}'s"
        for engine, text in logs.items()
        for name, pattern in START_UP.items()
        if re.search(pattern, text) is None
    ]
    assert missing == []
    # vLLM on a CPU sizes its KV cache from VLLM_CPU_KVCACHE_SPACE (1 GiB here): the tokens it
    # reports are that space over what a token caches in every layer, by our KV rule.
    device, tokens, context, times = re.search(
        START_UP["the KV cache and the concurrency it holds"], logs["vllm"]
    ).groups()
    config = json.loads((LOGS["model"] / "config.json").read_text())
    shape = shape_from_config(config)
    per_token = kv_token_bytes(shape, 2) * shape.num_layers  # bfloat16: 2 bytes
    assert device == "CPU"
    assert int(tokens.replace(",", "")) == 2**30 // per_token
    assert float(times) == round(int(tokens.replace(",", "")) / int(context), 2)
    print(
        f"vLLM 0.32 CPU: {tokens} KV tokens, {times}x at {context}; our rule: {2**30 // per_token:,}"
    )
