"""What each replica's engine says of its load, now and over the last minute.

Rank 0's `/metrics`, read through the console's tunnel with the replica's
key and pinned to its certificate (`engine_metrics`), says the requests
running and waiting and the KV cache in use (`engines.signals`), and its
histograms and token counters give the last minute's latency and tokens per
second (`engines.latency`). A `LoadWatch` keeps each replica's minute across
reads, and the trend of its p99 time to first token for a sparkline: the
replicas screen reads every poll; `keep` keeps its own windows.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import httpx

from llmgw_core.engines.latency import Latency, Window, scrape
from llmgw_core.engines.signals import engine_load
from llmgw_core.errors import BadInput, LlmgwError
from llmgw_core.serve.http import EngineReach, engine_tls
from llmgw_core.serve.keys import operator_key
from llmgw_core.serve.view import ReplicaView

METRICS_TIMEOUT_S = 5.0
TREND_POINTS = 60
"""The p99 time to first token of the last this many reads, for a sparkline."""


def engine_key(view: ReplicaView) -> str | None:
    """The key the replica's engines take (from the operator's environment), None for none."""
    if view.api_key_env is None:
        return None
    with contextlib.suppress(BadInput):
        return operator_key(view.api_key_env, "the replica's key")
    return None


async def engine_metrics(reach: EngineReach, view: ReplicaView) -> str | None:
    """The text of rank 0's `/metrics` (through a tunnel, with its key); None when it does not
    answer with one."""
    try:
        node, port, _ = view.ready_engine()
    except LlmgwError:
        return None
    key = engine_key(view)
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    # Pinned to the replica's certificate: a process that took a dead engine's port is
    # sent neither this request nor the key.
    tls = engine_tls(view.tls_cert)
    try:
        tunnel = await reach.tunnel(node, port, view.http_host)
        async with tunnel.client(timeout=METRICS_TIMEOUT_S, tls=tls) as client:
            response = await client.get(tunnel.base(tls) + "/metrics", headers=headers)
    except (httpx.HTTPError, LlmgwError, OSError):
        return None
    return response.text if response.status_code == 200 else None


@dataclass(frozen=True)
class ReplicaLoad:
    """One replica's engine as last read.

    Attributes:
        running, waiting: requests being answered and queued (None: it does not say).
        kv_use: the share of its KV cache in use (None: it does not say).
        latency: the last minute's figures (None before two reads).
        ttft_trend: the p99 time to first token at each of the last reads (seconds; a
            read with no request in its minute counts 0).
    """

    running: int | None
    waiting: int | None
    kv_use: float | None
    latency: Latency | None
    ttft_trend: tuple[float, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {
            "running": self.running,
            "waiting": self.waiting,
            "kv_use": self.kv_use,
            **(self.latency.as_dict() if self.latency is not None else {}),
        }


class LoadWatch:
    """Each replica's minute of reads, kept across reads (forgotten when it is gone)."""

    def __init__(self) -> None:
        self.windows: dict[str, Window] = {}
        self.trends: dict[str, deque[float]] = {}

    def add(self, name: str, engine: str, text: str, at: float) -> ReplicaLoad:
        """What one read of replica `name`'s `/metrics` says, with the minute before it."""
        window = self.windows.setdefault(name, Window())
        window.add(scrape(text, engine, at))
        latency = window.latency()
        trend = self.trends.setdefault(name, deque(maxlen=TREND_POINTS))
        if latency is not None:
            trend.append(latency.ttft_p99 or 0.0)
        load = engine_load(text, engine)
        return ReplicaLoad(
            running=load.running if load else None,
            waiting=load.waiting if load else None,
            kv_use=load.kv_use if load else None,
            latency=latency,
            ttft_trend=tuple(trend),
        )

    def keep_only(self, names: Iterable[str]) -> None:
        """Forget the replicas not named (stopped, gone)."""
        alive = set(names)
        for gone in set(self.windows) - alive:
            del self.windows[gone]
            self.trends.pop(gone, None)


async def read_loads(
    reach: EngineReach, views: Iterable[ReplicaView], watch: LoadWatch
) -> dict[str, ReplicaLoad]:
    """Every ready replica's engine read side by side, into `watch`; a replica whose engine
    does not answer is left out."""
    ready = [v for v in views if v.phase == "ready"]
    texts = await asyncio.gather(*(engine_metrics(reach, v) for v in ready))
    at = time.monotonic()
    watch.keep_only(v.name for v in ready)
    return {
        view.name: watch.add(view.name, str(view.spec.get("engine") or ""), text, at)
        for view, text in zip(ready, texts, strict=True)
        if text is not None
    }
