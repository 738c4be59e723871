"""Gateways' own Prometheus text, read through SSH tunnels and re-exported with a `gateway` label.

A gateway (a router in front of replicas) serves Prometheus text on its
node's loopback. The console reaches that port as it reaches an engine's —
an SSH tunnel from `EngineReach` — reads the text, parses it with
prometheus_client's parser and re-exports every sample with `gateway` and
`node` labels, so one scrape of llmgw shows every gateway's requests and
errors beside the fleet. Scraping is I/O; relabelling is pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
from prometheus_client.core import Metric
from prometheus_client.parser import text_string_to_metric_families

from llmgw_core.errors import LlmgwError
from llmgw_core.serve.http import EngineReach

SCRAPE_TIMEOUT_S = 5.0
OWN_PREFIX = "llmgw_"
"""Families of ours; a gateway's family with this prefix is not re-exported (it would clash)."""
ADDED_LABELS = ("gateway", "node")


@dataclass(frozen=True)
class GatewayTarget:
    """A gateway's Prometheus port on a node (reached through SSH, on the node's loopback)."""

    name: str
    node: str
    port: int
    path: str = "/metrics"


@dataclass(frozen=True)
class GatewayScrape:
    """One scrape of a gateway: its text, or the sentence why there is none."""

    target: GatewayTarget
    text: str | None = None
    error: str | None = None


def gateway_targets(
    listings: Mapping[str, Sequence[Mapping[str, Any]]],
) -> tuple[GatewayTarget, ...]:
    """The running gateways among the nodes' shard listings (read by `gateway.spec.gateway_views`).

    Args:
        listings: per node, its agent's `shard.list` records.
    """
    from llmgw_core.gateway.spec import gateway_views

    return targets_of(gateway_views(listings))


def targets_of(views: Iterable[Any]) -> tuple[GatewayTarget, ...]:
    """Where to scrape each running gateway: its router's metrics port on its node."""
    return tuple(
        GatewayTarget(name=view.name, node=view.node, port=view.prometheus_port)
        for view in views
        if view.phase == "running" and 0 < view.prometheus_port < 65536
    )


async def scrape_gateway(reach: EngineReach, target: GatewayTarget) -> GatewayScrape:
    """Read a gateway's Prometheus text through an SSH tunnel to its node."""
    try:
        base = await reach.base_url(target.node, target.port)
        async with httpx.AsyncClient(timeout=SCRAPE_TIMEOUT_S) as client:
            response = await client.get(base + target.path)
    except LlmgwError as exc:
        return GatewayScrape(target, error=exc.sentence())
    except httpx.HTTPError as exc:
        why = str(exc) or type(exc).__name__
        return GatewayScrape(target, error=f"{target.name} on {target.node} did not answer: {why}")
    if response.status_code != 200:
        return GatewayScrape(
            target,
            error=f"{target.name} on {target.node} answered {response.status_code} on {target.path}",
        )
    return GatewayScrape(target, text=response.text)


def _families(scrape: GatewayScrape) -> list[Metric]:
    """The scrape's families, parsed; a text that is not Prometheus text raises ValueError."""
    return list(text_string_to_metric_families(scrape.text or ""))


def relabel(scrapes: Iterable[GatewayScrape]) -> tuple[tuple[Metric, ...], dict[str, str]]:
    """Every gateway's families merged by name, each sample labelled with its gateway and node.

    A label the gateway already uses under one of those names is kept as
    `exported_<name>`, as Prometheus itself does on a clash.

    Returns:
        The merged families, and per gateway that could not be read, why.
    """
    merged: dict[str, Metric] = {}
    failed: dict[str, str] = {}
    for scrape in scrapes:
        name, node = scrape.target.name, scrape.target.node
        if scrape.text is None:
            failed[name] = scrape.error or f"{name} on {node} sent nothing"
            continue
        try:
            families = _families(scrape)
        except ValueError as exc:
            failed[name] = f"{name} on {node} sent text that is not Prometheus text: {exc}"
            continue
        for family in families:
            if family.name.startswith(OWN_PREFIX):
                continue
            into = merged.get(family.name)
            if into is None:
                into = Metric(family.name, family.documentation, family.type, family.unit)
                merged[family.name] = into
            for sample in family.samples:
                labels = dict(sample.labels)
                for added in ADDED_LABELS:
                    if added in labels:
                        labels[f"exported_{added}"] = labels.pop(added)
                labels.update(gateway=name, node=node)
                into.add_sample(sample.name, labels, sample.value, sample.timestamp)
    return tuple(merged.values()), failed
