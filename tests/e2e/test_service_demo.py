"""A service on a kept-up demo fleet, as an operator drives it from separate processes.

apply (two replicas behind a gateway) → apply again (no actions) → a new
context applied while `bench` sends through the gateway for 40 s from
another process (two replaces, not one request failed) → `replicas: 1` (one
stop) → `stop: {service}` (nothing left) → `demo down` (no process left).
The gateway is the real vllm-router; the engines are the sim, started by
the real agents over real SSH.
"""

from __future__ import annotations

from pathlib import Path

from kept_demo import (
    apply_json,
    chat_service,
    kept_demo,
    processes_naming,
    roll_under_load,
    run_json,
)

SERVICE = chat_service(drain_s=30)


def _apply(inventory: str, **changed: object) -> dict:
    return apply_json(inventory, SERVICE, **changed)


def _live(inventory: str) -> list[dict]:
    code, steps, said = run_json(inventory, "steps: [{replicas: {}}]")
    assert code == 0, said
    return [r for r in steps[0]["result"]["replicas"] if r["phase"] not in ("stopped", "failed")]


def test_a_service_applied_rolled_under_load_scaled_and_stopped(tmp_path: Path):
    folder = tmp_path / "demo"
    with kept_demo(folder) as inventory:
        first = _apply(inventory)
        assert [(a["action"], a.get("replica") or a.get("gateway")) for a in first["actions"]] == [
            ("start", "chat-1"),
            ("start", "chat-2"),
            ("start", "front"),
        ]
        assert [r["phase"] for r in first["replicas"]] == ["ready", "ready"]

        assert _apply(inventory)["actions"] == []

        rolled, benched = roll_under_load(
            inventory, tmp_path, SERVICE, {"context": 16384}, duration_s=40
        )
        assert [(a["action"], a["replica"], a["why"]) for a in rolled["actions"]] == [
            ("replace", "chat-1", "context 8192 → 16384"),
            ("replace", "chat-2", "context 8192 → 16384"),
        ]
        for done in rolled["done"]:
            assert done["drained"]["in_flight"] == 0, done  # drained, not cut short
        print(
            f"roll under load: {[d['seconds'] for d in rolled['done']]} s per replace, "
            f"{benched['requests']} requests, {benched['failed']} failed, split {benched['split']}"
        )
        assert benched["failed"] == 0, benched.get("errors")
        assert benched["requests"] > 100  # it really sent throughout
        # Both the old and the new replicas answered some of it.
        assert len(benched["split"]) >= 3, benched["split"]

        assert [r["name"] for r in _live(inventory)] == ["chat-3", "chat-4"]
        assert all(r["service"] == "chat" for r in _live(inventory))

        scaled = _apply(inventory, context=16384, replicas=1)
        assert [(a["action"], a["replica"]) for a in scaled["actions"]] == [("stop", "chat-4")]

        code, steps, said = run_json(inventory, "steps: [{stop: {service: chat}}]")
        assert code == 0, said
        assert steps[0]["result"]["stopped"] == ["chat-3"]
        assert _live(inventory) == []
        code, steps, said = run_json(inventory, "steps: [{stop: {gateway: front}}]")
        assert code == 0, said
    assert processes_naming(folder) == []
