"""Prometheus metrics: what the fleet, its replicas, its fabric and its gateways look like now.

`families` turns one `MetricsSnapshot` (a fleet snapshot, whose facts carry
the fabric verdicts the nodes keep, the replicas reassembled from it, the
gateways' scraped samples) into Prometheus metric families — pure, tested
with plain values.
`exporter` serves the latest snapshot over HTTP with prometheus_client's own
server, so a scrape never waits on SSH; `gateway` reads gateways' Prometheus
text through SSH tunnels and re-exports it with a `gateway` label;
`sources` gathers a snapshot from a live fleet.

Imports the serve and fabric layers below it; never the script runner or
the console.
"""

DEFAULT_HOST = "127.0.0.1"
"""Where the endpoint binds unless told otherwise: only this machine can scrape it."""
