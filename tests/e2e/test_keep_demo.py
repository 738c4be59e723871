"""`keep` on a kept-up demo fleet: scaled on a real queue, healed after a kill, one keeper at a time.

The sim engines answer `max_num_seqs` sequences at once and queue the rest,
publishing what waits on `/metrics` under vLLM's names, so the keeper scales
on a real queue. Load comes from `bench` in a process of its own, through
the gateway's front; the keeper runs in this process, as a console runs it.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from kept_demo import (
    close_operator,
    free_port,
    kept_demo,
    operator,
    run_json,
    service_request,
    start_json,
)

from llmgw_core.serve.replicas import replicas_now
from llmgw_core.service.keep import keep_service
from llmgw_core.service.spec import ServiceDoc

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]

MODEL = "catalog:meta-llama/Llama-3.1-8B-Instruct"
SERVED = "meta-llama/Llama-3.1-8B-Instruct"


@pytest.fixture(scope="module")
def inventory(tmp_path_factory: pytest.TempPathFactory):
    # 20 ms a token (an 8-word answer: 160 ms): the engines, not the path to them (SSH
    # tunnel and front on this machine's loaded cores), are where a request waits.
    with kept_demo(tmp_path_factory.mktemp("keep") / "demo", {"LLMGW_SIM_TOKEN_S": "0.02"}) as path:
        yield path


def _doc(name: str, port: int, **given: Any) -> ServiceDoc:
    return ServiceDoc.model_validate(
        {
            "name": name,
            "model": MODEL,
            "context": 8192,
            "gpu_class": "h100-80g",
            "concurrency": 4,  # --max-num-seqs 4: the rest of the load waits
            "gateway": {"name": f"gw-{name}", "port": port},
            "drain_s": 10,
            **given,
        }
    )


async def _live(fleet: Any, service: str) -> list[Any]:
    return [
        v
        for v in await replicas_now(fleet)
        if v.service == service and v.phase not in ("stopped", "failed")
    ]


def _fronted(port: int) -> Any:
    """A check: the gateway on `port` answers its model list."""

    async def fronted() -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2):
                return True
        except (urllib.error.URLError, OSError):
            return False

    return fronted


async def _until(check: Any, what: str, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not await check():
        assert time.monotonic() < deadline, f"no {what} within {timeout_s:g} s"
        await asyncio.sleep(0.25)


def test_keep_scales_out_on_requests_waiting_and_back_to_one_when_the_load_ends(
    inventory: str, tmp_path: Path, stopped_after: list[str]
):
    stopped_after.append("scaled")
    port = free_port()
    doc = _doc(
        "scaled",
        port,
        # Two sequences at once an engine (about 12 answers a second at the fixture's pace),
        # against a path that carried 40 a second on CI's loaded cores: the queue is the
        # engine's. At the sim's own pace (50 a second) the two were even on CI, and the
        # queue never stayed above the target long enough to scale.
        concurrency=2,
        replicas={"min": 1, "max": 3, "target_waiting": 2, "scale_down_after_s": 15},
    )
    bench = tmp_path / "bench.yaml"
    bench.write_text(
        "steps:\n  - bench: {gateway: gw-scaled, duration_s: 30, concurrency: 32, max_tokens: 16}\n"
    )

    async def scenario() -> tuple[dict, dict, list[int]]:
        console = await operator(inventory)
        fleet, reach, _ = console
        base, model = service_request(doc, tmp_path, inventory)
        kept = asyncio.create_task(
            keep_service(fleet, reach, doc, base, model, interval_s=1.0, progress=print)
        )
        counts: list[int] = []
        try:
            await _until(_fronted(port), "gateway in front of the first replica", 90)
            load = start_json(inventory, bench)

            async def sample() -> None:
                while load.poll() is None:
                    counts.append(len(await _live(fleet, "scaled")))
                    await asyncio.sleep(1.0)

            await sample()
            out, err = load.communicate(timeout=30)
            assert load.returncode == 0, err[-3000:]
            benched = json.loads(out.splitlines()[-1])["result"]

            async def back_to_one() -> bool:
                return len(await _live(fleet, "scaled")) == 1

            await _until(back_to_one, "return to one replica", 120)

            # The keeper counts a scale-in once its stop is done, a moment after the
            # replica is gone: wait for that count before the keeper is stopped.
            async def counted() -> bool:
                totals = (await _service_samples(fleet, reach)).get(
                    "llmgw_service_scale_events_total", {}
                )
                return totals.get(("scaled", "in")) == totals.get(("scaled", "out"))

            await _until(counted, "scale-in counted as often as scale-out", 30)
        finally:
            kept.cancel()
            result = await kept
            exported = await _service_samples(fleet, reach)
            await close_operator(console)
        return result, benched, counts, exported

    result, benched, counts, exported = asyncio.run(scenario())
    events = result["events"]
    print(
        f"replicas while loaded: {counts}; bench: {benched['requests']} requests, "
        f"{benched['failed']} failed; {result['cycles']} keeper cycles, "
        f"{result['unread_cycles']} without a reading"
    )
    outs = [e for e in events if e["action"] == "scale-out"]
    ins = [e for e in events if e["action"] == "scale-in"]
    assert outs, events
    assert all("requests waiting per replica > 2 for " in e["why"] for e in outs)
    assert len(ins) == len(outs)
    assert all("requests waiting per replica < 1 for 1" in e["why"] for e in ins)
    # Sampled while the bench sent: a scale-out in its last seconds may come up after it.
    assert 2 <= max(counts) <= 1 + len(outs)
    assert benched["failed"] == 0, benched.get("errors")
    assert [r["phase"] for r in result["replicas"] if r["phase"] == "ready"] == ["ready"]
    # The metrics say the same: one replica, and each scale event counted.
    assert exported["llmgw_service_replicas"] == {("scaled",): 1.0}
    assert exported["llmgw_service_scale_events_total"] == {
        ("scaled", "out"): float(len(outs)),
        ("scaled", "in"): float(len(ins)),
    }
    code, _, said = run_json(
        inventory, "steps: [{stop: {service: scaled}}, {stop: {gateway: gw-scaled}}]"
    )
    assert code == 0, said


async def _service_samples(fleet: Any, reach: Any) -> dict[str, dict[tuple, float]]:
    """The service families of a metrics snapshot gathered now, as a scrape shows them."""
    from prometheus_client.exposition import generate_latest
    from prometheus_client.parser import text_string_to_metric_families
    from prometheus_client.registry import CollectorRegistry

    from llmgw_core.metrics.families import all_families
    from llmgw_core.metrics.sources import gather_snapshot

    snapshot, _ = await gather_snapshot(fleet, reach)

    class Once:
        def collect(self):
            return all_families(snapshot)

    registry = CollectorRegistry()
    registry.register(Once())
    text = generate_latest(registry).decode()
    found: dict[str, dict[tuple, float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if (
                sample.name.startswith("llmgw_service_")
                and sample.labels.get("service") == "scaled"
            ):
                key = tuple(
                    sample.labels[k] for k in ("service", "direction") if k in sample.labels
                )
                found.setdefault(sample.name, {})[key] = sample.value
    return found


def _ask_once(port: int, seen: list[tuple[float, bool]]) -> None:
    """One chat completion through the gateway; when it ended and whether it was answered."""
    body = json.dumps(
        {"model": SERVED, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
    ).encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v1/chat/completions",
        data=body,
        headers={"Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            ok = response.status == 200
    except (urllib.error.URLError, OSError):
        ok = False
    seen.append((time.monotonic(), ok))


def _ask_forever(port: int, stop: threading.Event, seen: list[tuple[float, bool]]) -> None:
    while not stop.is_set():
        _ask_once(port, seen)
        if not seen[-1][1]:
            time.sleep(0.05)  # a client backs off a little, as real ones do


async def _gateways(fleet: Any) -> list[Any]:
    from llmgw_core.gateway.run import gateways_now

    return [g for g in await gateways_now(fleet) if g.live]


def test_keep_scales_out_on_time_to_first_token_naming_it(
    inventory: str, tmp_path: Path, stopped_after: list[str]
):
    """No target on the queue: the engines' own time-to-first-token histograms, over the
    last minute, are what the keeper scales on."""
    stopped_after.append("quick")
    port = free_port()
    doc = _doc(
        "quick",
        port,
        concurrency=2,
        replicas={
            "min": 1,
            "max": 2,
            "target_waiting": None,
            "target_ttft_p99_s": 1.0,
            "scale_up_after_s": 3,
        },
    )
    bench = tmp_path / "bench.yaml"
    bench.write_text(
        "steps:\n  - bench: {gateway: gw-quick, duration_s: 20, concurrency: 24, max_tokens: 16}\n"
    )

    async def scenario() -> tuple[dict, dict]:
        console = await operator(inventory)
        fleet, reach, _ = console
        base, model = service_request(doc, tmp_path, inventory)
        kept = asyncio.create_task(
            keep_service(fleet, reach, doc, base, model, interval_s=1.0, progress=print)
        )
        try:
            await _until(_fronted(port), "gateway in front of the first replica", 90)
            load = start_json(inventory, bench)

            async def two() -> bool:
                return len(await _live(fleet, "quick")) == 2 or load.poll() is not None

            await _until(two, "a second replica while loaded", 60)
            out, err = load.communicate(timeout=60)
            assert load.returncode == 0, err[-3000:]
            benched = json.loads(out.splitlines()[-1])["result"]
        finally:
            kept.cancel()
            result = await kept
            await close_operator(console)
        return result, benched

    result, benched = asyncio.run(scenario())
    outs = [e for e in result["events"] if e["action"] == "scale-out"]
    assert outs, result["events"]
    assert outs[0]["why"].startswith("time to first token p99 "), outs
    assert "> 1.0 s for " in outs[0]["why"]
    assert benched["failed"] == 0, benched.get("errors")
    code, _, said = run_json(
        inventory, "steps: [{stop: {service: quick}}, {stop: {gateway: gw-quick}}]"
    )
    assert code == 0, said
