"""Benchmark: `serve` to the first answered request, for the real vLLM and the real llama.cpp.

Run: `.venv/bin/python tests/benchmarks/bench_serve_real_engines.py [ROUNDS]`. Prints
figures; asserts nothing. This machine is the CPU node (`this_machine`: the real
agent behind asyncssh's server on loopback), the console runs as a person runs it
(`llmgw-tui --run` with `serve`, `ask`, `logs` and `stop`), and the figures come from
the console's own trace: placed → process running → health answered, then the
first `ask`. vLLM is `.ci/install-vllm`'s CPU build serving the tiny random Llama
(`tiny_hf_llama.py`, eager mode); llama.cpp is llama-cpp-python's server with the
tiny GGUF (`tiny_gguf.py`). For vLLM the plan's KV cache is printed beside what the
engine logged. An engine that is not installed is said and skipped.
"""

from __future__ import annotations

import importlib.util
import json
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import _paths  # noqa: F401  (tests/support on the path)
from real_vllm import VLLM, make_tiny_llama
from this_machine import run_script_on_this_machine
from tiny_gguf import write_tiny_llama_gguf


def _at(trace: list[dict[str, str]], step: str) -> datetime:
    return next(datetime.fromisoformat(e["at"]) for e in trace if e["step"] == step)


def one_run(folder: Path, engine: str) -> dict[str, float | int | str]:
    """One serve → ask → stop of `engine`; the console's figures."""
    models = folder / "models"
    if engine == "vllm":
        model = make_tiny_llama(models / "tiny")
        serve = (
            f"  - serve: {{model: {model}, engine: vllm, context: 512, name: tiny,"
            " timeout: 400, engine_args: {enforce_eager: true}}\n"
        )
        engines = {"vllm": {"bin": str(VLLM)}}
    else:
        model = write_tiny_llama_gguf(models / "tiny" / "tiny.gguf")
        serve = f"  - serve: {{model: {model}, engine: llama.cpp, context: 256, name: tiny}}\n"
        engines = {}
    steps = (
        f"  - plan: {{model: {model}, context: {512 if engine == 'vllm' else 256}}}\n"
        + serve
        + '  - ask: {replica: tiny, prompt: "Who are you?", max_tokens: 8}\n'
        + "  - replicas: {}\n"
        + "  - stop: {replica: tiny}\n"
    )
    began = time.perf_counter()
    done, _ = run_script_on_this_machine(
        folder, steps, models, str(folder), engines=engines, timeout=600
    )
    wall_s = time.perf_counter() - began
    if done.returncode != 0:
        raise RuntimeError(done.stdout[-2000:] + done.stderr[-2000:])
    planned, served, asked, listed, _ = [json.loads(x)["result"] for x in done.stdout.splitlines()]
    trace = served["trace"]
    placed = _at(trace, "placed")
    figures: dict[str, float | int | str] = {
        "placed → process running s": (_at(trace, "process running") - placed).total_seconds(),
        "placed → health answered s": (_at(trace, "health answered") - placed).total_seconds(),
        "serve step → first answer s": (_at(trace, "health answered") - placed).total_seconds()
        + float(asked["latency_s"]),
        "first ask latency s": float(asked["latency_s"]),
        "whole llmgw-tui run s": wall_s,
    }
    if engine == "vllm":
        way = next(w for w in planned["options"] if w["engine"] == "vllm")
        logged = listed["replicas"][0]["figures"]
        figures["plan: KV GiB / tokens / concurrency"] = (
            f"{way['cpu_kv_cache_gib']} / {way['kv_tokens']:,} / {way['max_concurrency']:.2f}"
        )
        figures["vLLM logged: KV GiB / tokens / concurrency"] = (
            f"{logged.get('kv_cache_gib')} / {logged.get('kv_tokens', 0):,} / "
            f"{logged.get('kv_concurrency', 0):.2f}"
        )
    return figures


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    available = {
        "vllm": VLLM.exists(),
        "llama.cpp": importlib.util.find_spec("llama_cpp") is not None,
    }
    for engine, present in available.items():
        if not present:
            print(f"{engine}: not installed here, skipped (.ci/run installs both)")
            continue
        runs = []
        for _ in range(rounds):
            with tempfile.TemporaryDirectory() as scratch:
                runs.append(one_run(Path(scratch), engine))
        print(f"\n{engine}, {rounds} rounds (median, min–max):")
        for key in runs[0]:
            values = [run[key] for run in runs]
            if isinstance(values[0], str):
                print(f"  {key:44} {values[0]}")
                continue
            numbers = [float(v) for v in values]
            print(
                f"  {key:44} {statistics.median(numbers):7.2f}"
                f"  ({min(numbers):.2f}–{max(numbers):.2f})"
            )


if __name__ == "__main__":
    main()
