"""When `keep` scales a service out or in, from what its engines say of their load (pure).

One `Reading` per cycle: the requests waiting per ready replica, the mean
share of KV cache in use (`engines.signals`), and the replicas' p99 time to
first token and inter-token latency over the last minute (their histograms'
increase together: `engines.latency`), read from each engine's own
`/metrics`. The `Scaler` keeps how long each condition has held:

* **out** when the waiting per replica exceeds `target_waiting`, the KV
  cache in use exceeds `target_kv`, or a p99 exceeds `target_ttft_p99_s` or
  `target_itl_p99_s`, continuously for `scale_up_after_s`;
* **in** when every signal with a target stays below half of it for
  `scale_down_after_s` (a latency no request measured counts as low).

After a decision both clocks start again, so one burst is one step, and the
next step waits for the signal to hold again with the new replica counted.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from llmgw_core.engines.latency import seconds_text
from llmgw_core.service.spec import ReplicaBounds


@dataclass(frozen=True)
class Reading:
    """The service's load at one moment.

    Attributes:
        ready: the ready replicas whose engines were read.
        waiting: the requests waiting per ready replica (mean).
        kv_use: the mean share of KV cache in use (None where no engine says).
        ttft_p99: the replicas' p99 time to first token over the last minute, seconds
            (None where no engine says, or no request ended in it).
        itl_p99: the same of the inter-token latency.
    """

    ready: int
    waiting: float
    kv_use: float | None = None
    ttft_p99: float | None = None
    itl_p99: float | None = None


@dataclass(frozen=True)
class Decision:
    """Scale `direction` by one replica, because `why` (the signal, its value, for how long)."""

    direction: Literal["out", "in"]
    why: str


def _g(value: float) -> str:
    return f"{value:.1f}" if value != int(value) or value >= 10 else f"{value:g}"


class Scaler:
    """The clocks of one service's scaling conditions, advanced once per reading."""

    def __init__(self, bounds: ReplicaBounds) -> None:
        self.bounds = bounds
        self.over_since: float | None = None
        self.under_since: float | None = None

    def _over(self, reading: Reading) -> str | None:
        """The signal over its target, in words, or None."""
        target = self.bounds.target_waiting
        if target is not None and reading.waiting > target:
            return f"{_g(reading.waiting)} requests waiting per replica > {_g(target)}"
        kv_target = self.bounds.target_kv
        if kv_target is not None and reading.kv_use is not None and reading.kv_use > kv_target:
            return f"KV cache {reading.kv_use:.0%} in use > {kv_target:.0%}"
        for what, value, limit in self._latencies(reading):
            if limit is not None and value is not None and value > limit:
                return f"{what} p99 {seconds_text(value)} > {seconds_text(limit)}"
        return None

    def _latencies(self, reading: Reading) -> tuple[tuple[str, float | None, float | None], ...]:
        return (
            ("time to first token", reading.ttft_p99, self.bounds.target_ttft_p99_s),
            ("inter-token latency", reading.itl_p99, self.bounds.target_itl_p99_s),
        )

    def _under(self, reading: Reading) -> str | None:
        """Every signal below half its target, in words, or None."""
        said = []
        target = self.bounds.target_waiting
        if target is not None:
            if reading.waiting >= target / 2:
                return None
            said.append(f"{_g(reading.waiting)} requests waiting per replica < {_g(target / 2)}")
        kv_target = self.bounds.target_kv
        if kv_target is not None and reading.kv_use is not None:
            if reading.kv_use >= kv_target / 2:
                return None
            said.append(f"KV cache {reading.kv_use:.0%} in use < {kv_target / 2:.0%}")
        for what, value, limit in self._latencies(reading):
            if limit is None:
                continue
            if value is not None and value >= limit / 2:
                return None
            if value is None:
                said.append(f"no request measured the {what}")
            else:
                said.append(f"{what} p99 {seconds_text(value)} < {seconds_text(limit / 2)}")
        return " and ".join(said) or None

    def step(self, now: float, reading: Reading, replicas: int) -> Decision | None:
        """The decision `reading` (taken at `now`, seconds) leads to with `replicas` running."""
        if reading.ready == 0:
            # Nothing read (healing comes first, or a read failed): no evidence either way.
            return None
        over, under = self._over(reading), self._under(reading)
        if not over:
            self.over_since = None
        elif self.over_since is None:
            self.over_since = now
        if not under:
            self.under_since = None
        elif self.under_since is None:
            self.under_since = now
        if over and self.over_since is not None and replicas < self.bounds.max:
            held = now - self.over_since
            if held >= self.bounds.scale_up_after_s:
                self.over_since = self.under_since = None
                return Decision("out", f"{over} for {held:.0f} s")
        if under and self.under_since is not None and replicas > self.bounds.min:
            held = now - self.under_since
            if held >= self.bounds.scale_down_after_s:
                self.over_since = self.under_since = None
                return Decision("in", f"{under} for {held:.0f} s")
        return None
