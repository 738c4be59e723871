"""Benchmark: a light key beside a key flooding at ten times its rate, with and without fair
shares at the gateway's front.

Run: `.venv/bin/python tests/benchmarks/bench_front_fairness.py [SEQS TOKEN_S LIGHT_RATE]`
(default 256 1.5 4.8). Prints figures; asserts nothing.

One real front (`llmgw front`) before the sim engine standing in for vLLM
(`--max-num-seqs SEQS`, vLLM's default, `TOKEN_S` a token). The light key
streams `LIGHT_RATE` chat completions a second, seven tokens each, and times
each one's first token; the flooding key sends ten times as many, whole, of
1 to 7 tokens (drawn, the same each run: lengths that differ end at
different times, as an engine's requests do), more than the engine can
answer. Both arrive at a fixed pace whatever the answers do (an open loop,
as independent clients do). The time scale is slow (1.5 s a token by
default) so that a two-core machine can drive 256 sequences without being
the bottleneck itself. Three runs of `SECONDS` each, after `WARM_S` not
counted:

1. the light key alone;
2. both, the front sending requests as they come (no `fair`);
3. both, the front keeping fair shares (`fair: {}`, its defaults).

For each: the light key's p50 and p99 time to first token, the tokens a
second both keys were answered (the engine's throughput), the sequences the
engine ran (its own gauge, sampled), the flood's requests refused, and the
capacity the front learnt.
"""

from __future__ import annotations

import asyncio
import json
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import _paths  # noqa: F401  (tests/support on the path)
import httpx
from agent_process import front_process
from engine_process import SIM_VLLM, serving, sim_env

from llmgw_agent.front.control import call

SEQS, TOKEN_S, LIGHT_RATE = (
    (int(sys.argv[1]), float(sys.argv[2]), float(sys.argv[3]))
    if len(sys.argv) == 4
    else (256, 1.5, 4.8)
)
FLOOD_RATE = 10 * LIGHT_RATE
SECONDS = 20.0
WARM_S = 16.0
LIGHT, FLOOD = "sk-bench-light-0123456789", "sk-bench-flood-0123456789"
BODY = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}


async def _light(http: httpx.AsyncClient, url: str, counted_from: float, out: dict) -> None:
    started = time.monotonic()
    first = None
    tokens = 0
    headers = {"Authorization": f"Bearer {LIGHT}"}
    body = {**BODY, "stream": True, "stream_options": {"include_usage": True}}
    async with http.stream("POST", url, json=body, headers=headers) as answer:
        if answer.status_code != 200:
            out["light_failed"] += 1
            return
        async for line in answer.aiter_lines():
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[6:])
            if first is None and any(
                (c.get("delta") or {}).get("content") for c in chunk.get("choices") or ()
            ):
                first = time.monotonic() - started
            if chunk.get("usage"):
                tokens = chunk["usage"]["completion_tokens"]
    if started >= counted_from and first is not None:
        out["ttft"].append(first)

        out["tokens"].append((time.monotonic(), tokens))


async def _flood(
    http: httpx.AsyncClient, url: str, counted_from: float, out: dict, tokens: int
) -> None:
    started = time.monotonic()
    body = {**BODY, "max_tokens": tokens}
    answer = await http.post(url, json=body, headers={"Authorization": f"Bearer {FLOOD}"})
    if answer.status_code != 200:
        out["flood_refused"] += 1
        return
    if started >= counted_from:
        out["tokens"].append((time.monotonic(), answer.json()["usage"]["completion_tokens"]))


async def _sample_engine(engine: str, counted_from: float, ends: float, out: dict) -> None:
    """The engine's own count of sequences running, every 0.2 s of the counted window."""
    from llmgw_agent.front.fair import gauges

    async with httpx.AsyncClient(timeout=10) as http:
        while time.monotonic() < ends:
            if time.monotonic() >= counted_from:
                running, _ = gauges((await http.get(engine + "/metrics")).text)
                out["running"].append(running or 0.0)
            await asyncio.sleep(0.2)


async def _run(port: int, flood: bool, engine: str) -> dict:
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    out: dict = {"ttft": [], "tokens": [], "light_failed": 0, "flood_refused": 0, "running": []}
    start = time.monotonic()
    counted_from, ends = start + WARM_S, start + WARM_S + SECONDS
    limits = httpx.Limits(max_connections=2000, max_keepalive_connections=200)
    tasks = [asyncio.ensure_future(_sample_engine(engine, counted_from, ends, out))]
    lengths = random.Random(7)  # the flood's answers of 1 to 7 tokens, the same each run
    async with httpx.AsyncClient(timeout=300, limits=limits) as http:
        sent_light = sent_flood = 0
        while (now := time.monotonic()) < ends:
            while sent_light <= (now - start) * LIGHT_RATE:
                tasks.append(asyncio.ensure_future(_light(http, url, counted_from, out)))
                sent_light += 1
            while flood and sent_flood <= (now - start) * FLOOD_RATE:
                tokens = lengths.randint(1, 7)
                tasks.append(asyncio.ensure_future(_flood(http, url, counted_from, out, tokens)))
                sent_flood += 1
            await asyncio.sleep(0.005)
        # What was sent in the window is answered; only what ended in it counts as throughput.
        await asyncio.gather(*tasks, return_exceptions=True)
    out["tokens_per_s"] = sum(t for at, t in out["tokens"] if at <= ends) / SECONDS
    return out


def _p(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * share))]


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        env = sim_env(root / "sim-state", LLMGW_SIM_TOKEN_S=str(TOKEN_S))
        argv = [*SIM_VLLM, "/models/m", "--served-model-name", "m", "--max-num-seqs", str(SEQS)]
        rows = []
        with serving(argv, env, ready="/health", wait_s=60, log=root / "sim.log") as engine:
            for name, flood, fair in (
                ("light key alone", False, None),
                ("both, first come first sent", True, None),
                ("both, fair shares", True, {}),
            ):
                front_folder = root / name.replace(" ", "-").replace(",", "")
                front_folder.mkdir()
                config: dict = {
                    "keys": [{"id": "light", "key": LIGHT}, {"id": "flood", "key": FLOOD}],
                    "upstream": {},
                }
                if fair is not None:
                    config["fair"] = fair
                with front_process(front_folder, config) as (port, control):
                    call(control, "POST", "/workers", {"url": engine, "model_id": "m"})
                    time.sleep(2.5)  # the worker's first health check
                    out = asyncio.run(_run(port, flood, engine))
                    metrics = call(control, "GET", "/metrics")[1]
                capacity = [
                    line.rsplit(" ", 1)[1]
                    for line in metrics.splitlines()
                    if line.startswith("llmgw_gateway_worker_capacity{")
                ]
                rows.append((name, out, capacity))
                time.sleep(3)  # the engine's queue from the last run empties
    print(
        f"sim engine: {SEQS} sequences, {TOKEN_S * 1000:.0f} ms a token, 7 tokens an answer; "
        f"light {LIGHT_RATE:g}/s streamed, flood {FLOOD_RATE:g}/s whole; "
        f"{SECONDS:g} s counted after {WARM_S:g} s"
    )
    print(
        f"{'':30} {'light p50':>10} {'light p99':>10} {'tokens/s':>9} {'running':>8} "
        f"{'flood 503':>9} {'capacity':>9}"
    )
    for name, out, capacity in rows:
        ttft = out["ttft"]
        print(
            f"{name:30} {statistics.median(ttft) * 1000:8.1f}ms {_p(ttft, 0.99) * 1000:8.1f}ms "
            f"{out['tokens_per_s']:9.1f} {statistics.mean(out['running']):8.1f} "
            f"{out['flood_refused']:9d} {','.join(capacity) or '-':>9}"
        )
    alone, plain, fair_row = (row[1] for row in rows)
    print(
        f"light p99 with fair shares: {_p(fair_row['ttft'], 0.99) / _p(alone['ttft'], 0.99):.2f}"
        f"× alone (first come: {_p(plain['ttft'], 0.99) / _p(alone['ttft'], 0.99):.1f}×); "
        f"throughput {fair_row['tokens_per_s'] / plain['tokens_per_s'] * 100 - 100:+.1f} % "
        "against first come"
    )


if __name__ == "__main__":
    main()
