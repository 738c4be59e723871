"""`listed_once`: a shard that two fleet nodes list (one agent home reached as two nodes, as
clusters sharing a login node are) is kept under one node only."""

from __future__ import annotations

from llmgw_core.serve.replicas import listed_once


def _gateway(shard_id: str, node: str, created_at: float = 1.0) -> dict:
    spec = {"gateway": {"name": "gw", "node": node}}
    return {"shard_id": shard_id, "created_at": created_at, "replica": "gateway-gw", "spec": spec}


def test_a_gateway_listed_by_both_logins_stays_with_the_node_that_started_it():
    shard = _gateway("gateway-gw-r0-1", "nvl-login")
    kept = listed_once({"hgx-login": [shard], "nvl-login": [dict(shard)]})
    assert kept == {"hgx-login": [], "nvl-login": [shard]}


def test_a_shard_its_spec_does_not_place_stays_with_the_first_node_listing_it():
    shard = {"shard_id": "s-r0-1", "created_at": 2.0, "replica": "s", "spec": {}}
    assert listed_once({"a": [shard], "b": [dict(shard)]}) == {"a": [shard], "b": []}


def test_two_nodes_that_list_different_shards_keep_all_of_them():
    # The same id on two homes with another start time is two shards, not one listed twice.
    first, second = _gateway("g-r0-1", "a", 1.0), _gateway("g-r0-1", "b", 5.0)
    listings = {"a": [first], "b": [second], "c": []}
    assert listed_once(listings) == listings
