"""Gateways' own Prometheus text, read through the agents and re-exported with a `gateway` label.

A gateway's front serves Prometheus text (its requests per key and per
worker) on its control socket, which the console reads through the node's
agent; a gateway named in a `metrics` step by node and port (someone else's
router) is read through an SSH tunnel from `EngineReach`. The text is parsed
with prometheus_client's parser and every sample re-exported with `gateway`
and `node` labels, so one scrape of llmgw shows every gateway's requests and
errors beside the fleet. Scraping is I/O; relabelling is pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import SimpleNamespace
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
    """Where a gateway's Prometheus text is read: a gateway shard's front (`shard_id`, through
    its node's agent), or a port on a node (through an SSH tunnel, on the node's loopback).

    Attributes:
        front: a front of ours (families `llmgw_gateway_…`, re-exported as they are).
    """

    name: str
    node: str
    port: int = 0
    path: str = "/metrics"
    front: bool = False
    shard_id: str | None = None


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
    """Where to scrape each running gateway: its front's control socket, through its node's agent."""
    return tuple(
        GatewayTarget(name=view.name, node=view.node, front=True, shard_id=str(view.shard_id))
        for view in views
        if view.phase == "running"
    )


async def scrape_gateway(reach: EngineReach, target: GatewayTarget) -> GatewayScrape:
    """Read a gateway's Prometheus text (its front's, through the agent; else a tunneled port)."""
    if target.shard_id is not None:
        return await _scrape_front(reach, target)
    try:
        tunnel = await reach.tunnel(target.node, target.port)
        async with tunnel.client(timeout=SCRAPE_TIMEOUT_S) as client:
            response = await client.get(tunnel.url + target.path)
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


async def _scrape_front(reach: EngineReach, target: GatewayTarget) -> GatewayScrape:
    from llmgw_core.gateway.run import front_call
    from llmgw_core.gateway.spec import GatewayView

    view = GatewayView(
        name=target.name,
        node=target.node,
        port=0,
        policy="",
        phase="running",
        shard_id=str(target.shard_id),
    )
    try:
        status, text = await front_call(reach.fleet, view, "GET", target.path)
    except LlmgwError as exc:
        return GatewayScrape(target, error=exc.sentence())
    if status != 200:
        return GatewayScrape(
            target, error=f"{target.name} on {target.node} answered {status} on {target.path}"
        )
    return GatewayScrape(target, text=text)


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
            if family.name.startswith(OWN_PREFIX) and not scrape.target.front:
                continue
            into = merged.get(family.name)
            if into is None:
                # promtool wants a help text on every family; a router may leave some bare.
                helped = family.documentation or (
                    f"the gateway's {family.name}, with the gateway and node it came from"
                )
                into = Metric(family.name, helped, family.type, family.unit)
                merged[family.name] = into
            for sample in family.samples:
                labels = dict(sample.labels)
                for added in ADDED_LABELS:
                    if added in labels:
                        labels[f"exported_{added}"] = labels.pop(added)
                labels.update(gateway=name, node=node)
                into.add_sample(sample.name, labels, sample.value, sample.timestamp)
    return tuple(merged.values()), failed


@dataclass(frozen=True)
class RouterCounts:
    """What a gateway front's own samples say it did, per worker URL and in all.

    Attributes:
        requests: per worker, requests the front sent it (`llmgw_gateway_worker_requests_total`).
        failures: per worker, connections to it that failed
            (`llmgw_gateway_worker_failures_total`).
        errors: requests the front answered with an error of its own, every key and
            route together (`llmgw_gateway_requests_total` of every outcome but `answered`
            and `limited`: a key over its own limit is the client's doing, not the gateway's).
        queued: requests waiting at a front with fair shares (`llmgw_gateway_queued`).
    """

    requests: Mapping[str, float]
    failures: Mapping[str, float]
    errors: float
    queued: float | None = None
    """Requests waiting at the front for their turn, every model together (None: the front
    keeps no fair shares)."""


_PROCESSED_FAMILY = "llmgw_gateway_worker_requests"
_FAILURES_FAMILY = "llmgw_gateway_worker_failures"
_REQUESTS_FAMILY = "llmgw_gateway_requests"
_QUEUED_FAMILY = "llmgw_gateway_queued"
_NOT_ERRORS = ("answered", "limited")


def router_counts(scrape: GatewayScrape) -> RouterCounts | None:
    """The counts in one scrape (parsed as `relabel` parses it); None when it has no text.

    Raises:
        ValueError: the text is not Prometheus text.
    """
    if scrape.text is None:
        return None
    requests: dict[str, float] = {}
    failures: dict[str, float] = {}
    errors = 0.0
    queued: float | None = None
    for family in _families(scrape):
        for sample in family.samples:
            if family.name == _QUEUED_FAMILY:
                queued = (queued or 0.0) + sample.value
                continue
            if not sample.name.endswith("_total"):
                continue
            worker = sample.labels.get("worker")
            if family.name == _PROCESSED_FAMILY and worker:
                requests[worker] = requests.get(worker, 0.0) + sample.value
            elif family.name == _FAILURES_FAMILY and worker:
                failures[worker] = failures.get(worker, 0.0) + sample.value
            elif (
                family.name == _REQUESTS_FAMILY and sample.labels.get("outcome") not in _NOT_ERRORS
            ):
                errors += sample.value
    return RouterCounts(requests=requests, failures=failures, errors=errors, queued=queued)


async def gateway_details(fleet: Any, reach: EngineReach) -> list[dict[str, Any]]:
    """Every running gateway with its front's workers and what its own samples count.

    Each is `gateway.run.gateway_summaries`' entry (workers: url → `{model,
    healthy}`) with each worker's `requests` and `failures`, the front's
    `errors` and `queued` (None without fair shares), and `counts_error`: why the counts could not be read (None when
    they were). What the console's gateway screen lists.
    """
    from llmgw_core.gateway.run import gateway_summaries

    details = []
    for summary in await gateway_summaries(fleet, reach):
        target = next(iter(targets_of([SimpleNamespace(**summary)])), None)
        counts: RouterCounts | None = None
        why: str | None = f"{summary['name']} is not running"
        if target is not None:
            scrape = await scrape_gateway(reach, target)
            why = scrape.error
            try:
                counts = router_counts(scrape)
            except ValueError as exc:
                why = f"{target.name} on {target.node} sent text that is not Prometheus text: {exc}"
        workers = {
            url: {
                **worker,
                "requests": counts.requests.get(url, 0.0) if counts else None,
                "failures": counts.failures.get(url, 0.0) if counts else None,
            }
            for url, worker in (summary.get("workers") or {}).items()
        }
        details.append(
            {
                **summary,
                "workers": workers,
                "errors": counts.errors if counts else None,
                "queued": counts.queued if counts else None,
                "counts_error": why,
            }
        )
    return details
