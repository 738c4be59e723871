"""Fair shares at the front (`fair.py`): the order, the reserve, the bounded queue, the
capacity an engine's own gauges teach, on a pool of real `Worker`s."""

from __future__ import annotations

import asyncio
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmgw_agent.front.fair import PROBE_EVERY_S, Shares, gauges
from llmgw_agent.front.quota import Refused
from llmgw_agent.front.routing import Pool, Worker


def _pool(*capacities: int | None) -> Pool:
    pool = Pool("round_robin", log=lambda _text: None)
    for number, capacity in enumerate(capacities):
        worker = Worker(f"http://127.0.0.1:{9000 + number}", "m")
        worker.capacity = capacity
        pool.add(worker)
    return pool


async def _settle() -> None:
    """Let every task the last step woke run as far as it can (a waiter's turn passes through
    `wait_for` and `shield`: a few turns of the loop)."""
    for _ in range(10):
        await asyncio.sleep(0)


def _shares(pool: Pool, keys: dict | None = None, **spec: object) -> Shares:
    given = keys or {"light": (1.0, "normal"), "flood": (1.0, "normal")}
    return Shares(dict(spec), given, pool)


def test_without_a_capacity_every_request_goes_at_once():
    async def run() -> None:
        shares = _shares(_pool(None, 4))
        for _ in range(50):
            assert await shares.take("flood", "m", 10) is None
        assert shares.in_flight["m"] == 50 and shares.queue == []

    asyncio.run(run())


def test_a_saturated_model_lets_the_least_served_key_through_first():
    async def run() -> None:
        shares = _shares(_pool(4), reserve=1)
        shares.seen[("light", "m")] = time.monotonic()  # the light key came a moment ago
        for _ in range(3):  # the flood takes the capacity less the reserve
            assert await shares.take("flood", "m", 100) is None
        held = asyncio.ensure_future(shares.take("flood", "m", 100))
        await _settle()
        assert not held.done() and len(shares.queue) == 1
        # The light key has nothing in flight: the reserved sequence is its own, at once.
        assert await shares.take("light", "m", 100) is None
        assert shares.in_flight["m"] == 4
        # A second light request, while its first runs, waits as the flood's do, in the
        # counters' order: the light key was lifted to the flood's 300 and then charged 100.
        light = asyncio.ensure_future(shares.take("light", "m", 100))
        await _settle()
        assert shares.counters == {"flood": 300, "light": 400}
        shares.done("flood", "m", 100, (100, 10))  # the flood: 300 + 2 × 10
        await _settle()
        assert held.done() and held.result() is None and not light.done()
        assert shares.in_reserve == {"m": 1}  # the light key's first, on the reserved sequence
        shares.done("light", "m", 100, (100, 10))
        await _settle()
        assert light.done() and light.result() is None and shares.in_reserve == {"m": 1}

    asyncio.run(run())


def test_priority_comes_before_the_counters_and_weight_divides_them():
    async def run() -> None:
        keys = {"low": (1.0, "low"), "high": (1.0, "high"), "big": (4.0, "normal")}
        shares = _shares(_pool(1), keys, reserve=0)
        assert await shares.take("low", "m", 10) is None
        waiting = [asyncio.ensure_future(shares.take(k, "m", 10)) for k in ("low", "high")]
        await _settle()
        shares.done("low", "m", 10, (10, 5))
        await _settle()
        assert waiting[1].done() and not waiting[0].done()  # high first, though it came later
        shares.done("high", "m", 10, (10, 5))
        await _settle()
        shares.done("low", "m", 10, (10, 5))
        # Weight 4: the same tokens count a quarter.
        assert await shares.take("big", "m", 40) is None
        shares.done("big", "m", 40, (40, 30))
        # (40 prompt tokens + twice 30 completion tokens) / weight 4; nobody active to lift it.
        assert shares.counters["big"] == pytest.approx(25.0)

    asyncio.run(run())


def test_alone_a_busy_key_has_the_whole_capacity():
    async def run() -> None:
        shares = _shares(_pool(4), reserve=1)
        for _ in range(4):
            assert await shares.take("flood", "m", 1) is None
        shares.seen[("light", "m")] = time.monotonic() - 11  # the light key came, but long ago
        assert shares.in_flight["m"] == 4

    asyncio.run(run())


def test_a_key_coming_back_is_lifted_to_the_least_active_counter():
    async def run() -> None:
        shares = _shares(_pool(None))
        assert await shares.take("flood", "m", 1000) is None  # flood: 1000
        assert await shares.take("light", "m", 0) is None  # light lifted to 1000, not 0
        assert shares.counters["light"] == 1000

    asyncio.run(run())


def test_the_queue_is_bounded_and_the_worst_waiting_request_gives_way():
    async def run() -> None:
        shares = _shares(_pool(1), queue=2, reserve=0)
        assert await shares.take("flood", "m", 500) is None
        first = [asyncio.ensure_future(shares.take("flood", "m", 500)) for _ in range(2)]
        await _settle()
        # A third flood request finds the queue full and ranks no better: refused.
        refused = await shares.take("flood", "m", 500)
        assert isinstance(refused, Refused) and refused.limit == "queue_full"
        assert refused.retry_after_s == 1
        # The light key ranks better: the flood's newest waiting request gives way.
        light = asyncio.ensure_future(shares.take("light", "m", 1))
        await _settle()
        assert first[1].done() and first[1].result().limit == "queue_full"
        # Lifted to the flood's counter, the light key ties with it: the first to come goes.
        shares.done("flood", "m", 500, None)
        await _settle()
        assert first[0].done() and not light.done()
        shares.done("flood", "m", 500, None)
        await _settle()
        assert light.done() and light.result() is None
        assert shares.active == {"light": 1}

    asyncio.run(run())


def test_a_request_that_waits_too_long_is_refused_and_forgotten():
    async def run() -> None:
        shares = _shares(_pool(1), queue_timeout_s=0.05, reserve=0)
        assert await shares.take("flood", "m", 1) is None
        refused = await shares.take("light", "m", 1)
        assert refused.limit == "queue_timeout" and shares.queue == []
        assert shares.active == {"flood": 1} and shares.held_total == {"light": 1}

    asyncio.run(run())


def test_a_cancelled_waiter_leaves_no_trace():
    async def run() -> None:
        shares = _shares(_pool(1), reserve=0)
        assert await shares.take("flood", "m", 1) is None
        waiting = asyncio.ensure_future(shares.take("light", "m", 1))
        await _settle()
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert shares.queue == [] and shares.active == {"flood": 1}

    asyncio.run(run())


def test_capacity_is_what_the_engine_ran_when_it_queued_twice_and_is_probed_upward():
    pool = _pool(None)
    (worker,) = pool.workers.values()
    shares = _shares(pool)
    shares.engine_said(worker, 12, 3, 0.0)
    assert worker.capacity is None  # one read may be a burst between two scheduler steps
    shares.engine_said(worker, 12, 3, 1.0)
    assert worker.capacity == 12
    shares.engine_said(worker, 5, 0, 2.0)
    assert worker.capacity == 12  # not full now: nothing learnt
    # Requests wait here while the engine runs all it was given and queues none: probed.
    shares.queue.append(type("W", (), {"base": "m", "key": "flood", "seq": 1})())
    shares.engine_said(worker, 12, 0, 2.0 + PROBE_EVERY_S)
    assert worker.capacity == 13
    shares.engine_said(worker, 13, 0, 2.5 + PROBE_EVERY_S)
    assert worker.capacity == 13  # at most once every PROBE_EVERY_S
    shares.engine_said(worker, 12, 1, 3.0 + PROBE_EVERY_S)
    assert worker.capacity == 12  # once known, one read that queued sets it back


def test_gauges_reads_each_engines_names_and_sums_label_sets():
    vllm = (
        "# HELP vllm:num_requests_running x\n"
        'vllm:num_requests_running{engine="0",model_name="m"} 3.0\n'
        'vllm:num_requests_running{engine="1",model_name="m"} 4.0\n'
        'vllm:num_requests_waiting{engine="0",model_name="m"} 2.0 1700000000\n'
        'vllm:num_requests_waiting_by_reason{reason="x"} 9\n'
    )
    assert gauges(vllm) == (7.0, 2.0)
    assert gauges("sglang:num_running_reqs 5\nsglang:num_queue_reqs 1\n") == (5.0, 1.0)
    assert gauges("llamacpp:requests_processing 1\nllamacpp:requests_deferred 0\n") == (1.0, 0.0)
    assert gauges("nothing 1\nvllm:num_requests_waiting nan\n") == (None, None)


@given(st.text(max_size=300))
@settings(max_examples=200)
def test_gauges_never_raises(text: str):
    running, waiting = gauges(text)
    assert running is None or running >= 0
    assert waiting is None or waiting >= 0


@pytest.mark.parametrize(
    ("spec", "keys", "said"),
    [
        ({"queue": 0}, {}, "fair.queue is a whole number from 1 to 100000"),
        ({"waiting": 1.5}, {}, "fair.waiting is a whole number"),
        ({"queue_timeout_s": "soon"}, {}, "fair.queue_timeout_s is not a number"),
        ({"burst": 1}, {}, "fair has no field burst"),
        ({}, {"a": (0, "normal")}, "the weight of key a is above 0"),
        ({}, {"a": (1, "urgent")}, "the priority of key a is one of high, normal, low"),
    ],
)
def test_a_bad_fair_configuration_is_one_sentence(spec: dict, keys: dict, said: str):
    with pytest.raises(ValueError, match="^" + said.replace("(", r"\(")):
        Shares(spec, keys, None)


def test_a_far_lower_reading_takes_two_reads_and_probes_double_while_they_are_taken():
    pool = _pool(256)
    (worker,) = pool.workers.values()
    shares = _shares(pool)
    shares.engine_said(worker, 20, 1, 0.0)  # long prompts over one step's budget, say
    assert worker.capacity == 256
    shares.engine_said(worker, 20, 1, 1.0)
    assert worker.capacity == 20
    shares.queue.append(type("W", (), {"base": "m", "key": "flood", "seq": 1})())
    grown = [worker.capacity]
    for step in range(1, 6):  # the engine runs all it is given and queues nothing
        shares.engine_said(worker, worker.capacity, 0, 1.0 + step * PROBE_EVERY_S)
        grown.append(worker.capacity)
    assert grown == [20, 21, 22, 23, 25, 28]  # a 64th (one at least), then doubling to an 8th
    shares.engine_said(worker, 27, 2, 60.0)  # the last probe queued: taken back at once
    assert worker.capacity == 27 and worker.probe_share == 64


def test_keys_long_gone_are_forgotten_so_the_reserve_is_judged_among_recent_ones():
    async def run() -> None:
        shares = _shares(_pool(None))
        old = time.monotonic() - 60
        shares.seen.update({(f"gone-{n}", "m"): old for n in range(300)})
        assert await shares.take("light", "m", 1) is None
        assert set(shares.seen) == {("light", "m")}

    asyncio.run(run())
