"""The Ray cluster a replica joins its nodes through: no other user of a node can use it.

Ray left as `ray start` makes it takes jobs from anyone who reaches its port
(CVE-2023-48022) and keeps its files in `/tmp/ray`, which every user may
write in. So every Ray process is given a private folder, the node's address,
no dashboard and the replica's token; a Ray without tokens is not started.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from engine_nodes import flag, h100_node, request, two_h100_nodes

from llmgw_agent.discover import collect_facts
from llmgw_agent.sim.profiles import write_profile
from llmgw_core.engines import build_launch, launch_node
from llmgw_core.engines.ray_cluster import PRIVATE_DIR_PLACEHOLDER
from llmgw_core.errors import BadInput
from llmgw_core.facts import parse_facts
from llmgw_core.inventory import parse_inventory


def ray_plan(**changes):
    """vLLM 0.11 across two H100 nodes with Ray 2.52: the Ray way."""
    return build_launch(request(nodes=two_h100_nodes(engine_version="0.11.0"), **changes))


def test_every_ray_process_keeps_its_files_below_a_private_folder_the_agent_makes():
    head, worker = ray_plan().shards
    for command in (head.commands[0], worker.main):
        assert flag(command.argv, "--temp-dir") == f"{PRIVATE_DIR_PLACEHOLDER}/ray"
        assert not any(arg.startswith("/tmp") for arg in command.argv)


def test_the_head_says_the_nodes_address_and_starts_no_dashboard():
    head, worker = ray_plan().shards
    ray_head = head.commands[0]
    assert flag(ray_head.argv, "--node-ip-address") == "10.20.0.11"
    assert flag(ray_head.argv, "--port") == "6379"
    assert "--include-dashboard=false" in ray_head.argv
    assert flag(worker.main.argv, "--node-ip-address") == "10.20.0.12"
    for command in (ray_head, worker.main):
        assert "0.0.0.0" not in command.argv
        assert not any(arg.startswith("--dashboard-host") for arg in command.argv)


def test_every_process_demands_the_replicas_token_which_travels_as_a_secret_only():
    plan = ray_plan()
    tokens = {shard.secret_env["RAY_AUTH_TOKEN"] for shard in plan.shards}
    assert len(tokens) == 1
    (token,) = tokens
    assert re.fullmatch(r"[0-9a-f]{64}", token)
    for shard in plan.shards:
        for command in shard.commands:
            assert command.env["RAY_AUTH_MODE"] == "token"
            assert "RAY_AUTH_TOKEN" not in command.env
            assert not any(token in arg for arg in command.argv)
        # shard.json is written from everything but secret_env: the token is not in it.
        written = {k: v for k, v in shard.start_args("r").items() if k != "secret_env"}
        assert token not in str(written)


def test_each_launch_gets_a_token_of_its_own():
    first, second = ray_plan(), ray_plan()
    assert first.head.secret_env["RAY_AUTH_TOKEN"] != second.head.secret_env["RAY_AUTH_TOKEN"]


def test_vllm_joins_the_heads_cluster_by_its_address_not_by_a_default_tmp_ray():
    head, _worker = ray_plan(rendezvous_port=31000).shards
    assert head.main.env["RAY_ADDRESS"] == "10.20.0.11:31000"
    assert flag(head.commands[0].argv, "--port") == "31000"
    assert "RAY_ADDRESS" not in head.commands[0].env


def test_the_operators_env_cannot_turn_the_token_off():
    nodes = two_h100_nodes(engine_version="0.11.0")
    plan = build_launch(request(nodes=nodes, extra_env={"RAY_AUTH_MODE": "disabled"}))
    assert {c.env["RAY_AUTH_MODE"] for s in plan.shards for c in s.commands} == {"token"}


def test_the_operator_cannot_set_the_token_on_a_command():
    nodes = two_h100_nodes(engine_version="0.11.0")
    with pytest.raises(BadInput, match=r"--env refuses the variable RAY_AUTH_TOKEN \(a secret"):
        build_launch(request(nodes=nodes, extra_env={"RAY_AUTH_TOKEN": "mine"}))


def test_a_ray_without_tokens_is_refused_naming_the_risk_and_the_way_out():
    nodes = (
        h100_node(0, engine_version="0.11.0"),
        h100_node(1, engine_version="0.11.0", ray_version="2.51.2"),
    )
    with pytest.raises(BadInput) as refused:
        build_launch(request(nodes=nodes))
    assert refused.value.sentence() == (
        "Ray 2.51.2 on h100-a-02 has no authentication: anyone who can reach its port runs "
        "code as you (CVE-2023-48022): install vLLM 0.12 or later and serve with executor: mp, "
        "vLLM's own multiprocessing, which needs no Ray, or install Ray 2.52 or later on every "
        "node"
    )


def test_a_node_that_did_not_report_ray_is_refused_for_ray_too():
    with pytest.raises(BadInput) as refused:
        build_launch(request(nodes=two_h100_nodes(ray_version=None), executor="ray"))
    assert refused.value.sentence() == (
        "h100-a-01 did not report its Ray version, and a Ray before 2.52 has no authentication: "
        "anyone who can reach its port runs code as you (CVE-2023-48022): serve with executor: "
        "mp, vLLM's own multiprocessing, which needs no Ray, or install Ray 2.52 or later on "
        "every node"
    )


def test_the_sim_is_refused_as_vllm_would_be():
    nodes = two_h100_nodes(engine_version="0.11.0", ray_version="2.40.0", simulated=True)
    with pytest.raises(BadInput, match=r"^Ray 2\.40\.0 on h100-a-01 has no authentication"):
        build_launch(request(nodes=nodes, engine="sim"))


def test_multiprocessing_and_one_node_need_no_ray_at_all():
    assert build_launch(request(nodes=two_h100_nodes(ray_version=None))).executor == "mp"
    one = build_launch(request(nodes=(h100_node(ray_version=None, engine_version="0.11.0"),)))
    assert one.executor == "single"
    assert "RAY_AUTH_TOKEN" not in one.head.secret_env


def test_a_nodes_ray_version_is_read_from_the_engines_its_agent_reports(
    tmp_path: Path, monkeypatch
):
    monkeypatch.setenv("LLMGW_AGENT_STATE", str(tmp_path / "state"))
    engines = {
        "vllm": {"version": "0.11.0", "path": "/opt/llm/venv/bin/vllm"},
        "ray": {"version": "2.52.1", "path": "/opt/llm/venv/bin/ray"},
    }
    versions = []
    for name, options in (("with-ray", {"engines": engines}), ("without", {})):
        capture = write_profile("hgx-h100", tmp_path / name, **options)
        facts = parse_facts(collect_facts(str(capture)))
        inventory = f"nodes:\n  - name: {name}\n    host: 127.0.0.1\n    replay: {capture}\n"
        spec = parse_inventory(inventory).node_spec(name)
        node = launch_node(spec, facts, engine="vllm", rank=0, gpu_ids=["0"], http_port=8000)
        versions.append(node.ray_version)
    assert versions == ["2.52.1", None]
