"""The gateway in front of two real llama.cpp engines, over real SSH.

This machine is node `here` behind asyncssh's server on loopback; its real
agent starts two llama-cpp-python servers of the tiny GGUF and the real
`vllm-router` in front of them, each as a shard, with `health_path:
/v1/models` (llama-cpp-python's server has no `/health`).

What it shows today is what blocks that: vllm-router 0.1.17 probes workers
added through its `/workers` API on `/health` whatever
`--health-check-endpoint` says, so within a few seconds it holds both
llama.cpp workers unhealthy and refuses every request (503). The test
pins that down (the engines' own logs show the `/health` 404s) so that a
router that honours the path turns it red and the traffic, kill and
follow checks can take its place. Skips, saying what to install, where
llama-cpp-python's server or vllm-router is absent.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from serve_demo_harness import FleetContext, step
from test_llamacpp_real import (
    NODE,
    engine_url,
    free_port,
    log_lines,
    needs_llama_cpp,
    this_machine_as_a_node,
)
from tiny_gguf import write_tiny_llama_gguf

from llmgw_core.errors import LlmgwError
from llmgw_core.fleet.demo import demo_router

pytestmark = [
    needs_llama_cpp,
    pytest.mark.skipif(demo_router() is None, reason="vllm-router is not installed (test extra)"),
]

UNHEALTHY_WITHIN_S = 20.0


async def _serve(ctx: FleetContext, model_path: Path, name: str) -> dict[str, Any]:
    """Serve the tiny GGUF with llama.cpp as replica `name`; its result."""
    return await _ok(
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
    """The result of a step that must succeed."""
    outcome = await pending
    assert outcome.ok, outcome.error
    return outcome.result


async def _scenario(tmp_path: Path) -> dict[str, Any]:
    model_dir = tmp_path / "models"
    model_path = write_tiny_llama_gguf(model_dir / "tiny-llama" / "tiny.gguf")
    seen: dict[str, Any] = {}
    async with this_machine_as_a_node(tmp_path, model_dir) as fleet:
        ctx = FleetContext(fleet, tmp_path)
        try:
            await _serve(ctx, model_path, "tiny-a")
            await _serve(ctx, model_path, "tiny-b")
            port = free_port()
            seen["gateway"] = await _ok(
                step(ctx, "gateway", name="front", node=NODE, port=port, health_path="/v1/models")
            )
            async with engine_url(fleet, NODE, port) as base, httpx.AsyncClient(timeout=30) as http:
                deadline = time.monotonic() + UNHEALTHY_WITHIN_S
                while time.monotonic() < deadline:
                    listed = (await http.get(base + "/workers")).json()["workers"]
                    if not any(w["is_healthy"] for w in listed):
                        break
                    await asyncio.sleep(0.5)
                seen["workers"] = listed
                answered = await http.post(
                    base + "/v1/chat/completions",
                    json={"model": "tiny", "messages": [{"role": "user", "content": "Hi"}]},
                )
                seen["answer"] = (answered.status_code, answered.text)
            listed = await fleet.request(NODE, "shard.list")
            seen["engine_lines"] = [
                line
                for shard in listed["shards"]
                if shard["replica"] in ("tiny-a", "tiny-b")
                for line in await log_lines(fleet.client(NODE), shard["shard_id"])
            ]
        finally:
            # Whatever happened, nothing this test started keeps running.
            with contextlib.suppress(LlmgwError):
                await step(ctx, "stop", gateway="front")
            for name in ("tiny-a", "tiny-b"):
                with contextlib.suppress(LlmgwError):
                    await step(ctx, "stop", replica=name)
            await ctx.close()
        listed = await fleet.request(NODE, "shard.list")
        seen["left"] = [s for s in listed["shards"] if s["phase"] == "running"]
    return seen


def test_vllm_router_0_1_17_ignores_health_path_for_workers_it_is_given_so_llama_cpp_goes_dark(
    tmp_path: Path,
):
    # What blocks the gateway in front of llama-cpp-python today (see docs/gateway.md):
    # workers added through the router's /workers API are probed on /health whatever
    # --health-check-endpoint says; llama-cpp-python answers 404 there, so after three
    # failed probes (2 s apart) the router holds every worker unhealthy and answers 503.
    seen = asyncio.run(_scenario(tmp_path))

    gateway = seen["gateway"]
    assert sorted(w["replica"] for w in gateway["workers"]) == ["tiny-a", "tiny-b"]
    # Two replicas of one local file serve one model (named from the file): one pool.
    assert {w["model"] for w in gateway["workers"]} == {"tiny"}
    assert [w["is_healthy"] for w in seen["workers"]] == [False, False]
    assert seen["answer"][0] == 503, seen["answer"]
    probes = [line for line in seen["engine_lines"] if '"GET /health HTTP/1.1" 404' in line]
    assert probes, seen["engine_lines"][-20:]
    assert not any("GET /v1/models" in line for line in seen["engine_lines"])
    assert seen["left"] == []
