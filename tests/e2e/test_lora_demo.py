"""LoRA adapters on the demo: served beside their base model, planned, routed by name.

Two replicas of Llama 3.1 8B hold three PEFT adapters between them (written
as `peft` writes them, with the 8B's widths); a keyed gateway routes each
request for an adapter to a replica that holds it, lists the adapters with
their parent, and keeps a key scoped to one adapter off the others. The
simulated engine takes the same `vllm serve` command a real vLLM would.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from lora_files import Widths, write_peft_adapter
from serve_demo_harness import Demo

from llmgw_core.errors import BadInput

pytestmark = [pytest.mark.slow]

LLAMA_8B = "meta-llama/Llama-3.1-8B-Instruct"
W8B = Widths(hidden=4096, intermediate=14336, heads=32, kv_heads=8, layers=32)


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    running = Demo(tmp_path_factory.mktemp("lora-demo"))
    try:
        yield running
    finally:
        running.close()


@pytest.fixture(scope="module")
def adapters(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    root = tmp_path_factory.mktemp("adapters")
    made = {}
    for name, rank in (("sql", 8), ("chat", 16), ("summary", 8)):
        folder = write_peft_adapter(
            root / name, W8B, rank=rank, targets=("q_proj", "v_proj"), base_model=LLAMA_8B
        )
        made[name] = str(folder)
    return made


def _entries(adapters: dict[str, str], *names: str) -> list[dict[str, str]]:
    return [{"name": n, "source": adapters[n]} for n in names]


def test_the_plan_counts_the_adapters_slots_on_each_card(demo: Demo, adapters: dict[str, str]):
    bare = demo.step("plan", model=f"catalog:{LLAMA_8B}", context=8192).result
    loaded = demo.step(
        "plan",
        model=f"catalog:{LLAMA_8B}",
        context=8192,
        adapters=_entries(adapters, "sql", "chat"),
    ).result
    best = next(w for w in loaded["options"] if w["engine"] == "vllm")
    # vLLM: 2 slots of rank 16 on every module of the 32 layers, bf16, on one card.
    per_layer = 16 * (8192 + 5120 + 5120 + 8192 + 3 * (4096 + 14336))
    assert best["adapters_gib"] == pytest.approx(per_layer * 2 * 2 * 32 / 2**30, abs=1e-4)
    assert "+ adapters" in best["memory"]
    assert loaded["adapters"]["max_loras"] == 2 and loaded["adapters"]["max_lora_rank"] == 16
    assert bare["adapters"] is None


def test_an_adapter_for_another_model_is_refused_before_anything_starts(demo: Demo, tmp_path: Path):
    wide = Widths(hidden=8192, intermediate=28672, heads=64, kv_heads=8, layers=80)
    folder = write_peft_adapter(tmp_path / "wide", wide, rank=8, targets=("q_proj",))
    with pytest.raises(BadInput) as refused:
        demo.step(
            "serve",
            model=f"catalog:{LLAMA_8B}",
            context=8192,
            gpu_class="h100-80g",
            name="wrong",
            adapters=[{"name": "wide", "source": str(folder)}],
        )
    assert refused.value.sentence() == (
        f"adapter 'wide' was made for a hidden size of 8192, and {LLAMA_8B} has 4096"
    )


def test_replicas_serve_their_adapters_and_the_gateway_routes_by_name(
    demo: Demo, adapters: dict[str, str], tmp_path: Path
):
    import openai

    from llmgw_core.gateway.run import find_gateway, front_call, router_workers
    from llmgw_core.serve.http import EngineReach

    for name, held in (("lora-a", ("sql", "chat")), ("lora-b", ("chat", "summary"))):
        outcome = demo.step(
            "serve",
            model=f"catalog:{LLAMA_8B}",
            context=8192,
            gpu_class="h100-80g",
            engine="vllm",
            name=name,
            adapters=_entries(adapters, *held),
        )
        assert outcome.ok, outcome.error

    team, ops = "sk-team-sql-0123456789abcdef", "sk-ops-fedcba9876543210"
    keys = tmp_path / "keys.yaml"
    keys.write_text(
        f"keys:\n  - {{id: team-sql, key: {team}, models: [sql]}}\n  - {{id: ops, key: {ops}}}\n"
    )
    keys.chmod(0o600)
    started = demo.step("gateway", name="lora-front", port=30710, keys_file=str(keys)).result
    url_of = {w["replica"]: w["url"] for w in started["workers"]}
    gateway = demo.loop.run(find_gateway(demo.fleet, "lora-front"))
    reach = EngineReach(demo.fleet)

    def processed() -> dict[str, int]:
        listed = demo.loop.run(front_call(demo.fleet, gateway, "GET", "/workers"))[1]
        counts = {w["url"]: w["processed"] for w in json.loads(listed)["workers"]}
        return {name: counts[url] for name, url in url_of.items()}

    def chat(client, model: str):
        return client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "Hi"}]
        )

    try:
        tunnel = demo.loop.run(reach.tunnel(gateway.node, 30710))
        client = openai.OpenAI(base_url=tunnel.url + "/v1", api_key=ops, max_retries=0)
        listed = {m.id: getattr(m, "parent", None) for m in client.models.list()}
        assert listed == {LLAMA_8B: None, "sql": LLAMA_8B, "chat": LLAMA_8B, "summary": LLAMA_8B}
        # Each adapter's requests go to the replicas holding it, and to no other.
        for model, holder, other in (("sql", "lora-a", "lora-b"), ("summary", "lora-b", "lora-a")):
            before = processed()
            for _ in range(5):
                answer = chat(client, model)
                assert answer.choices[0].message.content and answer.model == model
            after = processed()
            assert (after[holder] - before[holder], after[other] - before[other]) == (5, 0)
        before = processed()
        for _ in range(6):
            assert chat(client, "chat").model == "chat"
            assert chat(client, LLAMA_8B).model == LLAMA_8B
        after = processed()
        assert all(after[n] > before[n] for n in url_of), (before, after)
        with pytest.raises(openai.NotFoundError) as missing:
            chat(client, "legal")
        assert missing.value.status_code == 404
        scoped = openai.OpenAI(base_url=tunnel.url + "/v1", api_key=team, max_retries=0)
        assert [m.id for m in scoped.models.list()] == ["sql"]
        assert scoped.completions.create(model="sql", prompt="SELECT").choices[0].text
        for other in ("chat", LLAMA_8B):
            with pytest.raises(openai.NotFoundError):
                chat(scoped, other)
        # The per-key counters name the adapter asked for and the model it adapts.
        counted = demo.loop.run(front_call(demo.fleet, gateway, "GET", "/metrics"))[1]
        assert (
            f'llmgw_gateway_model_requests_total{{key="team-sql",model="sql",parent="{LLAMA_8B}"}} 1'
            in counted
        ), counted
        assert (
            f'llmgw_gateway_model_requests_total{{key="ops",model="sql",parent="{LLAMA_8B}"}} 5'
            in (counted)
        )
    finally:
        demo.loop.run(reach.close())
    workers = demo.loop.run(router_workers(reach, gateway))
    held = {name: sorted(workers[url]["adapters"]) for name, url in url_of.items()}
    assert held == {"lora-a": ["chat", "sql"], "lora-b": ["chat", "summary"]}
    # The engine says, as vLLM does, which adapters it loaded at start.
    lines = demo.step("logs", replica="lora-a", lines=200).result["lines"]
    assert any(f"Loaded new LoRA adapter: name 'sql', path '{adapters['sql']}'" in x for x in lines)
