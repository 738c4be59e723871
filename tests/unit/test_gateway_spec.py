"""The gateway's pure decisions: its router's command line, the workers it should hold, the changes."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from pydantic import ValidationError

from llmgw_core.errors import BadInput
from llmgw_core.facts import Engine
from llmgw_core.gateway.spec import (
    GatewayArgs,
    GatewayPorts,
    Worker,
    choose_model,
    front_argv,
    gateway_line,
    gateway_views,
    keyed_for,
    load_split,
    plain_line,
    processed_requests,
    router_argv,
    router_program,
    shard_args,
    unchecked_workers,
    wanted_workers,
    worker_changes,
)
from llmgw_core.inventory import BinaryEngine, EngineLocations


@dataclass(frozen=True)
class Replica:
    """What `wanted_workers` reads of a replica view."""

    name: str
    phase: str
    spec: dict[str, Any] = field(default_factory=dict)
    draining: bool = False


def _replica(name: str, head: str, port: int, served: str, phase: str = "ready") -> Replica:
    return Replica(name, phase, {"head": head, "http_port": port, "served_name": served})


PORTS = GatewayPorts(port=30000, router=30001, prometheus=30002, front_metrics=30003)


def test_the_router_fronts_every_model_on_the_loopback_and_the_front_takes_the_port():
    args = GatewayArgs(name="front", port=30000, policy="power_of_two", api_key_env="MY_KEY")
    argv = router_argv("/opt/r/bin/vllm-router", args, PORTS)
    assert argv[0] == "/opt/r/bin/vllm-router"
    assert argv[argv.index("--host") + 1] == "127.0.0.1"  # its admin API is not on the network
    assert argv[argv.index("--port") + 1] == "30001"
    assert argv[argv.index("--policy") + 1] == "power_of_two"
    assert argv[argv.index("--prometheus-port") + 1] == "30002"
    assert "--enable-igw" in argv and "--api-key" not in argv
    assert front_argv(PORTS) == [
        "front",
        "--listen",
        "0.0.0.0:30000",
        "--router",
        "127.0.0.1:30001",
        "--metrics",
        "127.0.0.1:30003",
    ]


def test_the_inventory_names_the_router_before_what_the_node_found():
    located = EngineLocations(router=BinaryEngine(bin="/srv/router/bin/vllm-router"))
    found = {"vllm-router": Engine(version="0.1.17", path="/usr/local/bin/vllm-router")}
    assert router_program(located, found) == "/srv/router/bin/vllm-router"
    assert router_program(EngineLocations(), found) == "/usr/local/bin/vllm-router"
    assert router_program(EngineLocations(), {}) is None


def _shard(args: GatewayArgs, key_envs: dict[str, str] | None = None) -> dict[str, Any]:
    return shard_args(
        args,
        ["vllm-router"],
        node="cpu-01",
        ports=PORTS,
        created_at=1.0,
        upstream_key_envs=key_envs or {},
    )


def test_a_gateway_shard_claims_no_card_runs_the_router_beside_the_front_and_records_ports():
    request = _shard(GatewayArgs(name="front", port=30000), {"llama": "LLAMA_KEY"})
    assert request["gpus"] == [] and request["spec"]["kind"] == "llmgw-gateway"
    recorded = request["spec"]["gateway"]
    assert (recorded["port"], recorded["router_port"], recorded["prometheus_port"]) == (
        30000,
        30001,
        30002,
    )
    assert recorded["upstream_key_envs"] == {"llama": "LLAMA_KEY"}  # names, never keys
    router, front = request["commands"]
    assert (router["role"], router["wait_for_port"]) == ("sidecar", 30001)
    assert (front["role"], front["agent"], front["argv"][0]) == ("main", True, "front")
    # The router's liveness, asked by the front on its loopback port (plain HTTP even with TLS).
    assert request["health_url"] == "http://127.0.0.1:30003/liveness"


def test_only_ready_replicas_become_workers_reached_by_their_node_address():
    replicas = [
        _replica("a", "h100-a-01", 8000, "llama"),
        _replica("b", "cpu-01", 8001, "llama"),
        _replica("c", "h100-a-02", 8002, "qwen", phase="loading"),
    ]
    workers = wanted_workers(replicas, "cpu-01", {"h100-a-01": "10.0.0.1", "cpu-01": "10.0.0.9"})
    assert workers == (
        Worker("http://10.0.0.1:8000", "llama", "a"),
        Worker("http://127.0.0.1:8001", "llama", "b"),
    )


def test_a_replica_a_roll_is_draining_is_no_worker():
    kept = _replica("kept", "h100-a-01", 8000, "llama")
    draining = Replica(
        "old", "ready", {"head": "cpu-01", "http_port": 8001, "served_name": "llama"}, draining=True
    )
    workers = wanted_workers([kept, draining], "cpu-01", {"h100-a-01": "10.0.0.1"})
    assert [worker.replica for worker in workers] == ["kept"]


def test_a_ready_engine_checked_on_another_path_than_health_is_warned_about():
    bare = Replica("bare", "ready", {"health_path": "/openapi.json"})
    loading = Replica("later", "loading", {"health_path": "/openapi.json"})
    server = Replica("server", "ready", {"health_path": "/health"})
    unrecorded = Replica("old", "ready", {})
    warnings = unchecked_workers([bare, loading, server, unrecorded])
    assert len(warnings) == 1
    assert warnings[0].startswith("replica bare answers its health on /openapi.json, not /health")


def test_changes_add_what_is_missing_and_remove_what_left_or_changed_model():
    wanted = (Worker("http://a:1", "llama"), Worker("http://b:2", "qwen"))
    present = {"http://b:2": "llama", "http://c:3": "llama"}
    add, remove = worker_changes(wanted, present)
    assert [w.url for w in add] == ["http://a:1", "http://b:2"]
    assert remove == ("http://b:2", "http://c:3")
    assert worker_changes(wanted, {"http://a:1": "llama", "http://b:2": "qwen"}) == ((), ())


def test_the_load_split_is_read_from_the_routers_own_counters():
    text = (
        "# TYPE vllm_router_processed_requests_total counter\n"
        'vllm_router_processed_requests_total{worker="http://a:1"} 12\n'
        'vllm_router_processed_requests_total{worker="http://b:2"} 3\n'
        'vllm_router_policy_decisions_total{policy="round_robin",worker="http://a:1"} 12\n'
    )
    after = processed_requests(text)
    assert after == {"http://a:1": 12.0, "http://b:2": 3.0}
    assert load_split({"http://a:1": 2.0}, after) == {"http://a:1": 10, "http://b:2": 3}


def test_a_question_through_a_gateway_names_its_model_when_it_fronts_several():
    assert choose_model(["llama"], None, "front") == "llama"
    with pytest.raises(BadInput, match="gateway front serves 2 models"):
        choose_model(["llama", "qwen"], None, "front")
    with pytest.raises(BadInput, match="serves no model 'mistral'"):
        choose_model(["llama", "qwen"], "mistral", "front")


def test_a_gateway_is_read_back_from_a_nodes_shard_listing():
    record = {
        "shard_id": "gateway-front-r0-abc",
        "phase": "running",
        "healthy": True,
        "spec": _shard(GatewayArgs(name="front"))["spec"],
    }
    other = {"shard_id": "x", "phase": "running", "spec": {"kind": "llmgw-replica"}}
    (view,) = gateway_views({"cpu-01": [record, other]})
    assert view.live and view.as_dict()["address"] == "cpu-01:30000"
    assert view.api_port == 30001  # the router's API, on the node's loopback
    older = {**record, "spec": {"kind": "llmgw-gateway", "gateway": {"name": "g", "port": 30000}}}
    assert gateway_views({"cpu-01": [older]})[0].api_port == 30000  # a router with no front


def test_a_replica_keyed_by_a_variable_the_gateway_was_not_given_is_left_out_saying_why():
    (view,) = gateway_views(
        {
            "cpu-01": [
                {
                    "shard_id": "g",
                    "phase": "running",
                    "spec": _shard(GatewayArgs(name="front"), {"llama": "LLAMA_KEY"})["spec"],
                }
            ]
        }
    )

    @dataclass(frozen=True)
    class Keyed(Replica):
        api_key_env: str | None = None

    same = Keyed("a", "ready", {"served_name": "llama"}, api_key_env="LLAMA_KEY")
    other = Keyed("b", "ready", {"served_name": "llama"}, api_key_env="OTHER_KEY")
    open_one = Keyed("c", "ready", {"served_name": "qwen"})
    fronted, left_out = keyed_for([same, other, open_one], view)
    assert fronted == (same, open_one)
    assert left_out == (
        "b is not fronted by gateway front: its engines take their key from OTHER_KEY, which "
        "the gateway was not given when it started (stop and start the gateway to front it)",
    )


@pytest.mark.parametrize(
    "bad",
    [{"name": "front", "policy": "fastest"}, {"name": "a b"}, {"name": "g", "api_key_env": "$X"}],
)
def test_a_malformed_gateway_is_refused(bad: dict[str, Any]):
    with pytest.raises(ValidationError):
        GatewayArgs.model_validate(bad)


def test_a_router_log_line_loses_its_colours():
    line = "\x1b[2m2026-12-01 18:55:06\x1b[0m \x1b[32m INFO\x1b[0m Router ready"
    assert plain_line(line) == "2026-12-01 18:55:06  INFO Router ready"


def test_the_console_line_of_a_gateway_counts_healthy_workers_by_model():
    gateway = {
        "name": "front",
        "address": "cpu-01:30000",
        "policy": "round_robin",
        "phase": "running",
        "workers": {
            "http://a:1": {"model": "llama", "healthy": True},
            "http://b:2": {"model": "llama", "healthy": False},
            "http://c:3": {"model": "qwen", "healthy": True},
        },
    }
    assert gateway_line(gateway) == (
        "gateway front at cpu-01:30000 (round_robin, running): 2/3 workers healthy"
        " — llama ×2, qwen ×1"
    )
