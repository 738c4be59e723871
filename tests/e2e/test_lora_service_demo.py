"""A service's adapters changed at runtime on a kept-up demo fleet, under load, from other processes.

apply (two replicas of an 8B with three adapters behind a gateway) → a
fourth adapter applied while `bench` asks one of the first three through the
gateway from another process: each replica is adapted in place (its engine
loads the adapter: no replica is started again, not one request fails) →
the new adapter answers through the gateway → one adapter dropped → stop.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import yaml
from kept_demo import apply_json, chat_service, kept_demo, processes_naming, run_json, start_json
from lora_files import Widths, write_peft_adapter

LLAMA_8B = "meta-llama/Llama-3.1-8B-Instruct"
W8B = Widths(hidden=4096, intermediate=14336, heads=32, kv_heads=8, layers=32)


def _adapters(root: Path, *names: str) -> list[dict[str, str]]:
    made = []
    for name in names:
        folder = root / name
        if not folder.exists():
            write_peft_adapter(folder, W8B, rank=8, base_model=LLAMA_8B)
        made.append({"name": name, "source": str(folder)})
    return made


def _live(inventory: str) -> list[dict]:
    code, steps, said = run_json(inventory, "steps: [{replicas: {}}]")
    assert code == 0, said
    return [r for r in steps[0]["result"]["replicas"] if r["phase"] not in ("stopped", "failed")]


def test_an_adapter_added_at_runtime_under_load_restarts_nothing(tmp_path: Path):
    folder = tmp_path / "demo"
    root = tmp_path / "adapters"
    service = chat_service(drain_s=10, adapters=_adapters(root, "sql", "support", "summary"))
    with kept_demo(folder) as inventory:
        first = apply_json(inventory, service)
        assert [a["action"] for a in first["actions"]] == ["start", "start", "start"]
        assert apply_json(inventory, service)["actions"] == []
        started = {r["name"]: r for r in _live(inventory)}
        assert sorted(a["name"] for a in started["chat-1"]["adapters"]) == [
            "sql", "summary", "support"
        ]  # fmt: skip

        script = tmp_path / "bench.yaml"
        bench_args = {"gateway": "front", "model": "sql", "duration_s": 12, "concurrency": 4}
        script.write_text(yaml.safe_dump({"steps": [{"bench": {**bench_args, "max_tokens": 16}}]}))
        bench = start_json(inventory, script)
        time.sleep(3.0)  # the benchmark is sending
        wider = {**service, "adapters": _adapters(root, "sql", "support", "summary", "legal")}
        adapted = apply_json(inventory, wider)
        out, err = bench.communicate(timeout=200)
        assert bench.returncode == 0, err[-3000:]
        benched = json.loads(out.splitlines()[-1])["result"]
        assert [(a["action"], a["replica"], a["why"]) for a in adapted["actions"]] == [
            ("adapt", "chat-1", "adapters + legal"),
            ("adapt", "chat-2", "adapters + legal"),
        ]
        assert all(d["added"] == ["legal"] and d["removed"] == [] for d in adapted["done"])
        print(
            f"adapter added under load: {[d['seconds'] for d in adapted['done']]} s per replica, "
            f"{benched['requests']} requests, {benched['failed']} failed"
        )
        assert benched["failed"] == 0, benched.get("errors")
        assert benched["requests"] > 20
        after = {r["name"]: r for r in _live(inventory)}
        assert sorted(after) == ["chat-1", "chat-2"]  # nothing was started again

        def shards(replicas: dict) -> dict:
            return {n: sorted(s["shard_id"] for s in r["shards"]) for n, r in replicas.items()}

        assert shards(after) == shards(started)  # the same engine processes
        code, steps, said = run_json(
            inventory, "steps: [{ask: {gateway: front, model: legal, prompt: Hi}}]"
        )
        assert code == 0, said
        assert steps[0]["result"]["text"]

        narrower = {**service, "adapters": _adapters(root, "sql", "legal")}
        dropped = apply_json(inventory, narrower)
        assert [a["why"] for a in dropped["actions"]] == ["adapters − summary, support"] * 2
        code, steps, said = run_json(
            inventory, "steps: [{ask: {gateway: front, model: summary, prompt: Hi}}]"
        )
        assert code == 2 and "serves no model 'summary'" in json.dumps(steps), (steps, said)

        code, steps, said = run_json(inventory, "steps: [{stop: {service: chat}}]")
        assert code == 0, said
        code, steps, said = run_json(inventory, "steps: [{stop: {gateway: front}}]")
        assert code == 0, said
    assert processes_naming(folder) == []
