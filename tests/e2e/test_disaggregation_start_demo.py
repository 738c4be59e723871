"""A disaggregated service started for real on the demo fleet: both sides' cards claimed, each
worker a replica that keeps its side, one service that `stop` ends whole, and the gateway in
prefill/decode mode answering the OpenAI SDK (the prefill worker hands the prompt's KV to a
decode worker, which takes the time the rails' speed implies).

One demo fleet for the module (the steps run in-process against the real agents over real
SSH; the engines are the sim); the tests run in order and share what they started.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from ports import free_port
from serve_demo_harness import Demo

pytestmark = pytest.mark.slow

LLAMA_70B = "catalog:meta-llama/Llama-3.3-70B-Instruct"
SERVED = "meta-llama/Llama-3.3-70B-Instruct"
SPLIT = {"prefill": {"replicas": 2}, "decode": {"replicas": 2}}
H100_PAIR = {"model": LLAMA_70B, "context": 16384, "engine": "vllm", "gpu_class": "h100-80g"}
H100_PAIR["gpus"] = 4
GATEWAY_PORT = free_port()


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    running = Demo(tmp_path_factory.mktemp("split-demo"))
    try:
        yield running
    finally:
        running.close()


def _replicas(demo: Demo) -> list[dict]:
    return [
        r
        for r in demo.step("replicas").result["replicas"]
        if r["phase"] not in ("stopped", "failed")
    ]


def _kv_lines(demo: Demo, replica: str) -> list[str]:
    lines = demo.step("logs", replica=replica, lines=200).result["lines"]
    return [line for line in lines if "KV transfer: received" in line]


def test_apply_starts_both_sides_as_replicas_that_keep_their_side(demo: Demo):
    service = {"name": "chat-pd", **H100_PAIR, "disaggregation": SPLIT}
    applied = demo.step("apply", service={**service, "gateway": {"name": "pd", "port": GATEWAY_PORT}})
    assert applied.ok, applied.error
    actions = [(a["action"], a.get("replica") or a.get("gateway")) for a in applied.result["actions"]]
    assert actions == [("start", "chat-pd"), ("start", "pd")]
    live = {r["name"]: r for r in _replicas(demo)}
    assert sorted(live) == [
        "chat-pd-decode-1",
        "chat-pd-decode-2",
        "chat-pd-prefill-1",
        "chat-pd-prefill-2",
    ]
    assert {name: r["role"] for name, r in live.items()} == {
        name: name.split("-")[2] for name in live
    }
    assert {r["service"] for r in live.values()} == {"chat-pd"}
    assert all(r["phase"] == "ready" for r in live.values())
    # Both sides' cards are claimed, each worker on four of its own.
    claimed = demo.claims()
    assert sum(len(cards) for cards in claimed.values()) == 16, claimed

    again = demo.step("apply", service=service)
    assert again.ok and again.result["actions"] == [], again.result


def test_the_gateway_sends_each_request_to_a_prefill_then_a_decode_worker(demo: Demo):
    import openai

    from llmgw_core.gateway.run import find_gateway, router_workers
    from llmgw_core.serve.http import EngineReach

    reach = EngineReach(demo.fleet)
    try:
        gateway = demo.loop.run(find_gateway(demo.fleet, "pd"))
        workers = demo.loop.run(router_workers(reach, gateway))
        assert sorted(w["role"] for w in workers.values()) == [
            "decode",
            "decode",
            "prefill",
            "prefill",
        ]
        tunnel = demo.loop.run(reach.tunnel(gateway.node, GATEWAY_PORT))
        http = tunnel.sync_client(timeout=60)
        client = openai.OpenAI(base_url=tunnel.url + "/v1", api_key="unused", http_client=http)
        answer = client.chat.completions.create(
            model=SERVED, messages=[{"role": "user", "content": "Say hello. " * 400}]
        )
        assert SERVED in answer.choices[0].message.content
        assert answer.usage.completion_tokens > 1  # the decode side's answer, not the prefill's
        stream = client.chat.completions.create(
            model=SERVED,
            messages=[{"role": "user", "content": "Hi"}],
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = list(stream)
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert SERVED in text and chunks[-1].usage.completion_tokens > 1
    finally:
        demo.loop.run(reach.close())
    received = _kv_lines(demo, "chat-pd-decode-1") + _kv_lines(demo, "chat-pd-decode-2")
    assert len(received) == 2, received  # each request's KV reached a decode worker once
    speeds = [float(re.search(r"\(([0-9.]+) GB/s\)", line).group(1)) for line in received]
    print(f"KV handed to the decode side at {speeds} GB/s")


def test_stop_of_the_service_stops_both_sides_and_frees_every_card(demo: Demo):
    stopped = demo.step("stop", service="chat-pd")
    assert stopped.ok, stopped.error
    assert sorted(stopped.result["stopped"]) == [
        "chat-pd-decode-1",
        "chat-pd-decode-2",
        "chat-pd-prefill-1",
        "chat-pd-prefill-2",
    ]
    assert _replicas(demo) == []
    assert sum(len(cards) for cards in demo.claims().values()) == 0
    demo.step("stop", gateway="pd")


def test_serve_starts_a_split_inside_the_nvl72_rack_over_nvlink(demo: Demo, tmp_path: Path):
    served = demo.step(
        "serve",
        name="rack-pd",
        model=LLAMA_70B,
        context=16384,
        engine="vllm",
        gpu_class="gb200-186g",
        gpus=4,
        disaggregation={"prefill": {"replicas": 1}, "decode": {"replicas": 1}},
    )
    assert served.ok, served.error
    assert served.result["disaggregation"]["transport"] == "nvlink"
    assert [(w["name"], w["phase"]) for w in served.result["workers"]] == [
        ("rack-pd-prefill-1", "ready"),
        ("rack-pd-decode-1", "ready"),
    ]
    demo.step("stop", service="rack-pd")
    assert _replicas(demo) == []
