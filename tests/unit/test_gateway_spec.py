"""The gateway's pure decisions: its front's command line, the workers it should hold, the changes."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest
from pydantic import ValidationError
from replica_stub import Replica

from llmgw_core.errors import BadInput
from llmgw_core.gateway.spec import (
    GatewayArgs,
    Worker,
    choose_model,
    front_argv,
    gateway_line,
    gateway_views,
    keyed_for,
    load_split,
    plain_line,
    processed_requests,
    queued_requests,
    served_text,
    shard_args,
    unchecked_workers,
    wanted_workers,
    worker_changes,
)


def _replica(name: str, head: str, port: int, served: str, phase: str = "ready") -> Replica:
    return Replica(name, phase, {"head": head, "http_port": port, "served_name": served})


def test_the_front_takes_the_port_and_routes_with_the_policy_asked_for():
    args = GatewayArgs(name="front", port=30000, policy="power_of_two", api_key_env="MY_KEY")
    assert front_argv(args) == [
        *("front", "--listen", "0.0.0.0:30000"),
        *("--policy", "power_of_two", "--health-path", "/health"),
    ]


def _shard(args: GatewayArgs, key_envs: dict[str, str] | None = None) -> dict[str, Any]:
    return shard_args(args, node="cpu-01", created_at=1.0, upstream_key_envs=key_envs or {})


def test_a_gateway_shard_claims_no_card_and_runs_one_process_with_no_port_but_its_own():
    request = _shard(GatewayArgs(name="front", port=30000), {"llama": "LLAMA_KEY"})
    assert request["gpus"] == [] and request["spec"]["kind"] == "llmgw-gateway"
    recorded = request["spec"]["gateway"]
    assert recorded["port"] == 30000
    assert not {"router_port", "prometheus_port", "front_metrics_port"} & set(recorded)
    assert recorded["upstream_key_envs"] == {"llama": "LLAMA_KEY"}  # names, never keys
    (front,) = request["commands"]
    assert (front["role"], front["agent"], front["argv"][0]) == ("main", True, "front")
    assert "health_url" not in request  # its liveness is asked on its control socket


def test_a_replica_with_an_engine_certificate_is_a_worker_reached_over_pinned_https():
    cert = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
    pinned = Replica(
        "p", "ready", {"head": "h100-a-01", "http_port": 8000, "served_name": "m", "tls_cert": cert}
    )
    (worker,) = wanted_workers([pinned], "cpu-01", {"h100-a-01": "10.0.0.1"})
    assert (worker.url, worker.cert) == ("https://10.0.0.1:8000", cert)


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
    assert unchecked_workers([bare], "/openapi.json") == ()  # the gateway probes that path


def test_changes_add_what_is_missing_and_remove_what_left_or_changed_model():
    wanted = (Worker("http://a:1", "llama"), Worker("http://b:2", "qwen"))
    llama, qwen = served_text("llama", {}, True), served_text("qwen", {}, True)
    present = {"http://b:2": llama, "http://c:3": llama}
    add, remove = worker_changes(wanted, present)
    assert [w.url for w in add] == ["http://a:1", "http://b:2"]
    assert remove == ("http://b:2", "http://c:3")
    assert worker_changes(wanted, {"http://a:1": llama, "http://b:2": qwen}) == ((), ())


def test_a_worker_whose_adapters_changed_is_replaced():
    before = served_text("llama", {"sql": None}, True)
    wanted = (Worker("http://a:1", "llama", adapters=(("sql", None), ("chat", None))),)
    add, remove = worker_changes(wanted, {"http://a:1": before})
    assert [w.url for w in add] == ["http://a:1"] and remove == ("http://a:1",)
    same = served_text("llama", {"chat": None, "sql": None}, True)
    assert worker_changes(wanted, {"http://a:1": same}) == ((), ())


def test_the_load_split_is_read_from_the_fronts_own_counters():
    text = (
        "# TYPE llmgw_gateway_worker_requests_total counter\n"
        'llmgw_gateway_worker_requests_total{worker="http://a:1",model="m"} 12\n'
        'llmgw_gateway_worker_requests_total{worker="http://b:2",model="m"} 3\n'
        'llmgw_gateway_worker_failures_total{worker="http://a:1",model="m"} 12\n'
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
    assert view.shard_id == "gateway-front-r0-abc"  # its control socket is in that shard's folder


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


def test_a_keyed_replica_behind_a_gateway_that_runs_open_is_said_so():
    from llmgw_core.gateway.run import gateway_key_warning

    adopted = {"name": "front", "address": "cpu-01:30000", "adopted": True, "api_key_env": None}
    said = gateway_key_warning(adopted, "CHAT_KEY")
    assert said is not None and said.startswith("gateway front takes requests without a key")
    assert "cpu-01:30000" in said and "CHAT_KEY" in said
    assert gateway_key_warning({**adopted, "api_key_env": "CHAT_KEY"}, "CHAT_KEY") is None
    assert gateway_key_warning({**adopted, "keys_file": "/k.yaml"}, "CHAT_KEY") is None
    assert gateway_key_warning({**adopted, "adopted": False}, "CHAT_KEY") is None  # started keyed
    assert gateway_key_warning(adopted, None) is None  # an open replica behind an open gateway


def test_fair_shares_reach_the_fronts_configuration_with_each_keys_weight_and_priority():
    from llmgw_core.gateway.keys import ClientKey, front_config

    args = GatewayArgs.model_validate({"name": "front", "fair": {"queue": 64}})
    assert args.fair is not None and args.fair.reserve == 1 and args.fair.waiting == 1
    keys = (
        ClientKey(id="team-a", key="sk-team-a-0123456789"),
        ClientKey(id="batch", key="sk-batch-0123456789", weight=0.5, priority="low"),
    )
    config = json.loads(front_config(keys, {}, {}, fair=args.fair.model_dump()))
    assert config["fair"] == {"waiting": 1, "queue": 64, "queue_timeout_s": 30.0, "reserve": 1}
    assert [{k: v for k, v in key.items() if k != "key"} for key in config["keys"]] == [
        {"id": "team-a", "models": None},
        {"id": "batch", "models": None, "weight": 0.5, "priority": "low"},
    ]
    # The front takes it as given.
    from llmgw_agent.front.config import Config

    shares = Config(config).shares
    assert shares is not None and shares.queue_max == 64
    assert shares.weight == {"team-a": 1.0, "batch": 0.5}
    assert shares.rank == {"team-a": 1, "batch": 2}  # normal, low
    record = {"shard_id": "g", "phase": "running", "spec": _shard(args)["spec"]}
    (view,) = gateway_views({"cpu-01": [record]})
    assert view.fair and view.as_dict()["fair"] is True


def test_the_requests_waiting_at_a_fair_front_are_read_per_model():
    text = (
        "# TYPE llmgw_gateway_queued gauge\n"
        'llmgw_gateway_queued{model="m"} 7\n'
        'llmgw_gateway_queued{model="odd \\"name\\""} 2\n'
        'llmgw_gateway_queued_total{model="m"} 99\n'
    )
    assert queued_requests(text) == {"m": 7.0, 'odd "name"': 2.0}
