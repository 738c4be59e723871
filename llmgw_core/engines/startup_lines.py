"""What an engine said about its memory while it started, read from its first lines (pure).

The plan predicts the weights, the KV cache and the concurrency a replica will
have; the engine prints what it got. Read here, shown beside the plan's
figures on the replica's page and in the `serve` and `replicas` results.

vLLM 0.32, in its own words (`vllm/v1/core/kv_cache_utils.py`,
`v1/worker/gpu_worker.py`, `v1/worker/cpu_worker.py`, `v1/engine/core.py`):

    GPU KV cache size: 1,053,664 tokens, Maximum concurrency for 32,768 tokens per request: 32.16x
    CPU KV cache size: 524,288 tokens, Maximum concurrency for 512 tokens per request: 1024.00x
    Available KV cache memory: 61.28 GiB                          (on cards)
    Explicitly set (1.0/23.54) GiB for KV cache on node 0.        (CPU, VLLM_CPU_KVCACHE_SPACE)
    Auto set (20.1/23.54) GiB for KV cache on node 0, with …      (CPU, sized by itself)
    Model loading took 14.99 GiB memory and 4.212 seconds         (on cards)
    Loading weights took 0.01 seconds
    init engine (profile, create kv cache, warmup model) took 2.59 s

With tensor parallel every rank prints its own KV memory and weights; the
first is read (ranks are cut alike). A line not found leaves its figure out.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

_NUMBER = r"(\d+(?:\.\d+)?)"
_KV_SIZE = re.compile(
    r"\b(GPU|CPU|XPU|TPU)(?: \+ host)? KV cache size: ([\d,]+) tokens, Maximum concurrency"
    rf" for ([\d,]+) tokens per request: {_NUMBER}x"
)
_KV_GPU_GIB = re.compile(rf"Available KV cache memory: {_NUMBER} GiB")
_KV_CPU_GIB = re.compile(
    rf"\b(Explicitly|Auto) set \({_NUMBER}/{_NUMBER}\) GiB for KV cache on node (\d+)"
)
_WEIGHTS = re.compile(rf"Model loading took {_NUMBER} GiB(?: memory)? and {_NUMBER} seconds")
_LOAD = re.compile(rf"Loading weights took {_NUMBER} seconds")
_INIT = re.compile(rf"init engine \(profile, create kv cache, warmup model\) took {_NUMBER} s")


def _whole(text: str) -> int:
    return int(text.replace(",", ""))


def startup_figures(lines: Iterable[str]) -> dict[str, Any]:
    """The figures vLLM printed while it started: `{}` when it printed none (yet).

    Keys, each only when its line was found: `kv_device` ("GPU" | "CPU"),
    `kv_tokens`, `kv_for_tokens` (the context the concurrency is counted for),
    `kv_concurrency`, `kv_cache_gib`, `kv_sized` ("explicit" | "auto", CPU),
    `numa_node_gib` (the NUMA node's RAM, CPU), `weights_gib`, `weights_load_s`, `init_s`.
    """
    found: dict[str, Any] = {}
    for line in lines:
        if "kv_tokens" not in found and (match := _KV_SIZE.search(line)):
            device, tokens, context, concurrency = match.groups()
            found.update(
                kv_device=device,
                kv_tokens=_whole(tokens),
                kv_for_tokens=_whole(context),
                kv_concurrency=float(concurrency),
            )
        elif "kv_cache_gib" not in found and (match := _KV_GPU_GIB.search(line)):
            found["kv_cache_gib"] = float(match.group(1))
        elif "kv_cache_gib" not in found and (match := _KV_CPU_GIB.search(line)):
            how, size, node_total, _node = match.groups()
            found.update(
                kv_cache_gib=float(size),
                kv_sized="explicit" if how == "Explicitly" else "auto",
                numa_node_gib=float(node_total),
            )
        elif "weights_gib" not in found and (match := _WEIGHTS.search(line)):
            found["weights_gib"] = float(match.group(1))
        elif "weights_load_s" not in found and (match := _LOAD.search(line)):
            found["weights_load_s"] = float(match.group(1))
        elif "init_s" not in found and (match := _INIT.search(line)):
            found["init_s"] = float(match.group(1))
    return found


def figures_against_plan(figures: dict[str, Any], way: dict[str, Any]) -> list[str]:
    """A sentence for each figure the engine printed that differs from the plan's.

    Only where the plan fixes the figure: the KV cache's size (vLLM on a CPU node,
    `VLLM_CPU_KVCACHE_SPACE`) and so its tokens; on cards the engine sizes its cache
    from what is free, so no sentence is said about it.
    """
    said: list[str] = []
    planned_gib = way.get("cpu_kv_cache_gib")
    planned_tokens = way.get("kv_tokens")
    got_gib = figures.get("kv_cache_gib")
    got_tokens = figures.get("kv_tokens")
    if planned_gib is not None and got_gib is not None and abs(got_gib - planned_gib) > 0.05:
        said.append(f"its KV cache is {got_gib:g} GiB, and the plan asked for {planned_gib}")
    if planned_tokens is not None and got_tokens is not None and got_tokens != planned_tokens:
        said.append(
            f"its KV cache holds {got_tokens:,} tokens, and the plan counted {planned_tokens:,}"
        )
    return said
