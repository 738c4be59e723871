"""The plan counts LoRA adapters' room on each card and names it when it pushes a model over."""

from __future__ import annotations

import re

from llmgw_core.catalog.resolve import resolve_model
from llmgw_core.memory.adapters import LoraSlots
from llmgw_core.model.adapters import AdapterShape
from llmgw_core.planner.plan import plan
from llmgw_core.planner.pools import described_fleet

LLAMA_8B = "meta-llama/Llama-3.1-8B-Instruct"
ONE_L4 = [{"name": "l4", "count": 1, "gpu": "l4-24g", "gpus": 1}]


def _slots(kind: str, loras: int, rank: int) -> LoraSlots:
    adapter = AdapterShape("sql", "/a/sql", kind, rank, 16.0, ("q_proj",), "bfloat16", 1, 32, 4096)
    return LoraSlots(adapters=(adapter,), max_loras=loras, max_lora_rank=rank)


def test_a_model_that_fits_bare_is_refused_with_eight_rank_64_slots_naming_the_term():
    model = resolve_model(f"catalog:{LLAMA_8B}")
    fleet = described_fleet(ONE_L4)
    bare = plan(model, fleet, context=16384, format="safetensors")
    assert bare.best is not None
    loaded = plan(model, fleet, context=16384, format="safetensors", adapters=_slots("peft", 8, 64))
    assert loaded.best is None
    sentence = loaded.does_not_fit_sentence()
    found = re.search(
        r"the adapters' (?P<gb>[0-9.]+) GB a card under (?P<engine>vLLM|SGLang) \(max_loras 8 × "
        r"max_lora_rank 64\) push it over on 1 × l4-24g, where it fits without them: "
        r"max_loras (?P<fewer>[0-9]+) fits",
        sentence,
    )
    assert found, sentence
    fewer = int(found["fewer"])
    assert 1 <= fewer < 8
    assert (
        plan(
            model, fleet, context=16384, format="safetensors", adapters=_slots("peft", fewer, 64)
        ).best
        is not None
    )


def test_gguf_adapters_are_planned_on_llama_cpp_only_and_peft_ones_off_it():
    model = resolve_model("catalog:lmstudio-community/Meta-Llama-3.1-8B-Instruct-GGUF")
    fleet = described_fleet(ONE_L4)
    with_peft = plan(model, fleet, context=8192, adapters=_slots("peft", 1, 8))
    assert with_peft.best is None
    assert any("llama.cpp does not serve PEFT (safetensors) adapters" in n for n in with_peft.notes)
    with_gguf = plan(model, fleet, context=8192, adapters=_slots("gguf", 1, 8))
    assert with_gguf.best is not None and with_gguf.best.engine == "llama.cpp"
    assert with_gguf.best.adapters_gib > 0


def test_the_plans_command_starts_the_engine_with_the_adapters_it_made_room_for():
    import shlex

    model = resolve_model(f"catalog:{LLAMA_8B}")
    one_h100 = [{"name": "h", "count": 1, "gpu": "h100-80g", "gpus": 1}]
    best = plan(
        model,
        described_fleet(one_h100),
        context=8192,
        format="safetensors",
        adapters=_slots("peft", 2, 16),
    ).best
    assert best is not None
    argv = shlex.split(best.serve)
    if best.engine == "vllm":
        at = argv.index("--max-loras")
        assert "--enable-lora" in argv and argv[at + 1] == "2"
        assert argv[argv.index("--max-lora-rank") + 1] == "16"
        assert '"name": "sql"' in argv[argv.index("--lora-modules") + 1]
    else:
        assert argv[argv.index("--max-loras-per-batch") + 1] == "2"
        assert "sql=/a/sql" in argv


def test_plan_refuses_an_adapter_named_twice_as_serve_does():
    import pytest
    from pydantic import ValidationError

    from llmgw_core.script.steps.plan import PlanArgs
    from llmgw_core.serve.args import ServeFields

    twice = {
        "model": f"catalog:{LLAMA_8B}",
        "adapters": [{"name": "x", "source": "/a/x"}, {"name": "x", "source": "/a/y"}],
    }
    for args in (PlanArgs, ServeFields):
        with pytest.raises(ValidationError, match="adapter 'x' is named twice"):
            args.model_validate(twice)
        with pytest.raises(ValidationError, match="give adapters: too"):
            args.model_validate({"model": twice["model"], "max_loras": 2})
