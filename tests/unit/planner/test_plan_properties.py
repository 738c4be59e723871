"""Properties every plan keeps, whatever the fleet: checked on generated described fleets."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llmgw_core.catalog import catalog_model
from llmgw_core.planner.gpu_classes import gpu_class
from llmgw_core.planner.plan import plan
from llmgw_core.planner.pools import described_fleet
from llmgw_core.planner.ways import width_refusal

MODELS = {
    ref: catalog_model(ref)
    for ref in (
        "catalog:meta-llama/Llama-3.1-8B-Instruct",
        "catalog:meta-llama/Llama-3.3-70B-Instruct",
        "catalog:Qwen/Qwen3-30B-A3B",
        "catalog:Qwen/Qwen2.5-14B-Instruct-GGUF",
    )
}
CLASSES = ["h100-80g", "a100-40g", "l40s-48g", "t4-16g", "gb200-186g", "a100-80g-mig-3g.40gb"]

gpu_entry = st.fixed_dictionaries(
    {
        "gpu": st.sampled_from(CLASSES),
        "gpus": st.integers(1, 8),
        "count": st.integers(1, 4),
        "busy": st.integers(0, 8),
    },
    optional={"fabric": st.sampled_from(["ib-a", "ib-b"])},
)
cpu_entry = st.fixed_dictionaries(
    {"gpus": st.just(0), "memory_gib": st.sampled_from([32, 128, 512])}
)


def _fleet(entries: list[dict]) -> list[dict]:
    named = []
    for index, entry in enumerate(entries):
        entry = dict(entry, name=f"n{index}")
        if entry.get("gpus"):
            entry["busy"] = min(entry["busy"], entry["gpus"])
        named.append(entry)
    return named


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    entries=st.lists(st.one_of(gpu_entry, cpu_entry), min_size=1, max_size=5),
    ref=st.sampled_from(sorted(MODELS)),
    context=st.sampled_from([4096, 32768]),
)
def test_every_way_fits_obeys_the_rules_and_comes_best_first(entries, ref, context):
    model = MODELS[ref]
    result = plan(model, described_fleet(_fleet(entries)), context=context)
    for way in result.options:
        assert way.per_card_gib <= way.usable_gib + 1e-9
        if way.on_cpu:
            assert way.engine in ("llama.cpp", "vllm") and way.cards == 0
            if way.engine == "vllm":
                # A rank per NUMA node; the KV cache whole GiB, as VLLM_CPU_KVCACHE_SPACE takes it.
                assert way.cpu_kv_cache_gib is not None and way.cpu_kv_cache_gib >= 1
                assert way.context_gib == way.cpu_kv_cache_gib
                assert way.serve.startswith(f"VLLM_CPU_KVCACHE_SPACE={way.cpu_kv_cache_gib} ")
                assert way.max_concurrency is not None and way.max_concurrency >= 1
            continue
        card = gpu_class(way.gpu_class)
        assert way.cards == way.tensor_parallel * way.pipeline_parallel
        if card.is_mig:
            assert way.cards == 1
        if way.engine != "llama.cpp":
            assert width_refusal(model.shape, way.tensor_parallel) is None
            assert way.over_pcie == (way.tensor_parallel > 1 and not card.nvlink)
            if way.nodes > 1:
                assert way.interconnect is not None
    kinds = [(w.kind, w.cards, w.nodes) for w in result.options]
    assert kinds == sorted(kinds)
    if result.best is None:
        assert result.advice
    for row in result.artifacts:
        if row.best is not None:
            assert row.best in result.options
