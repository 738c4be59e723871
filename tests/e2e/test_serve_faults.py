"""Serving when things go wrong on the demo fleet: a node cut off, a console restarted, two consoles racing."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from serve_demo_harness import FleetContext, LoopThread, open_console, start_demo, step

from llmgw_core.fleet.fleet import Fleet

LLAMA = "catalog:meta-llama/Llama-3.3-70B-Instruct"


class Demo:
    """The module's demo fleet and the consoles opened on it."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.loop = LoopThread()
        self.demo = self.loop.run(start_demo(root / "demo"))
        self.consoles: list[tuple[Fleet, FleetContext]] = []

    def console(self) -> FleetContext:
        fleet = self.loop.run(open_console(self.demo))
        ctx = FleetContext(fleet, self.root)
        self.consoles.append((fleet, ctx))
        return ctx

    def close_console(self, ctx: FleetContext) -> None:
        fleet = next(f for f, c in self.consoles if c is ctx)
        self.consoles = [(f, c) for f, c in self.consoles if c is not ctx]
        self.loop.run(ctx.close())
        self.loop.run(fleet.close())

    def step(self, ctx: FleetContext, step_name: str, /, **args: Any) -> Any:
        return self.loop.run(step(ctx, step_name, **args), 300)

    def claims(self, ctx: FleetContext) -> dict[str, list[str]]:
        async def read() -> dict[str, list[str]]:
            fleet = await ctx.live_fleet()
            found = {}
            for node in fleet.snapshot().ready():
                answer = await fleet.request(node.name, "claims")
                if answer["claims"]:
                    found[node.name] = sorted(c["gpu"] for c in answer["claims"])
            return found

        return self.loop.run(read())

    def close(self) -> None:
        try:
            for _fleet, ctx in list(self.consoles):
                self.close_console(ctx)
        finally:
            self.loop.run(self.demo.stop())
            self.loop.close()


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    running = Demo(tmp_path_factory.mktemp("serve-faults"))
    try:
        yield running
    finally:
        running.close()


def _wait_state(demo: Demo, ctx: FleetContext, node: str, state: str) -> None:
    async def wait() -> None:
        fleet = await ctx.live_fleet()
        fleet.reconnect_now(node)
        await fleet.wait_for(lambda snapshot: snapshot.nodes[node].state == state, 60)

    demo.loop.run(wait())


def test_a_node_cut_off_fails_its_replica_frees_every_card_and_it_is_placed_again_on_return(
    demo: Demo,
):
    ctx = demo.console()
    served = demo.step(
        ctx, "serve", model=LLAMA, context=32768, gpu_class="h100-80g", gpus=8, nodes=2, name="cut"
    )
    assert served.ok, served.error
    server = demo.demo.servers["h100-a-02"]
    port = server.port
    demo.loop.run(server.stop())
    _wait_state(demo, ctx, "h100-a-02", "unreachable")

    listed = demo.step(ctx, "replicas", name="cut", grace=0, heal=True)
    (replica,) = listed.result["replicas"]
    assert replica["phase"] == "failed"
    assert replica["reason"].startswith("rank 1's node was lost: h100-a-02 is unreachable")
    head = next(s for s in replica["shards"] if s["node"] == "h100-a-01")
    assert head["phase"] == "stopped"
    assert demo.claims(ctx) == {}  # h100-a-02 cannot be asked yet: its shard still runs there
    (waiting,) = listed.result["healed"]
    assert waiting["outcome"] == "waiting for room"
    assert "h100-a-02: unreachable" in waiting["reason"]

    demo.loop.run(server.start(port))
    _wait_state(demo, ctx, "h100-a-02", "ready")
    healed = demo.step(ctx, "replicas", name="cut", grace=0, heal=True)
    (again,) = healed.result["healed"]
    assert again["outcome"] == "ready", again
    assert [n["node"] for n in again["placement"]["nodes"]] == ["h100-a-01", "h100-a-02"]
    (replica,) = healed.result["replicas"]
    assert replica["phase"] == "ready" and len(replica["shards"]) == 2
    assert demo.step(ctx, "ask", replica="cut", prompt="back?").ok
    assert demo.step(ctx, "stop", replica="cut").ok
    assert demo.claims(ctx) == {}
    demo.close_console(ctx)


def test_a_console_started_later_adopts_the_running_replica_with_its_logs(demo: Demo):
    first = demo.console()
    assert demo.step(
        first, "serve", model=LLAMA, context=32768, gpu_class="h100-80g", name="adopted"
    ).ok
    demo.close_console(first)

    later = demo.console()
    listed = demo.step(later, "replicas", name="adopted", phase="ready")
    assert listed.ok, listed.error
    (replica,) = listed.result["replicas"]
    assert replica["model"] == LLAMA and replica["engine"] == "vllm"
    lines = demo.step(later, "logs", replica="adopted", lines=50).result["lines"]
    assert any("Starting vLLM server on" in line for line in lines)
    assert all(line.startswith("[r0 h100-a-01] ") for line in lines)
    assert demo.step(later, "ask", replica="adopted", prompt="still there?").ok
    assert demo.step(later, "stop", replica="adopted").ok
    assert demo.claims(later) == {}
    demo.close_console(later)


def test_two_consoles_serving_at_once_never_share_a_card(demo: Demo):
    one, two = demo.console(), demo.console()
    for round_number in range(3):

        async def race(round_number: int = round_number) -> list[Any]:
            return await asyncio.gather(
                *(
                    step(
                        ctx,
                        "serve",
                        model=LLAMA,
                        context=32768,
                        gpu_class="h100-80g",
                        gpus=8,
                        nodes=1,
                        name=f"race-{who}-{round_number}",
                    )
                    for who, ctx in (("a", one), ("b", two))
                )
            )

        outcomes = demo.loop.run(race(), 300)
        assert all(o.ok for o in outcomes), [o.error for o in outcomes]
        taken = [
            (node["node"], gpu)
            for outcome in outcomes
            for node in outcome.result["placement"]["nodes"]
            for gpu in node["gpus"]
        ]
        assert len(taken) == len(set(taken)) == 16
        assert {node for node, _ in taken} == {"h100-a-01", "h100-a-02"}
        lost = [
            e for o in outcomes for e in o.result["trace"] if e["step"] == "lost a race for cards"
        ]
        print(f"round {round_number}: {len(lost)} lost race(s), re-placed")
        for outcome in outcomes:
            assert demo.step(one, "stop", replica=outcome.result["name"]).ok
    assert demo.claims(one) == {}
