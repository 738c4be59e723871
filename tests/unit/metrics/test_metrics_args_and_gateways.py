"""The `metrics` step's arguments, and gateways' Prometheus text relabelled (no fleet needed)."""

from __future__ import annotations

from pathlib import Path

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from llmgw_core.errors import BadInput
from llmgw_core.metrics.gateway import GatewayScrape, GatewayTarget, gateway_targets, relabel
from llmgw_core.script.runner import parse_script

ROUTER_A = """\
# TYPE vllm_router_requests_total counter
vllm_router_requests_total{route="/v1/chat/completions"} 12
# TYPE vllm_router_workers gauge
vllm_router_workers{node="inner"} 2
# TYPE llmgw_node_up gauge
llmgw_node_up{node="x"} 1
"""
ROUTER_B = """\
# TYPE vllm_router_requests_total counter
vllm_router_requests_total{route="/v1/chat/completions"} 5
"""


@pytest.mark.parametrize(
    ("step", "sentence"),
    [
        ("{port: 70000}", "port Input should be less than or equal to 65535"),
        ("{port: 9464, interval_s: 0}", "interval_s Input should be greater than 0"),
        ("{port: 9464, for_s: -1}", "for_s Input should be greater than 0"),
        ("{host: 127.0.0.1}", "port is required"),
        ("{port: 9464, colour: red}", "colour is not a known argument"),
        (
            "{port: 9464, gateways: [{name: 'gw; rm -rf /', node: a, port: 1}]}",
            "gateways.0.name String should match pattern",
        ),
        (
            "{port: 9464, gateways: [{name: gw, node: a, port: 1, path: 'x y'}]}",
            "gateways.0.path String should match pattern",
        ),
    ],
)
def test_bad_metrics_arguments_are_refused_with_their_line_before_anything_runs(
    step: str, sentence: str
):
    with pytest.raises(BadInput) as refused:
        parse_script(f"steps:\n  - metrics: {step}\n", folder=Path("."), source="s.yaml")
    assert refused.value.message.startswith("s.yaml: line 2: step 'metrics': ")
    assert sentence in refused.value.message


def test_two_gateways_samples_merge_into_one_family_each_labelled_with_its_gateway():
    a = GatewayTarget("gw-a", "node-1", 29000)
    b = GatewayTarget("gw-b", "node-2", 29000)
    families, failed = relabel([GatewayScrape(a, text=ROUTER_A), GatewayScrape(b, text=ROUTER_B)])
    assert failed == {}
    registry = CollectorRegistry(auto_describe=False)

    class Fixed:
        def collect(self):
            return families

    registry.register(Fixed())
    text = generate_latest(registry).decode()
    parsed = {f.name: f for f in text_string_to_metric_families(text)}
    requests = parsed["vllm_router_requests"]
    assert requests.type == "counter"
    assert {(s.labels["gateway"], s.labels["node"], s.value) for s in requests.samples} == {
        ("gw-a", "node-1", 12.0),
        ("gw-b", "node-2", 5.0),
    }
    (workers,) = parsed["vllm_router_workers"].samples
    assert workers.labels == {"exported_node": "inner", "gateway": "gw-a", "node": "node-1"}
    assert "llmgw_node_up" not in parsed  # a gateway cannot speak for our own families


def test_a_gateway_that_sends_something_else_than_prometheus_text_is_named_and_left_out():
    target = GatewayTarget("gw-a", "node-1", 29000)
    families, failed = relabel(
        [
            GatewayScrape(target, text="<html>not metrics</html>\n"),
            GatewayScrape(
                GatewayTarget("gw-b", "node-2", 1), error="gw-b on node-2 did not answer"
            ),
        ]
    )
    assert families == ()
    assert failed["gw-a"].startswith("gw-a on node-1 sent text that is not Prometheus text")
    assert failed["gw-b"] == "gw-b on node-2 did not answer"


def _gateway_record(name: str, phase: str) -> dict:
    spec = {"kind": "llmgw-gateway", "gateway": {"name": name, "port": 30000}}
    return {
        "replica": f"gateway-{name}",
        "shard_id": f"gw-{name}",
        "rank": 0,
        "phase": phase,
        "spec": spec,
    }


def test_every_running_gateway_shard_is_scraped_on_its_fronts_control_socket():
    listings = {
        "cpu-01": [
            _gateway_record("main", "running"),
            _gateway_record("old", "stopped"),
            {"replica": "llama", "rank": 0, "phase": "running", "spec": {"kind": "llmgw-replica"}},
        ],
        "cpu-02": [_gateway_record("second", "running")],
    }
    assert gateway_targets(listings) == (
        GatewayTarget("main", "cpu-01", front=True, shard_id="gw-main"),
        GatewayTarget("second", "cpu-02", front=True, shard_id="gw-second"),
    )


def test_the_fronts_requests_per_key_are_scraped_and_re_exported_with_the_gateway():
    (front,) = gateway_targets({"cpu-01": [_gateway_record("keys", "running")]})
    router = GatewayTarget("keys", "cpu-01", 29001)  # someone's router, named in a metrics step
    counted = (
        "# HELP llmgw_gateway_requests_total Requests at the gateway's front.\n"
        "# TYPE llmgw_gateway_requests_total counter\n"
        'llmgw_gateway_requests_total{key="team-a",outcome="answered"} 2\n'
        'llmgw_gateway_requests_total{key="none",outcome="no_key"} 1\n'
    )
    families, failed = relabel(
        [GatewayScrape(front, text=counted), GatewayScrape(router, text=counted)]
    )
    assert failed == {}
    (family,) = families  # the router's copy of an llmgw_ family is not ours to re-export
    samples = {
        (s.labels["key"], s.labels["outcome"], s.labels["gateway"]): s.value for s in family.samples
    }
    assert samples == {("team-a", "answered", "keys"): 2.0, ("none", "no_key", "keys"): 1.0}
