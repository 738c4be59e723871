"""The gateway in front of two real llama.cpp engines, over real SSH.

This machine is node `here` behind asyncssh's server on loopback; its real
agent starts two llama-cpp-python servers of the tiny GGUF and the real
`vllm-router` in front of them, each as a shard. llama-cpp-python's server
has no `/health`, so the gateway checks `/v1/models` instead
(`health_path: /v1/models`), which it answers once its model is loaded.

One scenario, in the order a person would live it: both engines get
traffic; one engine is SIGKILLed and requests keep succeeding through the
other; the worker list follows a stop and a serve. Skips, saying what to
install, where llama-cpp-python's server or vllm-router is absent.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from serve_demo_harness import FleetContext, step
from test_llamacpp_real import NODE, free_port, needs_llama_cpp, this_machine_as_a_node
from tiny_gguf import REPLY, write_tiny_llama_gguf

from llmgw_core.errors import LlmgwError
from llmgw_core.fleet.demo import demo_router
from llmgw_core.fleet.fleet import Fleet

pytestmark = [
    needs_llama_cpp,
    pytest.mark.skipif(demo_router() is None, reason="vllm-router is not installed (test extra)"),
]

ASKS_AFTER_KILL = 8


def _serve(ctx: FleetContext, model_path: Path, name: str) -> dict[str, Any]:
    """Serve the tiny GGUF with llama.cpp as replica `name`; its result."""
    return _ok(
        step(
            ctx,
            "serve",
            model=str(model_path),
            engine="llama.cpp",
            context=256,
            name=name,
            timeout=120,
        )
    )


async def _ok(pending: Any) -> dict[str, Any]:
    outcome = await pending
    assert outcome.ok, outcome.error
    return outcome.result


async def _answer(ctx: FleetContext, prompt: str) -> str:
    """The text `ask` got through the gateway, or the sentence it failed with."""
    try:
        outcome = await step(ctx, "ask", gateway="front", prompt=prompt, max_tokens=16)
    except LlmgwError as failed:
        return f"failed: {failed.sentence()}"
    return outcome.result["text"].strip() if outcome.ok else f"failed: {outcome.error}"


async def _engine_pid(fleet: Fleet, replica: str) -> int:
    """The running engine process of `replica` on this machine."""
    listed = await fleet.request(NODE, "shard.list")
    (shard,) = [s for s in listed["shards"] if s["replica"] == replica and s["phase"] == "running"]
    return int(shard["main_pid"])


async def _scenario(tmp_path: Path) -> dict[str, Any]:
    model_dir = tmp_path / "models"
    model_path = write_tiny_llama_gguf(model_dir / "tiny-llama" / "tiny.gguf")
    seen: dict[str, Any] = {}
    async with this_machine_as_a_node(tmp_path, model_dir) as fleet:
        ctx = FleetContext(fleet, tmp_path)
        try:
            began = time.monotonic()
            await _serve(ctx, model_path, "tiny-a")
            await _serve(ctx, model_path, "tiny-b")
            seen["serve_two_s"] = time.monotonic() - began
            began = time.monotonic()
            seen["gateway"] = await _ok(
                step(
                    ctx,
                    "gateway",
                    name="front",
                    node=NODE,
                    port=free_port(),
                    health_path="/v1/models",
                )
            )
            seen["gateway_s"] = time.monotonic() - began
            seen["bench"] = await _ok(
                step(ctx, "bench", gateway="front", requests=20, concurrency=2, max_tokens=16)
            )
            os.kill(await _engine_pid(fleet, "tiny-a"), signal.SIGKILL)
            killed_at = time.monotonic()
            seen["after_kill"] = [
                await _answer(ctx, f"question {i}") for i in range(ASKS_AFTER_KILL)
            ]
            seen["after_kill_s"] = time.monotonic() - killed_at
            seen["stopped"] = await _ok(step(ctx, "stop", replica="tiny-a"))
            seen["served_again"] = await _serve(ctx, model_path, "tiny-c")
            seen["ask_c"] = await _ok(
                step(ctx, "ask", gateway="front", prompt="Who are you?", max_tokens=16)
            )
        finally:
            # Whatever happened, nothing this test started keeps running.
            with contextlib.suppress(LlmgwError):
                await step(ctx, "stop", gateway="front")
            for name in ("tiny-a", "tiny-b", "tiny-c"):
                with contextlib.suppress(LlmgwError):
                    await step(ctx, "stop", replica=name)
            await ctx.close()
        listed = await fleet.request(NODE, "shard.list")
        seen["left"] = [s for s in listed["shards"] if s["phase"] == "running"]
    return seen


def test_two_llama_cpp_engines_behind_the_gateway_share_traffic_survive_a_kill_and_follow(
    tmp_path: Path,
):
    seen = asyncio.run(_scenario(tmp_path))

    gateway = seen["gateway"]
    assert gateway["node"] == NODE and gateway["adopted"] is False
    assert sorted(w["replica"] for w in gateway["workers"]) == ["tiny-a", "tiny-b"]
    # Two replicas of one local file serve one model (named from the file): one pool.
    assert {w["model"] for w in gateway["workers"]} == {"tiny"}
    split = seen["bench"]["split"]
    assert len(split) == 2 and sum(split.values()) == 20, split
    assert all(taken >= 5 for taken in split.values()), split
    after_kill = seen["after_kill"]
    assert after_kill == [REPLY] * ASKS_AFTER_KILL
    (follow,) = seen["stopped"]["gateways"]
    assert len(follow["removed"]) <= 1
    assert [w["replica"] for w in follow["workers"]] == ["tiny-b"]
    (follow,) = seen["served_again"]["gateways"]
    assert len(follow["added"]) == 1
    assert sorted(w["replica"] for w in follow["workers"]) == ["tiny-b", "tiny-c"]
    assert seen["ask_c"]["text"].strip() == REPLY
    assert seen["left"] == []
    print(
        f"two llama.cpp replicas served in {seen['serve_two_s']:.1f} s, gateway up in "
        f"{seen['gateway_s']:.1f} s; {seen['bench']['requests_per_s']} requests/s, split {split}; "
        f"{ASKS_AFTER_KILL} asks after the kill in {seen['after_kill_s']:.1f} s"
    )
