"""The sim engine's latency histograms, named and bounded as vLLM 0.32 publishes them.

What a real engine measures inside itself, the sim measures of its own pace:
a request's time queued for a sequence slot (which grows with the load), its
time to first token (queued, then one token's time), each gap between
tokens, and its whole time. SGLang's families carry the same figures under
SGLang's names (`sglang:queue_time_seconds` for the queue); the sim gives
them vLLM's bucket bounds. llama-server publishes no histogram, and neither
does the sim in its place.
"""

from __future__ import annotations

import threading

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Dict, List, Tuple

TTFT_BOUNDS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
    10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
ITL_BOUNDS = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0,
)  # fmt: skip
REQUEST_BOUNDS = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0,
    240.0, 480.0, 960.0, 1920.0, 7680.0,
)  # fmt: skip
"""vLLM 0.32's default bounds (`vllm/v1/metrics/buckets.py`)."""

FAMILIES = {
    "vllm": (
        ("ttft", "vllm:time_to_first_token_seconds", TTFT_BOUNDS),
        ("itl", "vllm:inter_token_latency_seconds", ITL_BOUNDS),
        ("e2e", "vllm:e2e_request_latency_seconds", REQUEST_BOUNDS),
        ("queue", "vllm:request_queue_time_seconds", REQUEST_BOUNDS),
    ),
    "sglang": (
        ("ttft", "sglang:time_to_first_token_seconds", TTFT_BOUNDS),
        ("itl", "sglang:inter_token_latency_seconds", ITL_BOUNDS),
        ("e2e", "sglang:e2e_request_latency_seconds", REQUEST_BOUNDS),
        ("queue", "sglang:queue_time_seconds", REQUEST_BOUNDS),
    ),
}


class Histogram:
    """Counts by bound, a count and a sum, as prometheus_client keeps them."""

    def __init__(self, bounds: Tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts: List[int] = [0] * len(bounds)
        self.count = 0
        self.sum = 0.0

    def observe(self, value: float, times: int = 1) -> None:
        for index, bound in enumerate(self.bounds):
            if value <= bound:
                self.counts[index] += times
                break
        self.count += times
        self.sum += value * times

    def lines(self, name: str, labels: str) -> List[str]:
        out = [
            "# HELP {} The simulated engine's {}.".format(name, name),
            "# TYPE {} histogram".format(name),
        ]
        cumulative = 0
        for bound, count in zip(self.bounds, self.counts):
            cumulative += count
            out.append('{}_bucket{{le="{}",{}}} {}'.format(name, bound, labels, cumulative))
        out.append('{}_bucket{{le="+Inf",{}}} {}'.format(name, labels, self.count))
        out.append("{}_count{{{}}} {}".format(name, labels, self.count))
        out.append("{}_sum{{{}}} {}".format(name, labels, round(self.sum, 6)))
        return out


class Latencies:
    """One engine's histograms (none for an engine that publishes none)."""

    def __init__(self, kind: str) -> None:
        self.lock = threading.Lock()
        self.families = FAMILIES.get(kind, ())
        self.histograms: Dict[str, Histogram] = {
            figure: Histogram(bounds) for figure, _name, bounds in self.families
        }

    def request(self, queued_s: float, token_s: float, tokens: int) -> None:
        """One request answered: `queued_s` waiting for a slot, then `tokens` at `token_s`."""
        if not self.histograms:
            return
        with self.lock:
            self.histograms["queue"].observe(queued_s)
            self.histograms["ttft"].observe(queued_s + token_s)
            if tokens > 1:
                self.histograms["itl"].observe(token_s, tokens - 1)
            self.histograms["e2e"].observe(queued_s + token_s * max(tokens, 1))

    def text(self, labels: str) -> str:
        """The histograms in Prometheus's text format ("" for an engine without them)."""
        with self.lock:
            lines: List[str] = []
            for figure, name, _bounds in self.families:
                lines += self.histograms[figure].lines(name, labels)
        return "".join(line + "\n" for line in lines)
