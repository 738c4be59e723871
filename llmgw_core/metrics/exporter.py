"""Serve the latest metrics snapshot over HTTP with prometheus_client's own server.

The collector only reads the snapshot it was last given: gathering (SSH,
agents, gateways) happens elsewhere on a timer, so a scrape answers at once
and never waits on a node. The server binds 127.0.0.1 unless told otherwise.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from prometheus_client.core import Metric
from prometheus_client.registry import Collector, CollectorRegistry

from llmgw_core.errors import BadInput
from llmgw_core.metrics import DEFAULT_HOST
from llmgw_core.metrics.families import MetricsSnapshot, all_families


class SnapshotCollector(Collector):
    """A prometheus_client collector over the latest `MetricsSnapshot` (none: nothing yet).

    The families are built on the scrape's own thread (never on the caller's
    event loop) the first time a snapshot is scraped, and reused until the
    next snapshot: two scrapers of one snapshot pay once.
    """

    def __init__(self) -> None:
        self._latest: MetricsSnapshot | None = None
        self._built: tuple[MetricsSnapshot | None, list[Metric]] = (None, [])

    def update(self, snapshot: MetricsSnapshot) -> None:
        """Show `snapshot` from the next scrape on (one reference swap: safe across threads)."""
        self._latest = snapshot

    @property
    def latest(self) -> MetricsSnapshot | None:
        """The snapshot a scrape would show now."""
        return self._latest

    def collect(self) -> Iterator[Metric]:
        """Every family of the latest snapshot."""
        snapshot = self._latest
        if snapshot is None:
            return
        built_for, families = self._built
        if built_for is not snapshot:
            families = all_families(snapshot)
            self._built = (snapshot, families)
        yield from families


@dataclass
class MetricsServer:
    """prometheus_client's HTTP server over one collector, on its own thread."""

    collector: SnapshotCollector
    host: str
    port: int
    _server: Any
    _thread: threading.Thread

    @property
    def url(self) -> str:
        """Where Prometheus scrapes it."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/metrics"

    def stop(self) -> None:
        """Stop answering and free the port."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)


def serve_metrics(
    collector: SnapshotCollector, port: int, host: str = DEFAULT_HOST
) -> MetricsServer:
    """Start answering scrapes of `collector` on `host:port` (port 0: any free port).

    Raises:
        BadInput: the port is taken or the address cannot be bound.
    """
    from prometheus_client import start_http_server

    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    try:
        server, thread = start_http_server(port, addr=host, registry=registry)
    except OSError as exc:
        raise BadInput(
            f"cannot serve metrics on {host}:{port}: {exc.strerror or exc}",
            "choose another --metrics-port (or metrics: {port: N})",
        ) from None
    return MetricsServer(collector, host, server.server_address[1], server, thread)
