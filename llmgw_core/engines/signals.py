"""What an engine says about its own load on `/metrics`, read from its Prometheus text (pure).

Each engine names its requests in flight differently:

| engine | running | waiting |
|---|---|---|
| vLLM | `vllm:num_requests_running` | `vllm:num_requests_waiting` |
| SGLang | `sglang:num_running_reqs` | `sglang:num_queue_reqs` |
| llama-server (`--metrics`) | `llamacpp:requests_processing` | `llamacpp:requests_deferred` |

Each publishes the share of its KV cache in use (0 to 1) as `vllm:kv_cache_usage_perc`
(`vllm:gpu_cache_usage_perc` before vLLM 0.10), `sglang:token_usage` and
`llamacpp:kv_cache_usage_ratio`.

llama-cpp-python's server publishes no metrics: its requests in flight cannot be read.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

IN_FLIGHT: dict[str, tuple[str, str]] = {
    "vllm": ("vllm:num_requests_running", "vllm:num_requests_waiting"),
    "sglang": ("sglang:num_running_reqs", "sglang:num_queue_reqs"),
    "llama.cpp": ("llamacpp:requests_processing", "llamacpp:requests_deferred"),
}
"""Per engine, the gauges of its requests being answered and waiting (summed over labels)."""
KV_USE: dict[str, tuple[str, ...]] = {
    "vllm": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
    "sglang": ("sglang:token_usage",),
    "llama.cpp": ("llamacpp:kv_cache_usage_ratio",),
}
"""Per engine, the gauge of the share of its KV cache in use (the first found is read)."""

_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{[^}]*\})?\s+(\S+)")


def gauge_sums(text: str, names: tuple[str, ...]) -> dict[str, float]:
    """The sum over every label set of each family in `names` found in `text`."""
    found: dict[str, float] = {}
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if not match or match.group(1) not in names:
            continue
        try:
            value = float(match.group(3))
        except ValueError:
            continue
        if math.isfinite(value):
            found[match.group(1)] = found.get(match.group(1), 0.0) + value
    return found


def in_flight(text: str, engine: str) -> int | None:
    """Requests the engine is answering or holding, from its `/metrics`; None when it does not say."""
    names = IN_FLIGHT.get(engine)
    if names is None:
        return None
    found = gauge_sums(text, names)
    if not found:
        return None
    return max(0, round(sum(found.values())))


@dataclass(frozen=True)
class Load:
    """What one engine says of its load at one moment.

    Attributes:
        running: requests being answered.
        waiting: requests queued for a slot.
        kv_use: the share of its KV cache in use (None when it does not say).
    """

    running: int
    waiting: int
    kv_use: float | None


def engine_load(text: str, engine: str) -> Load | None:
    """An engine's load from its `/metrics`; None when it publishes no count of its requests."""
    names = IN_FLIGHT.get(engine)
    if names is None:
        return None
    kv_names = KV_USE.get(engine, ())
    found = gauge_sums(text, (*names, *kv_names))
    if names[0] not in found and names[1] not in found:
        return None
    kv = next((found[name] for name in kv_names if name in found), None)
    return Load(
        running=max(0, round(found.get(names[0], 0.0))),
        waiting=max(0, round(found.get(names[1], 0.0))),
        kv_use=None if kv is None else min(1.0, max(0.0, kv)),
    )
