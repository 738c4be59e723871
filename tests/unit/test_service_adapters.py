"""A service's adapters: which replicas are adapted in place, which rolled, and the words."""

from __future__ import annotations

from llmgw_core.memory.adapters import LoraSlots
from llmgw_core.model.adapters import AdapterShape
from llmgw_core.serve.view import ReplicaView, ShardView
from llmgw_core.service.adapters import runtime_refusal
from llmgw_core.service.spec import Running, actions, adapter_changes


def _running(name: str, adapters: tuple[tuple[str, str], ...]) -> Running:
    return Running(name=name, hash="h", settings={}, phase="ready", adapters=adapters)


def test_a_replica_of_the_settings_holding_other_adapters_is_adapted_not_replaced():
    held = (("sql", "/a/sql"),)
    wanted = [("legal", "/a/legal"), ("sql", "/a/sql")]
    done = actions(
        "chat", 2, {}, "h", [_running("chat-1", held), _running("chat-2", held)], [], wanted
    )
    assert [(a.action, a.replica, a.why) for a in done] == [
        ("adapt", "chat-1", "adapters + legal"),
        ("adapt", "chat-2", "adapters + legal"),
    ]
    same = actions("chat", 2, {}, "h", [_running("chat-1", tuple(sorted(wanted)))] * 1, [], wanted)
    assert [a.action for a in same] == ["start"]  # one missing, none adapted


def test_the_words_name_what_comes_and_goes_and_a_changed_source_both_ways():
    assert adapter_changes([("a", "/a"), ("b", "/b")], [("b", "/b2"), ("c", "/c")]) == (
        "adapters + b, c, − a, b"
    )


def _view(engine: str, env: dict[str, str], rank: int, adapters=()) -> ReplicaView:
    spec = {
        "engine": engine,
        "adapters": [{"name": n, "lora_id": None} for n, _ in adapters],
        "request": {
            "lora": {
                "adapters": [
                    {"name": n, "source": s, "format": "peft", "rank": 8} for n, s in adapters
                ],
                "max_loras": 1,
                "max_lora_rank": rank,
            }
        },
    }
    shard = ShardView(node="n", rank=0, shard_id="s", gpus=(), phase="running", env=env)
    return ReplicaView(name="chat-1", spec=spec, shards=(shard,), phase="ready")


def _slots(*adapters: tuple[str, str, int]) -> LoraSlots:
    shapes = tuple(
        AdapterShape(n, s, "peft", r, 16.0, ("q_proj",), "bfloat16", 1, 32, 4096)
        for n, s, r in adapters
    )
    return LoraSlots(adapters=shapes, max_loras=1, max_lora_rank=max(r for *_, r in adapters))


def test_what_an_engine_cannot_take_while_it_runs_is_said():
    runtime = {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True"}
    held = (("sql", "/a/sql"),)
    wanted = _slots(("sql", "/a/sql", 8), ("legal", "/a/legal", 8))
    assert runtime_refusal(_view("vllm", runtime, 8, held), wanted) is None
    assert runtime_refusal(_view("sglang", {}, 8, held), wanted) is None
    assert runtime_refusal(_view("llama.cpp", {}, 8, held), wanted) == (
        "llama.cpp loads adapters at start only"
    )
    assert "without VLLM_ALLOW_RUNTIME_LORA_UPDATING" in runtime_refusal(
        _view("vllm", {}, 8, held), wanted
    )
    wide = _slots(("sql", "/a/sql", 8), ("wide", "/a/wide", 64))
    assert runtime_refusal(_view("vllm", runtime, 8, held), wide) == (
        "adapter 'wide' has rank 64, above the max_lora_rank 8 its engine was started with"
    )
    hub = _slots(("sql", "/a/sql", 8), ("hub", "team/hub-lora", 8))
    assert "comes from the Hub" in runtime_refusal(_view("vllm", runtime, 8, held), hub)
