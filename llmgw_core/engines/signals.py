"""What an engine says about its own load on `/metrics`, read from its Prometheus text (pure).

Each engine names its requests in flight differently:

| engine | running | waiting |
|---|---|---|
| vLLM | `vllm:num_requests_running` | `vllm:num_requests_waiting` |
| SGLang | `sglang:num_running_reqs` | `sglang:num_queue_reqs` |
| llama-server (`--metrics`) | `llamacpp:requests_processing` | `llamacpp:requests_deferred` |

llama-cpp-python's server publishes no metrics: its requests in flight cannot be read.
"""

from __future__ import annotations

import math
import re

IN_FLIGHT: dict[str, tuple[str, str]] = {
    "vllm": ("vllm:num_requests_running", "vllm:num_requests_waiting"),
    "sglang": ("sglang:num_running_reqs", "sglang:num_queue_reqs"),
    "llama.cpp": ("llamacpp:requests_processing", "llamacpp:requests_deferred"),
}
"""Per engine, the gauges of its requests being answered and waiting (summed over labels)."""

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
