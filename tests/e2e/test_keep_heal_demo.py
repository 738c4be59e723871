"""`keep` on a kept-up demo fleet: healed after a kill, one keeper at a time, no room said once.

Apart from `test_keep_demo.py` (scaling under load), so the two long modules run on two
workers; the fixtures and helpers are that module's.
"""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from pathlib import Path

import pytest
from kept_demo import close_operator, free_port, kept_demo, operator, run_json, service_request
from test_keep_demo import _ask_forever, _ask_once, _doc, _gateways, _live, _until

from llmgw_core.service.keep import keep_service
from llmgw_core.service.lease import ServiceHeld

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]


@pytest.fixture(scope="module")
def inventory(tmp_path_factory: pytest.TempPathFactory):
    with kept_demo(tmp_path_factory.mktemp("keep-heal") / "demo") as path:
        yield path


def test_an_engine_killed_under_keep_is_replaced_and_the_gateway_follows(
    inventory: str, tmp_path: Path, stopped_after: list[str]
):
    stopped_after.append("healed")
    from llmgw_core.gateway.spec import HEALTH_INTERVAL_S

    port = free_port()
    doc = _doc("healed", port, replicas=2)

    async def scenario() -> tuple[dict, float, list[tuple[float, bool]], list[str]]:
        console = await operator(inventory)
        fleet, reach, _ = console
        base, model = service_request(doc, tmp_path, inventory)
        kept = asyncio.create_task(
            keep_service(fleet, reach, doc, base, model, interval_s=0.5, progress=print)
        )
        stop, seen = threading.Event(), []
        askers = [threading.Thread(target=_ask_forever, args=(port, stop, seen)) for _ in range(4)]
        try:

            async def two_fronted() -> bool:
                live = await _live(fleet, "healed")
                return len([v for v in live if v.phase == "ready"]) == 2 and any(
                    g.name == "gw-healed" for g in await _gateways(fleet)
                )

            await _until(two_fronted, "two replicas behind the gateway", 90)

            async def answers() -> bool:  # the router has its workers
                probe: list[tuple[float, bool]] = []
                await asyncio.to_thread(_ask_once, port, probe)
                return probe[-1][1]

            await _until(answers, "an answer through the gateway", 60)
            for asker in askers:
                asker.start()
            await asyncio.sleep(3)
            victim = (await _live(fleet, "healed"))[0]
            listed = await fleet.request(victim.shards[0].node, "shard.list")
            (record,) = [s for s in listed["shards"] if s["shard_id"] == victim.shards[0].shard_id]
            os.kill(int(record["main_pid"]), signal.SIGKILL)
            killed_at = time.monotonic()

            async def healed() -> bool:
                live = await _live(fleet, "healed")
                return (
                    victim.name not in {v.name for v in live}
                    and len([v for v in live if v.phase == "ready"]) == 2
                )

            await _until(healed, "replacement", 90)
            await asyncio.sleep(3)  # requests after the heal, through the followed gateway
            stop.set()
            for asker in askers:
                asker.join(15)
            names = [v.name for v in await _live(fleet, "healed")]
        finally:
            stop.set()
            kept.cancel()
            result = await kept
            await close_operator(console)
        return result, killed_at, seen, names

    result, killed_at, seen, names = asyncio.run(scenario())
    heals = [e for e in result["events"] if e["action"] == "heal"]
    assert len(heals) == 1 and "failed" in heals[0]["why"], result["events"]
    assert len(names) == 2
    window = HEALTH_INTERVAL_S + 1.0  # the router's health interval, and a poll's slack
    failed_before = [at for at, ok in seen if not ok and at < killed_at]
    failed_inside = [at for at, ok in seen if not ok and 0 <= at - killed_at <= window]
    failed_after = [at - killed_at for at, ok in seen if not ok and at - killed_at > window]
    last = max((at - killed_at for at, ok in seen if not ok), default=0.0)
    print(
        f"{len(seen)} requests through the gateway, {len(failed_inside)} failed within "
        f"{window:g} s of the kill (the last {last:.2f} s after it), {len(failed_after)} after"
    )
    assert failed_before == [] and failed_after == []
    assert sum(ok for at, ok in seen if at > killed_at + window) > 20
    code, _, said = run_json(
        inventory, "steps: [{stop: {service: healed}}, {stop: {gateway: gw-healed}}]"
    )
    assert code == 0, said


def test_a_second_keeper_is_refused_naming_the_first_and_nothing_fits_is_said_once(
    inventory: str, tmp_path: Path, stopped_after: list[str]
):
    stopped_after.append("wide")
    # Two replicas of eight cards fit the demo's two H100 nodes; a third does not.
    doc = _doc("wide", free_port(), gpus=8, replicas={"min": 3, "max": 3})

    async def scenario() -> tuple[dict, str]:
        first, second = await operator(inventory), await operator(inventory)
        base, model = service_request(doc, tmp_path, inventory)
        said: list[str] = []
        kept = asyncio.create_task(
            keep_service(
                first[0],
                first[1],
                doc,
                base,
                model,
                interval_s=0.5,
                holder="ana",
                progress=said.append,
            )
        )
        try:
            await asyncio.sleep(1.0)
            with pytest.raises(ServiceHeld) as refused:
                await keep_service(second[0], second[1], doc, base, model, duration_s=1)

            async def fronted() -> bool:
                return any("start gateway gw-wide" in line for line in said)

            await _until(fronted, "gateway started after the two replicas", 120)
            await asyncio.sleep(4.0)  # cycles enough to have said it again, had it repeated
        finally:
            kept.cancel()
            result = await kept
            await close_operator(first)
            await close_operator(second)
        return result, refused.value.sentence()

    result, refusal = asyncio.run(scenario())
    assert refusal.startswith("service wide is held by ana since ")
    blocked = [e for e in result["events"] if e["action"] == "blocked"]
    assert len(blocked) == 1, result["events"]
    assert blocked[0]["why"].startswith("no free cards for wide-3: no room for 8 × h100-80g")
    assert "would fit now on" in blocked[0]["why"]
    print(blocked[0]["why"])
    said = [(e["action"], e["replica"]) for e in result["events"]]
    assert said[:4] == [
        ("start", "wide-1"),
        ("start", "wide-2"),
        ("start", "wide-3"),
        ("blocked", "wide-3"),
    ], said
    assert said[4:] == [("start", "gateway gw-wide")], said  # tried once: nothing more
    code, _, said = run_json(
        inventory, "steps: [{stop: {service: wide}}, {stop: {gateway: gw-wide}}]"
    )
    assert code == 0, said
