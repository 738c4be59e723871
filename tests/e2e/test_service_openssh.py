"""A service rolled under load on OpenSSH's sshd, with the real router and the sim engines.

Three nodes, each its own sshd replaying an HGX H100 capture (the fault
matrix's bench); every script runs in a process of its own against their
inventory, as an operator runs it: apply two replicas behind a gateway,
roll them to a new context while `bench` sends through the gateway, then
stop the service.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from kept_demo import apply_json, chat_service, roll_under_load, run_json

from llmgw_core.fleet.sim.demo import demo_router

pytestmark = [pytest.mark.sshd, pytest.mark.slow]

SERVICE = chat_service()


def test_on_openssh_a_service_rolls_through_the_real_router_without_a_failed_request(
    tmp_path: Path,
):
    from openssh_bench import OpenSshBench

    router = demo_router()
    if router is None:
        pytest.skip("vllm-router is not installed beside this Python (pip install -e '.[test]')")
    bench = OpenSshBench(tmp_path, router=router)
    inventory = str(tmp_path / "inventory.yaml")
    try:
        first = apply_json(inventory, SERVICE)
        assert [a["action"] for a in first["actions"]] == ["start", "start", "start"]
        assert apply_json(inventory, SERVICE)["actions"] == []
        rolled, benched = roll_under_load(
            inventory, tmp_path, SERVICE, {"context": 16384}, duration_s=20
        )
        assert [(a["action"], a["why"]) for a in rolled["actions"]] == [
            ("replace", "context 8192 → 16384"),
            ("replace", "context 8192 → 16384"),
        ]
        assert benched["failed"] == 0, benched.get("errors")
        assert benched["requests"] > 50
        code, steps, said = run_json(
            inventory, "steps: [{stop: {service: chat}}, {stop: {gateway: front}}]"
        )
        assert code == 0, said
        assert steps[0]["result"]["stopped"] == ["chat-4", "chat-3"]
    finally:
        bench.close()
