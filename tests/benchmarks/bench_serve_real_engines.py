"""Benchmark: `serve` to the first answered request, for the real vLLM and the real llama.cpp.

Run: `.venv/bin/python tests/benchmarks/bench_serve_real_engines.py [ROUNDS]`. Prints
figures; asserts nothing. The node is the demo's CPU node (`llmgw-tui demo up
--engine ENGINE=PATH`: the real engine runs on this machine in place of the sim),
the console runs as a person runs it (`llmgw-tui --inventory … --run` with `plan`,
`serve`, `ask`, `replicas` and `stop`), and the figures come from the console's own
trace: placed → process running → health answered, then the first `ask`. vLLM is
`.ci/install-vllm`'s CPU build serving the tiny random Llama (`tiny_hf_llama.py`,
eager mode); llama.cpp is `.ci/install-llama-server`'s llama-server and
llama-cpp-python's server, with the tiny GGUF (`tiny_gguf.py`). For vLLM the plan's
KV cache is printed beside what the engine logged. An engine that is not installed
is said and skipped.
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
from kept_demo import kept_demo, run_json
from llamacpp_truth import llama_server
from real_vllm import VLLM, make_tiny_llama
from tiny_gguf import write_tiny_llama_gguf


def _at(trace: list[dict[str, str]], step: str) -> datetime:
    return next(datetime.fromisoformat(e["at"]) for e in trace if e["step"] == step)


def one_run(folder: Path, inventory: str, engine: str) -> dict[str, float | int | str]:
    """One serve → ask → stop of `engine` on the demo's CPU node; the console's figures."""
    models = folder / "models"
    if engine == "vllm":
        model = make_tiny_llama(models / "tiny")
        serve = (
            f"  - serve: {{model: {model}, engine: vllm, gpu_class: cpu, context: 512,"
            " name: tiny, timeout: 400, engine_args: {enforce_eager: true}}\n"
        )
    else:
        model = write_tiny_llama_gguf(models / "tiny" / "tiny.gguf")
        serve = (
            f"  - serve: {{model: {model}, engine: llama.cpp, gpu_class: cpu, context: 256,"
            " name: tiny}\n"
        )
    steps = (
        "steps:\n"
        f"  - plan: {{model: {model}, context: {512 if engine == 'vllm' else 256}}}\n"
        + serve
        + '  - ask: {replica: tiny, prompt: "Who are you?", max_tokens: 8}\n'
        + "  - replicas: {}\n"
        + "  - stop: {replica: tiny}\n"
    )
    began = time.perf_counter()
    code, results, said = run_json(inventory, steps, timeout=600)
    wall_s = time.perf_counter() - began
    if code != 0:
        raise RuntimeError(json.dumps(results)[-2000:] + said[-2000:])
    planned, served, asked, listed, _ = [step["result"] for step in results]
    trace = served["trace"]
    placed = _at(trace, "placed")
    figures: dict[str, float | int | str] = {
        "program": listed["replicas"][0]["shards"][0]["argv"][0],
        "placed → process running s": (_at(trace, "process running") - placed).total_seconds(),
        "placed → health answered s": (_at(trace, "health answered") - placed).total_seconds(),
        "serve step → first answer s": (_at(trace, "health answered") - placed).total_seconds()
        + float(asked["latency_s"]),
        "first ask latency s": float(asked["latency_s"]),
        "whole llmgw-tui run s": wall_s,
    }
    if engine == "vllm":
        way = next(w for w in planned["options"] if w["engine"] == "vllm" and w["on_cpu"])
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
    server = llama_server()
    has_python = importlib.util.find_spec("llama_cpp") is not None
    engines = {
        "vllm": ("vllm", f"vllm={VLLM}" if VLLM.exists() else None),
        "llama.cpp (llama-server)": ("llama.cpp", f"llama.cpp={server}" if server else None),
        "llama.cpp (llama-cpp-python)": (
            "llama.cpp",
            f"llama.cpp={Path(sys.executable).parent / 'python3'}" if has_python else None,
        ),
    }
    for label, (engine, named) in engines.items():
        if named is None:
            print(f"{label}: not installed here, skipped (.ci/run installs it)")
            continue
        runs = []
        with (
            tempfile.TemporaryDirectory() as scratch,
            kept_demo(Path(scratch) / "demo", up_args=(f"--engine={named}",)) as inventory,
        ):
            for round_ in range(rounds):
                folder = Path(scratch) / f"round-{round_}"
                folder.mkdir()
                runs.append(one_run(folder, inventory, engine))
        print(f"\n{label} on the demo's CPU node, {rounds} rounds (median, min–max):")
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
