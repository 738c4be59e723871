"""Each engine's latency and throughput over the last minute, from its own `/metrics` (pure).

vLLM and SGLang publish Prometheus histograms of every request's time to
first token, inter-token latency, end-to-end latency and time queued, and
counters of the prompt and generated tokens:

| figure | vLLM 0.32 | SGLang 0.5 |
|---|---|---|
| time to first token | `vllm:time_to_first_token_seconds` | `sglang:time_to_first_token_seconds` |
| inter-token latency | `vllm:inter_token_latency_seconds` | `sglang:inter_token_latency_seconds` |
| end to end | `vllm:e2e_request_latency_seconds` | `sglang:e2e_request_latency_seconds` |
| queued | `vllm:request_queue_time_seconds` | `sglang:queue_time_seconds` |
| tokens in, out | `vllm:prompt_tokens_total`, `vllm:generation_tokens_total` | `sglang:prompt_tokens_total`, `sglang:generation_tokens_total` |

llama-server (`--metrics`) publishes no histogram, only totals
(`llamacpp:prompt_tokens_total`, `llamacpp:tokens_predicted_total`): its
tokens per second are read, its percentiles are not. llama-cpp-python's
server publishes nothing.

A percentile over a window is Prometheus's `histogram_quantile` of the
buckets' increase over that window: the bucket the rank falls in, and a
straight line inside it. A `Window` keeps an engine's scrapes of the last
`WINDOW_S`; a restarted engine (a count that went down) starts it anew.
"""

from __future__ import annotations

import math
import re
from collections import deque
from dataclasses import dataclass

WINDOW_S = 60.0

HISTOGRAMS: dict[str, dict[str, str]] = {
    "vllm": {
        "ttft": "vllm:time_to_first_token_seconds",
        "itl": "vllm:inter_token_latency_seconds",
        "e2e": "vllm:e2e_request_latency_seconds",
        "queue": "vllm:request_queue_time_seconds",
    },
    "sglang": {
        "ttft": "sglang:time_to_first_token_seconds",
        "itl": "sglang:inter_token_latency_seconds",
        "e2e": "sglang:e2e_request_latency_seconds",
        "queue": "sglang:queue_time_seconds",
    },
}
"""Per engine, the histogram of each latency it publishes."""
TOKENS: dict[str, tuple[str, str]] = {
    "vllm": ("vllm:prompt_tokens_total", "vllm:generation_tokens_total"),
    "sglang": ("sglang:prompt_tokens_total", "sglang:generation_tokens_total"),
    "llama.cpp": ("llamacpp:prompt_tokens_total", "llamacpp:tokens_predicted_total"),
}
"""Per engine, its counters of prompt tokens read and tokens generated."""

_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{([^}]*)\})?\s+(\S+)")
_LE = re.compile(r'(?:^|,)\s*le="([^"]*)"')


@dataclass(frozen=True)
class Histogram:
    """One histogram summed over its label sets: cumulative counts by upper bound, and count."""

    buckets: tuple[tuple[float, float], ...]
    count: float

    def minus(self, before: Histogram) -> Histogram | None:
        """What was observed since `before`; None when a count went down (a restart)."""
        earlier = dict(before.buckets)
        if self.count < before.count:
            return None
        found = []
        for bound, cumulative in self.buckets:
            gained = cumulative - earlier.get(bound, 0.0)
            if gained < 0:
                return None
            found.append((bound, gained))
        return Histogram(tuple(found), self.count - before.count)

    def plus(self, other: Histogram) -> Histogram:
        """Both together (the same engine's buckets; a bound only one has is kept as it is)."""
        mine, theirs = dict(self.buckets), dict(other.buckets)
        bounds = sorted(set(mine) | set(theirs))
        summed = tuple((b, mine.get(b, 0.0) + theirs.get(b, 0.0)) for b in bounds)
        return Histogram(summed, self.count + other.count)

    def quantile(self, q: float) -> float | None:
        """The `q` quantile (0 to 1) as Prometheus's `histogram_quantile` reads it; None when
        nothing was observed."""
        if self.count <= 0 or not self.buckets:
            return None
        rank = q * self.count
        lower, below = 0.0, 0.0
        for bound, cumulative in self.buckets:
            if cumulative >= rank:
                if math.isinf(bound):
                    return lower  # beyond the last finite bound: that bound, as Prometheus
                inside = cumulative - below
                share = (rank - below) / inside if inside > 0 else 1.0
                return lower + (bound - lower) * share
            lower, below = bound, cumulative
        return lower


def read_histograms(text: str, names: tuple[str, ...]) -> dict[str, Histogram]:
    """Each histogram of `names` in a Prometheus text, its label sets (but `le`) summed."""
    buckets: dict[str, dict[float, float]] = {}
    counts: dict[str, float] = {}
    wanted = set(names)
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match is None:
            continue
        sample, labels, raw = match.groups()
        try:
            value = float(raw)
        except ValueError:
            continue
        if not math.isfinite(value) or value < 0:
            continue
        if sample.endswith("_bucket") and sample[: -len("_bucket")] in wanted:
            le = _LE.search(labels or "")
            if le is None:
                continue
            try:
                bound = float(le.group(1))
            except ValueError:
                continue
            family = buckets.setdefault(sample[: -len("_bucket")], {})
            family[bound] = family.get(bound, 0.0) + value
        elif sample.endswith("_count") and sample[: -len("_count")] in wanted:
            name = sample[: -len("_count")]
            counts[name] = counts.get(name, 0.0) + value
    return {
        name: Histogram(tuple(sorted(found.items())), counts.get(name, 0.0))
        for name, found in buckets.items()
    }


def read_totals(text: str, names: tuple[str, ...]) -> dict[str, float]:
    """Each counter of `names` in a Prometheus text, summed over its label sets."""
    found: dict[str, float] = {}
    for line in text.splitlines():
        match = _SAMPLE.match(line)
        if match is None or match.group(1) not in names:
            continue
        try:
            value = float(match.group(3))
        except ValueError:
            continue
        if math.isfinite(value) and value >= 0:
            found[match.group(1)] = found.get(match.group(1), 0.0) + value
    return found


@dataclass(frozen=True)
class Scrape:
    """One engine's figures at one moment: its histograms by figure, its token totals."""

    at: float
    histograms: dict[str, Histogram]
    tokens_in: float | None
    tokens_out: float | None


def scrape(text: str, engine: str, at: float) -> Scrape:
    """What an engine's `/metrics` text says, taken at `at` (seconds, monotonic)."""
    families = HISTOGRAMS.get(engine, {})
    read = read_histograms(text, tuple(families.values()))
    names = TOKENS.get(engine)
    totals = read_totals(text, names) if names else {}
    return Scrape(
        at=at,
        histograms={figure: read[name] for figure, name in families.items() if name in read},
        tokens_in=totals.get(names[0]) if names else None,
        tokens_out=totals.get(names[1]) if names else None,
    )


@dataclass(frozen=True)
class Latency:
    """An engine's figures over its window (None where it does not say, or saw nothing).

    Attributes:
        seconds: how long the window spans.
        requests: requests that ended in it (its end-to-end histogram's count).
    """

    seconds: float
    requests: float | None
    ttft_p50: float | None
    ttft_p99: float | None
    itl_p50: float | None
    itl_p99: float | None
    tokens_in_per_s: float | None
    tokens_out_per_s: float | None

    def as_dict(self) -> dict[str, float | None]:
        return {
            "seconds": round(self.seconds, 1),
            "requests": self.requests,
            "ttft_p50_s": _round(self.ttft_p50),
            "ttft_p99_s": _round(self.ttft_p99),
            "itl_p50_s": _round(self.itl_p50),
            "itl_p99_s": _round(self.itl_p99),
            "tokens_in_per_s": _round(self.tokens_in_per_s, 1),
            "tokens_out_per_s": _round(self.tokens_out_per_s, 1),
        }


def seconds_text(seconds: float) -> str:
    """A latency as an operator reads it: `850 ms`, `2.4 s`."""
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.1f} s"


def _round(value: float | None, digits: int = 4) -> float | None:
    return None if value is None else round(value, digits)


class Window:
    """One engine's scrapes over the last `seconds`, and what they say together."""

    def __init__(self, seconds: float = WINDOW_S) -> None:
        self.seconds = seconds
        self.scrapes: deque[Scrape] = deque()

    def add(self, taken: Scrape) -> None:
        """Keep `taken`; drop what fell out of the window (one scrape older is kept, as the
        window's start) and everything before a restart."""
        if self.scrapes and _restarted(self.scrapes[-1], taken):
            self.scrapes.clear()
        self.scrapes.append(taken)
        while len(self.scrapes) > 2 and self.scrapes[1].at <= taken.at - self.seconds:
            self.scrapes.popleft()

    def gained(self) -> dict[str, Histogram]:
        """Each histogram's observations over the window (empty with fewer than two scrapes)."""
        if len(self.scrapes) < 2:
            return {}
        first, last = self.scrapes[0], self.scrapes[-1]
        found = {}
        for figure, now in last.histograms.items():
            before = first.histograms.get(figure)
            delta = now if before is None else now.minus(before)
            if delta is not None:
                found[figure] = delta
        return found

    def latency(self) -> Latency | None:
        """The window's figures; None before two scrapes."""
        return combined([self])


def combined(windows: list[Window]) -> Latency | None:
    """The figures of several engines' windows together (a service's replicas): their
    histograms' increases summed, their token rates added; None when none has two scrapes."""
    spans = [w for w in windows if len(w.scrapes) >= 2]
    if not spans:
        return None
    gained: dict[str, Histogram] = {}
    rates_in: list[float] = []
    rates_out: list[float] = []
    for window in spans:
        for figure, delta in window.gained().items():
            gained[figure] = gained[figure].plus(delta) if figure in gained else delta
        first, last = window.scrapes[0], window.scrapes[-1]
        span = last.at - first.at
        for rates, now, before in (
            (rates_in, last.tokens_in, first.tokens_in),
            (rates_out, last.tokens_out, first.tokens_out),
        ):
            if span > 0 and now is not None and before is not None and now >= before:
                rates.append((now - before) / span)

    def quantile(figure: str, q: float) -> float | None:
        found = gained.get(figure)
        return found.quantile(q) if found is not None else None

    e2e = gained.get("e2e")
    return Latency(
        seconds=max(w.scrapes[-1].at - w.scrapes[0].at for w in spans),
        requests=e2e.count if e2e is not None else None,
        ttft_p50=quantile("ttft", 0.5),
        ttft_p99=quantile("ttft", 0.99),
        itl_p50=quantile("itl", 0.5),
        itl_p99=quantile("itl", 0.99),
        tokens_in_per_s=sum(rates_in) if rates_in else None,
        tokens_out_per_s=sum(rates_out) if rates_out else None,
    )


def _restarted(before: Scrape, now: Scrape) -> bool:
    for figure, histogram in now.histograms.items():
        earlier = before.histograms.get(figure)
        if earlier is not None and histogram.count < earlier.count:
            return True
    for then, later in ((before.tokens_in, now.tokens_in), (before.tokens_out, now.tokens_out)):
        if then is not None and later is not None and later < then:
            return True
    return False
