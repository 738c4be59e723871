"""Benchmark: a split service at the advisor's ratio against an unsplit one on the same cards,
for the advisor's three workloads, measured through the gateway on the demo fleet.

Run: `.venv/bin/python tests/benchmarks/bench_pd_split.py`. Prints figures; asserts nothing.

For each workload (long prompts and short answers, the reverse, chat):

1. `explain` of the model split on the H100 pair gives the advisor's ratio;
2. that ratio, fitted to `CARDS` cards (one card a worker), is applied as a
   disaggregated service behind a gateway, and loaded for `DURATION_S` by
   `CONCURRENCY` streaming clients sending the workload's prompt with
   `ignore_eos` (every answer `output_tokens` long);
3. the same `CARDS` cards as `CARDS` ordinary replicas, loaded the same way.

The figures are the sim's, not a GPU's: it writes a token every
`LLMGW_SIM_TOKEN_S` per sequence, reads a prompt on its one compute at
`LLMGW_SIM_PREFILL_S` a token (every answer that replica writes waits
meanwhile), and a decode worker waits for the prompt's KV at its path's
speed. What it shows is the shape: where a prompt's read stalls answers,
splitting pays in time between tokens; where answers are long and prompts
short, the prefill workers idle. The sim's time is scaled down from an H100's
(a token in 2 ms rather than about 7 ms for an 8B model) so a run takes
minutes.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import _paths  # noqa: F401  (tests/support on the path)

os.environ["LLMGW_SIM_TOKEN_S"] = "0.002"
os.environ["LLMGW_SIM_PREFILL_S"] = "0.00001"

import httpx
from ports import free_port
from serve_demo_harness import Demo

MODEL = "catalog:meta-llama/Llama-3.1-8B-Instruct"
SERVED = "meta-llama/Llama-3.1-8B-Instruct"
CARDS = 8
CONCURRENCY = 24
DURATION_S = float(os.environ.get("BENCH_DURATION_S") or 15)
WORKLOADS = (
    ("long prompts, short answers", 8000, 200, 2.0, 0.05),
    ("short prompts, long answers", 200, 2000, 1.0, 0.05),
    ("chat", 1500, 300, 1.0, 0.05),
)
BASE = {
    "model": MODEL,
    "context": 16384,
    "engine": "vllm",
    "gpu_class": "h100-80g",
    "gpus": 1,
    "concurrency": 16,
}


def fitted(ratio: str, cards: int) -> tuple[int, int]:
    """The advisor's `p:d` fitted to `cards` one-card workers, each side at least one."""
    prefill, decode = (int(x) for x in ratio.split(":"))
    chosen = min(max(1, round(cards * prefill / (prefill + decode))), cards - 1)
    return chosen, cards - chosen


async def load(url: str, prompt_tokens: int, output_tokens: int) -> dict[str, Any]:
    """`CONCURRENCY` streaming clients for `DURATION_S`: requests a second, tokens a second,
    mean time to first token and between tokens."""
    body = {
        "model": SERVED,
        "prompt": "w " * prompt_tokens,
        "max_tokens": output_tokens,
        "ignore_eos": True,
        "stream": True,
    }
    done: list[tuple[float, float, int]] = []  # (ttft, mean gap, tokens)
    failed = 0
    deadline = time.monotonic() + DURATION_S
    limits = httpx.Limits(max_connections=CONCURRENCY * 2)
    async with httpx.AsyncClient(timeout=300, limits=limits) as client:

        async def one_client() -> None:
            nonlocal failed
            while time.monotonic() < deadline:
                started = time.monotonic()
                stamps: list[float] = []
                try:
                    async with client.stream("POST", url + "/v1/completions", json=body) as got:
                        if got.status_code != 200:
                            failed += 1
                            await got.aread()
                            continue
                        async for line in got.aiter_lines():
                            if line.startswith("data: {"):
                                stamps.append(time.monotonic())
                except httpx.HTTPError:
                    failed += 1
                    continue
                if len(stamps) > 1:
                    gaps = (stamps[-1] - stamps[0]) / (len(stamps) - 1)
                    done.append((stamps[0] - started, gaps, output_tokens))

        began = time.monotonic()
        await asyncio.gather(*(one_client() for _ in range(CONCURRENCY)))
        wall_s = time.monotonic() - began
    return {
        "requests_per_s": round(len(done) / wall_s, 2),
        "tokens_per_s": round(sum(t for _, _, t in done) / wall_s),
        "ttft_s": round(statistics.fmean(t for t, _, _ in done), 3) if done else None,
        "itl_ms": round(1000 * statistics.fmean(g for _, g, _ in done), 2) if done else None,
        "failed": failed,
    }


def measure(demo: Demo, service: dict, prompt_tokens: int, output_tokens: int) -> dict:
    """Apply `service` behind a fresh gateway, load it, stop both."""
    from llmgw_core.gateway.run import find_gateway
    from llmgw_core.serve.http import EngineReach

    port = free_port()
    applied = demo.step("apply", service={**service, "gateway": {"name": "bench", "port": port}})
    assert applied.ok, applied.error
    reach = EngineReach(demo.fleet)
    try:
        gateway = demo.loop.run(find_gateway(demo.fleet, "bench"))
        tunnel = demo.loop.run(reach.tunnel(gateway.node, port))
        return demo.loop.run(load(tunnel.url, prompt_tokens, output_tokens), DURATION_S + 600)
    finally:
        demo.loop.run(reach.close())
        demo.step("stop", service=service["name"])
        demo.step("stop", gateway="bench")


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="bench-pd-") as folder:
        demo = Demo(Path(folder))
        try:
            print(
                f"{MODEL} on {CARDS} h100-80g cards of the demo's H100 pair, one card a worker; "
                f"{CONCURRENCY} streaming clients for {DURATION_S:g} s each"
            )
            for label, prompt, output, ttft, itl in WORKLOADS:
                workload = {
                    "input_tokens": prompt,
                    "output_tokens": output,
                    "ttft_s": ttft,
                    "itl_s": itl,
                }
                explained = demo.step(
                    "explain",
                    **BASE,
                    disaggregation={"auto": True, "workload": workload},
                )
                advice = explained.result["disaggregation"]["advice"]
                prefill, decode = fitted(advice["ratio"], CARDS)
                split = {
                    **BASE,
                    "name": "split",
                    "disaggregation": {
                        "prefill": {"replicas": prefill},
                        "decode": {"replicas": decode},
                    },
                }
                whole = {**BASE, "name": "whole", "replicas": CARDS}
                split_figures = measure(demo, split, prompt, output)
                whole_figures = measure(demo, whole, prompt, output)
                pays = "pays" if advice["pays"] else "does not pay"
                print(f"\n{label} ({prompt} in, {output} out): advisor {pays} at {advice['ratio']}")
                print(f"  split {prefill}:{decode}   {split_figures}")
                print(f"  unsplit ×{CARDS}   {whole_figures}")
        finally:
            demo.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
