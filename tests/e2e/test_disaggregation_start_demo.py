"""A disaggregated service started for real on the demo fleet: both sides' cards claimed, each
worker a replica that keeps its side, one service that `stop` ends whole, and the gateway in
prefill/decode mode answering the OpenAI SDK (the prefill worker hands the prompt's KV to a
decode worker, which takes the time the rails' speed implies).

One demo fleet for the module (the steps run in-process against the real agents over real
SSH; the engines are the sim); the tests run in order and share what they started.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from ports import free_port
from serve_demo_harness import Demo, step

from llmgw_core.serve.replicas import find_replica

pytestmark = pytest.mark.slow

LLAMA_70B = "catalog:meta-llama/Llama-3.3-70B-Instruct"
SERVED = "meta-llama/Llama-3.3-70B-Instruct"
SPLIT = {"prefill": {"replicas": 2}, "decode": {"replicas": 2}}
H100_PAIR = {"model": LLAMA_70B, "context": 16384, "engine": "vllm", "gpu_class": "h100-80g"}
H100_PAIR["gpus"] = 4
GATEWAY_PORT = free_port()


PREFILL_S = "0.0005"
"""The sim's seconds a prompt word (its engines inherit it): a prompt of 800 words is read in
0.4 s, long enough for prompts to wait at a prefill worker under load."""


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    # Read by the loopback nodes at each agent's start (a reconnect starts one again): set for
    # as long as the module's demo runs.
    before = os.environ.get("LLMGW_SIM_PREFILL_S")
    os.environ["LLMGW_SIM_PREFILL_S"] = PREFILL_S
    try:
        running = Demo(tmp_path_factory.mktemp("split-demo"))
        try:
            yield running
        finally:
            running.close()
    finally:
        if before is None:
            os.environ.pop("LLMGW_SIM_PREFILL_S")
        else:
            os.environ["LLMGW_SIM_PREFILL_S"] = before


def _replicas(demo: Demo) -> list[dict]:
    return [
        r
        for r in demo.step("replicas").result["replicas"]
        if r["phase"] not in ("stopped", "failed")
    ]


def _kv_lines(demo: Demo, replica: str) -> list[str]:
    lines = demo.step("logs", replica=replica, lines=200).result["lines"]
    return [line for line in lines if "KV transfer: received" in line]


def _kv_speeds(demo: Demo, *replicas: str) -> list[float]:
    """The GB/s of every KV hand-off the decode workers `replicas` logged."""
    lines = [line for name in replicas for line in _kv_lines(demo, name)]
    return [float(re.search(r"\(([0-9.]+) GB/s\)", line).group(1)) for line in lines]


def _ask_through(
    demo: Demo, gateway_name: str, port: int, *, stream: bool = False, model: str = SERVED
) -> str:
    """One chat through the gateway with the OpenAI SDK; the answer's text."""
    import openai

    from llmgw_core.gateway.run import find_gateway
    from llmgw_core.serve.http import EngineReach

    reach = EngineReach(demo.fleet)
    try:
        gateway = demo.loop.run(find_gateway(demo.fleet, gateway_name))
        tunnel = demo.loop.run(reach.tunnel(gateway.node, port))
        http = tunnel.sync_client(timeout=60)
        client = openai.OpenAI(base_url=tunnel.url + "/v1", api_key="unused", http_client=http)
        hello = [{"role": "user", "content": "Say hello. " * 400}]
        if not stream:
            answer = client.chat.completions.create(model=model, messages=hello)
            assert answer.usage.completion_tokens > 1  # the decode side's, not the prefill's
            return answer.choices[0].message.content
        chunks = list(
            client.chat.completions.create(
                model=model, messages=hello, stream=True, stream_options={"include_usage": True}
            )
        )
        assert chunks[-1].usage.completion_tokens > 1
        return "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    finally:
        demo.loop.run(reach.close())


def test_apply_starts_both_sides_as_replicas_that_keep_their_side(demo: Demo):
    service = {"name": "chat-pd", **H100_PAIR, "disaggregation": SPLIT}
    applied = demo.step(
        "apply", service={**service, "gateway": {"name": "pd", "port": GATEWAY_PORT}}
    )
    assert applied.ok, applied.error
    actions = [
        (a["action"], a.get("replica") or a.get("gateway")) for a in applied.result["actions"]
    ]
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
    # The replica page's proof, read from the running workers' own lines: no fabric test has
    # run yet, so all eight rails are named.
    kv = live["chat-pd-decode-1"]["shards"][0]["transport"]["kv"]
    assert kv["label"] == "KV over mlx5_0..7 (IB)", kv
    # Both sides' cards are claimed, each worker on four of its own.
    claimed = demo.claims()
    assert sum(len(cards) for cards in claimed.values()) == 16, claimed

    again = demo.step("apply", service=service)
    assert again.ok and again.result["actions"] == [], again.result


def test_the_gateway_sends_each_request_to_a_prefill_then_a_decode_worker(demo: Demo):
    from llmgw_core.gateway.run import find_gateway, router_workers
    from llmgw_core.serve.http import EngineReach

    reach = EngineReach(demo.fleet)
    try:
        gateway = demo.loop.run(find_gateway(demo.fleet, "pd"))
        workers = demo.loop.run(router_workers(reach, gateway))
    finally:
        demo.loop.run(reach.close())
    assert sorted(w["role"] for w in workers.values()) == ["decode", "decode", "prefill", "prefill"]
    assert SERVED in _ask_through(demo, "pd", GATEWAY_PORT)
    assert SERVED in _ask_through(demo, "pd", GATEWAY_PORT, stream=True)
    speeds = _kv_speeds(demo, "chat-pd-decode-1", "chat-pd-decode-2")
    assert len(speeds) == 2, speeds  # each request's KV reached a decode worker once
    # No fabric test has run: the degraded mlx5_5 is among the rails, and every transfer
    # goes at its pace (8 rails × 240 Gb/s), not the healthy rails' 388.8 Gb/s.
    assert speeds == [240.0, 240.0], speeds
    print(f"KV handed to the decode side over all 8 rails, mlx5_5 degraded: {speeds} GB/s")
    # The replica page's per-request proof: each decode worker that received a hand-off shows
    # its rate beside the KV's path, read from its own hand-off lines.
    shown = [
        r["shards"][0]["transport"]["kv"]
        for r in _replicas(demo)
        if r["role"] == "decode" and _kv_lines(demo, r["name"])
    ]
    assert shown and all(
        kv["label"] == "KV over mlx5_0..7 (IB), 240.0 GB/s per request" for kv in shown
    ), shown
    assert sum(kv["per_request"]["requests"] for kv in shown) == 2, shown


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


def test_after_a_fabric_test_the_degraded_rail_is_left_out_and_the_kv_moves_faster(demo: Demo):
    demo.step("fabric-test", nodes=["h100-a-01", "h100-a-02"], duration_s=1)  # mlx5_5 fails
    service = {"name": "chat-pd", **H100_PAIR, "disaggregation": SPLIT}
    applied = demo.step("apply", service=service)
    assert applied.ok, applied.error
    _ask_through(demo, "pd", GATEWAY_PORT)
    live = [r["name"] for r in _replicas(demo) if r["role"] == "decode"]
    (speed,) = _kv_speeds(demo, *live)
    assert speed == pytest.approx(7 * 388.8 / 8, rel=0.01)  # seven healthy rails
    print(f"KV handed over the 7 rails that passed: {speed} GB/s (240.0 with mlx5_5 in)")
    demo.step("stop", service="chat-pd")


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
    assert SERVED in _ask_through(demo, "pd", GATEWAY_PORT)
    (speed,) = _kv_speeds(demo, "rack-pd-decode-1")
    assert speed == 450.0  # card to card over NVLink
    demo.step("stop", service="rack-pd")
    demo.step("stop", gateway="pd")
    assert _replicas(demo) == []


def test_a_roll_of_the_decode_side_under_a_bench_fails_no_request(demo: Demo):
    """A change to the decode side alone (its layout) replaces the decode workers one by one,
    each new one on the KV's path of the one it replaces, while the prefill workers serve on;
    a bench through the gateway meanwhile gets every answer."""
    port = free_port()
    service = {
        "name": "small-pd",
        "model": "catalog:meta-llama/Llama-3.1-8B-Instruct",
        "context": 8192,
        "engine": "vllm",
        "gpu_class": "h100-80g",
        "gpus": 1,
        "drain_s": 30,
        "disaggregation": {"prefill": {"replicas": 2}, "decode": {"replicas": 2}},
        "gateway": {"name": "small", "port": port},
    }
    assert demo.step("apply", service=service).ok
    changed = {
        **service,
        "disaggregation": {
            "prefill": {"replicas": 2},
            "decode": {"replicas": 2, "layout": {"gpus": 2}},
        },
    }

    async def roll_while_benched() -> tuple:
        bench = asyncio.ensure_future(
            step(demo.ctx, "bench", gateway="small", duration_s=12, concurrency=4, max_tokens=16)
        )
        await asyncio.sleep(2)  # the bench is sending
        rolled = await step(demo.ctx, "apply", service=changed)
        return rolled, await bench

    rolled, benched = demo.loop.run(roll_while_benched(), 300)
    assert rolled.ok, rolled.error
    # Oldest first (apply's rule); the two decode workers were started together, so either.
    assert sorted((a["action"], a["replica"]) for a in rolled.result["actions"]) == [
        ("replace", "small-pd-decode-1"),
        ("replace", "small-pd-decode-2"),
    ]
    figures = benched.result
    print(
        f"decode roll under load: {[d['seconds'] for d in rolled.result['done']]} s per replace, "
        f"{figures['requests']} requests, {figures['failed']} failed"
    )
    assert figures["failed"] == 0, figures.get("errors")
    assert figures["requests"] > 20
    live = {r["name"]: r for r in _replicas(demo)}
    assert sorted(live) == [
        "small-pd-decode-3",
        "small-pd-decode-4",
        "small-pd-prefill-1",
        "small-pd-prefill-2",
    ]
    assert {r["role"] for n, r in live.items() if "decode" in n} == {"decode"}
    # Each side keeps its own batch shape through the roll: a new decode worker as many whole
    # contexts as its KV holds and a short step, the prefill workers few prompts and long steps.
    rolled_view = demo.loop.run(find_replica(demo.fleet, "small-pd-decode-3"))
    seqs = int(rolled_view.spec["request"]["concurrency"])
    assert seqs > 16
    assert rolled_view.spec["engine_args"] == {"max_num_batched_tokens": str(max(seqs, 256))}
    prefill_view = demo.loop.run(find_replica(demo.fleet, "small-pd-prefill-1"))
    assert int(prefill_view.spec["request"]["concurrency"]) == 16
    assert prefill_view.spec["engine_args"] == {"max_num_batched_tokens": "8192"}
    assert demo.step("apply", service=changed).result["actions"] == []


def test_a_decode_worker_that_died_is_healed_as_a_decode_worker(demo: Demo):
    """A heal places the worker again on its side and its KV's path, with its connector's
    flags: never as an ordinary replica that would take prompts it has no KV for."""
    from llmgw_core.serve.heal import heal
    from llmgw_core.serve.http import EngineReach

    (worker,) = [r for r in _replicas(demo) if r["name"] == "small-pd-decode-3"]
    node = worker["shards"][0]["node"]
    listed = demo.loop.run(demo.fleet.request(node, "shard.list"))["shards"]
    (shard,) = [
        s for s in listed if s["replica"] == "small-pd-decode-3" and s["phase"] == "running"
    ]
    os.kill(shard["main_pid"], signal.SIGKILL)
    reach = EngineReach(demo.fleet)
    try:
        healed: list[dict] = []
        for _ in range(40):  # until the agent has seen it end
            healed = demo.loop.run(heal(demo.fleet, reach, grace_s=0))
            if healed:
                break
            time.sleep(0.25)
    finally:
        demo.loop.run(reach.close())
    assert [(h["name"], h["role"], h["outcome"]) for h in healed] == [
        ("small-pd-decode-3", "decode", "ready")
    ], healed
    (again,) = [r for r in _replicas(demo) if r["name"] == "small-pd-decode-3"]
    assert again["role"] == "decode" and again["phase"] == "ready"
    view = demo.loop.run(find_replica(demo.fleet, "small-pd-decode-3"))
    assert view.spec["pd"]["role"] == "decode" and view.spec["pd"]["connector"] == "nixl"
    assert int(view.spec["heals"]) == 1
    demo.step("stop", service="small-pd")
    demo.step("stop", gateway="small")


def test_keep_scales_the_prefill_side_on_its_waiting_prompts_and_leaves_decode_be(demo: Demo):
    """Long prompts queue at the one prefill worker (one sequence at a time): `keep` adds a
    prefill worker on that side's signal, while the decode side, whose KV stays low, keeps its
    one worker."""
    import httpx

    from llmgw_core.gateway.run import find_gateway
    from llmgw_core.serve.http import EngineReach

    port = free_port()
    service = {
        "name": "keep-pd",
        "model": "catalog:meta-llama/Llama-3.1-8B-Instruct",
        "context": 8192,
        "engine": "vllm",
        "gpu_class": "h100-80g",
        "gpus": 1,
        "disaggregation": {
            "prefill": {
                "replicas": 1,
                "scale": {"max": 2, "target_waiting": 0.5, "scale_up_after_s": 0},
            },
            "decode": {
                "replicas": 1,
                "scale": {"max": 2, "target_kv": 0.99, "scale_up_after_s": 0},
            },
        },
        "gateway": {"name": "keep", "port": port},
    }
    assert demo.step("apply", service=service).ok
    reach = EngineReach(demo.fleet)
    try:
        gateway = demo.loop.run(find_gateway(demo.fleet, "keep"))
        tunnel = demo.loop.run(reach.tunnel(gateway.node, port))

        async def load_while_kept() -> tuple:
            body = {"model": "meta-llama/Llama-3.1-8B-Instruct", "prompt": "w " * 800}
            ends = time.monotonic() + 6
            answered: list[int] = []

            async def client(http: httpx.AsyncClient) -> None:
                while time.monotonic() < ends:
                    answered.append((await http.post("/v1/completions", json=body)).status_code)

            async with httpx.AsyncClient(base_url=tunnel.url, timeout=60) as http:
                kept = asyncio.ensure_future(
                    step(demo.ctx, "keep", service=service, duration_s=7, interval_s=0.5)
                )
                await asyncio.gather(*(client(http) for _ in range(6)))
                return await kept, answered

        kept, answered = demo.loop.run(load_while_kept(), 120)
    finally:
        demo.loop.run(reach.close())
    assert kept.ok, kept.error
    events = [(e["action"], e["replica"]) for e in kept.result["events"]]
    assert ("scale-out", "keep-pd-prefill-2") in events, kept.result["events"]
    assert not any("decode" in replica for _, replica in events), events
    assert set(answered) == {200}
    live = sorted(r["name"] for r in _replicas(demo) if r["service"] == "keep-pd")
    assert live == ["keep-pd-decode-1", "keep-pd-prefill-1", "keep-pd-prefill-2"]
    print(f"keep: {kept.result['events']}")
    demo.step("stop", service="keep-pd")
    demo.step("stop", gateway="keep")


def test_an_sglang_split_is_routed_the_sglang_router_way_with_a_bootstrap_room(demo: Demo):
    """SGLang's workers get each request at once, the prefill worker's bootstrap port and a room
    added: the gateway joins the prefill workers with their port, and the decode worker waits
    for its room's KV over the rails (the sim's log line per hand-off says so)."""
    from llmgw_core.gateway.run import find_gateway, router_workers
    from llmgw_core.serve.http import EngineReach

    port = free_port()
    service = {
        "name": "sgl-pd",
        "model": "catalog:meta-llama/Llama-3.1-8B-Instruct",
        "context": 8192,
        "engine": "sglang",
        "gpu_class": "h100-80g",
        "gpus": 1,
        "disaggregation": {"prefill": {"replicas": 1}, "decode": {"replicas": 1}},
        "gateway": {"name": "sgl", "port": port},
    }
    applied = demo.step("apply", service=service)
    assert applied.ok, applied.error
    try:
        reach = EngineReach(demo.fleet)
        try:
            gateway = demo.loop.run(find_gateway(demo.fleet, "sgl"))
            workers = demo.loop.run(router_workers(reach, gateway))
        finally:
            demo.loop.run(reach.close())
        assert sorted(((w["role"], w["bootstrap_port"]) for w in workers.values()), key=str) == [
            ("decode", None),
            ("prefill", 8998),
        ]
        small = "meta-llama/Llama-3.1-8B-Instruct"
        assert small in _ask_through(demo, "sgl", port, model=small)
        assert small in _ask_through(demo, "sgl", port, stream=True, model=small)
        handed = _kv_lines(demo, "sgl-pd-decode-1")
        assert len(handed) == 2, handed  # each request's room filled and taken once
        kv = next(r for r in _replicas(demo) if r["name"] == "sgl-pd-decode-1")
        kv = kv["shards"][0]["transport"]["kv"]
        assert kv["per_request"]["requests"] == 2 and "GB/s per request" in kv["label"], kv
        print(f"SGLang split through the gateway, bootstrap rooms: {kv['label']}")
    finally:
        demo.step("stop", service="sgl-pd")
        demo.step("stop", gateway="sgl")
