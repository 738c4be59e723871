"""One service, two operators: the lease in the agents' state, on a kept-up demo fleet;
and a roll that fails.

Two consoles (two fleets, each its own SSH connections and agents) apply one
service at the same moment, twenty rounds (its document changing every fifth:
one replica more, then one less): each round one proceeds and the other is
refused with a sentence naming the holder and since when — or, where the
first was done before the second asked (a round with nothing to change), the
second finds nothing to change — and the service never has more replicas than
its document says. Then an `apply` in
a process of its own is SIGKILLed while it holds the lease: the next
`apply` proceeds, and makes whole what the killed one left. A roll whose new
replica does not fit, or does not come up, leaves the old one serving.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from kept_demo import apply_json, kept_demo, operator, run_json, service_request, start_json

from llmgw_core.serve.http import close_quietly
from llmgw_core.serve.replicas import replicas_now
from llmgw_core.service.apply import apply_service
from llmgw_core.service.lease import ServiceHeld, lease_node
from llmgw_core.service.spec import ServiceDoc, service_label

SERVICE = {
    "name": "race",
    "model": "catalog:meta-llama/Llama-3.1-8B-Instruct",
    "context": 4096,
    "gpu_class": "h100-80g",
}


_operator = operator
_request = service_request


async def _live_of(fleet: Any, service: str) -> list[Any]:
    return [
        v
        for v in await replicas_now(fleet)
        if v.service == service and v.phase not in ("stopped", "failed")
    ]


@pytest.fixture(scope="module")
def inventory(tmp_path_factory: pytest.TempPathFactory):
    with kept_demo(tmp_path_factory.mktemp("services") / "demo") as path:
        yield path


def test_two_operators_racing_one_proceeds_one_is_refused_twenty_rounds(
    tmp_path: Path, inventory: str
):

    async def race() -> list[str]:
        ana, bo = await _operator(inventory), await _operator(inventory)
        refusals = []
        try:
            for round_number in range(20):
                doc = ServiceDoc.model_validate(
                    {**SERVICE, "replicas": 1 + (round_number // 5) % 2}
                )
                base, model = _request(doc, tmp_path, inventory)
                outcomes = await asyncio.gather(
                    *(
                        apply_service(fleet, reach, doc, base, model, holder=who)
                        for (fleet, reach, _), who in ((ana, "ana"), (bo, "bo"))
                    ),
                    return_exceptions=True,
                )
                done = [o for o in outcomes if isinstance(o, dict)]
                held = [o for o in outcomes if isinstance(o, ServiceHeld)]
                assert len(done) + len(held) == 2 and done, outcomes
                assert all("failed" not in o for o in done), done
                # Both done means one took the lease after the other gave it back (a round
                # with nothing to change ends in milliseconds): the second found the fleet
                # as the document says, so at most one of them changed anything.
                assert sum(1 for o in done if o["actions"]) <= 1, done
                refusals.extend(h.sentence() for h in held)
                live = await _live_of(ana[0], "race")
                assert len(live) == doc.replicas, [v.name for v in live]  # no double start
                assert {v.spec["service"]["hash"] for v in live} == {service_label(doc)["hash"]}
            doc = ServiceDoc.model_validate({**SERVICE, "replicas": 0})
            base, model = _request(doc, tmp_path, inventory)
            await apply_service(ana[0], ana[1], doc, base, model)
            assert await _live_of(ana[0], "race") == []
        finally:
            for _, reach, closer in (ana, bo):
                await close_quietly(reach)
                await closer()
        return refusals

    refusals = asyncio.run(race())
    assert refusals, "no round refused an operator: the lease was never contended"
    for sentence in refusals:
        assert sentence.startswith("service race is held by ")
        assert " since 20" in sentence and " UTC" in sentence
    holders = {s.split(" since ")[0][len("service race is held by ") :] for s in refusals}
    assert holders <= {"ana", "bo"}


def test_a_holder_killed_outright_does_not_block_the_next_apply(tmp_path: Path, inventory: str):
    doc = {**SERVICE, "name": "killed", "replicas": 3}
    script = tmp_path / "apply.yaml"
    script.write_text(yaml.safe_dump({"steps": [{"apply": {"service": doc}}]}))
    killed = start_json(inventory, script)

    async def lease_held(fleet: Any) -> bool:
        answer = await fleet.request(lease_node(fleet), "lease.list")
        return any(lease["name"] == "killed" for lease in answer["leases"])

    async def scenario() -> tuple[float, list[dict], list[str]]:
        fleet, reach, closer = await _operator(inventory)
        try:
            deadline = time.monotonic() + 60
            while not await lease_held(fleet):
                assert time.monotonic() < deadline and killed.poll() is None
                await asyncio.sleep(0.05)
            await asyncio.sleep(1.0)  # it is starting its first replica
            os.killpg(killed.pid, signal.SIGKILL)
            killed.wait()
            freed_at = time.monotonic()
            while await lease_held(fleet):
                assert time.monotonic() - freed_at < 40  # the lease's 30 s, and some
                await asyncio.sleep(0.1)
            waited = time.monotonic() - freed_at
            code, steps, said = run_json(inventory, script.read_text())
            assert code == 0, said
            names = [v.name for v in await _live_of(fleet, "killed")]
            return waited, steps[0]["result"]["actions"], names
        finally:
            await close_quietly(reach)
            await closer()

    waited, actions, names = asyncio.run(scenario())
    print(f"the killed holder's lease was free {waited:.2f} s after the kill")
    assert len(names) == 3
    assert all(a["action"] in ("start", "stop") for a in actions), actions
    code, _, said = run_json(inventory, "steps: [{stop: {service: killed}}]")
    assert code == 0, said


def test_a_roll_that_fails_leaves_the_old_replica_serving_and_stops_the_new(inventory: str):
    doc = {**SERVICE, "name": "fails", "replicas": 1}
    assert [a["action"] for a in apply_json(inventory, doc)["actions"]] == ["start"]
    try:
        # The successor fits nowhere: nothing starts, the step says so (exit 3).
        script = yaml.safe_dump(
            {"steps": [{"apply": {"service": {**doc, "context": 8192, "gpus": 8, "nodes": 8}}}]}
        )
        code, steps, _ = run_json(inventory, script)
        assert code == 3
        assert steps[0]["result"]["failed"].startswith(
            "no free cards for fails-2 to replace fails-1"
        )
        assert steps[0]["result"]["failed"].endswith("; fails-1 still serves")
        assert [(r["name"], r["phase"]) for r in steps[0]["result"]["replicas"]] == [
            ("fails-1", "ready")
        ]
        # The successor starts and stalls past its timeout: it is stopped, the old one serves.
        script = yaml.safe_dump(
            {"steps": [{"apply": {"service": {**doc, "context": 8192, "timeout": 0.2}}}]}
        )
        code, steps, _ = run_json(inventory, script)
        result = steps[0]["result"]
        assert code == 1, result
        assert result["failed"].startswith("fails-2 did not come up: nothing moved for 0.2 s")
        assert result["failed"].endswith("; fails-1 still serves")
        assert result["done"] == []
        live = [(r["name"], r["phase"]) for r in result["replicas"] if r["phase"] != "stopped"]
        assert live == [("fails-1", "ready")]
        code, steps, said = run_json(inventory, 'steps: [{ask: {replica: fails-1, prompt: "hi"}}]')
        assert code == 0, said
    finally:
        code, _, said = run_json(inventory, "steps: [{stop: {service: fails}}]")
        assert code == 0, said
