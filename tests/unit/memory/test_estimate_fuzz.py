"""Any layout of any fixture model gets an estimate or one sentence, never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmgw_core.errors import BadInput
from llmgw_core.memory import Layout, card_need
from llmgw_core.memory.vllm import estimate
from llmgw_core.model.artifacts import Artifact
from llmgw_core.model.params import count_parameters, weights_bytes_from_params
from llmgw_core.model.shape import is_full_config, shape_from_config

MODELS = Path(__file__).resolve().parents[3].parent / "shared" / "fixtures" / "models"
SHAPES = [
    shape_from_config(config)
    for path in sorted(MODELS.glob("*/config.json"))
    if is_full_config(config := json.loads(path.read_text()))
]


@pytest.mark.skipif(not SHAPES, reason="the shared model fixtures are absent")
@settings(max_examples=150, deadline=None)
@given(
    index=st.integers(min_value=0),
    tp=st.sampled_from([1, 2, 3, 4, 8, 16, 64]),
    pp=st.integers(1, 8),
    util=st.floats(0.05, 1.0),
    memory=st.sampled_from([7.5, 23.58, 79.19, 139.81, 180.0]),
    max_len=st.integers(1, 1 << 21),
    kv=st.sampled_from([None, "auto", "fp8", "fp8_e5m2", "fp8_ds_mla"]),
    engine=st.sampled_from(["vllm", "sglang", "llama.cpp"]),
)
def test_every_layout_is_an_estimate_or_a_sentence(
    index, tp, pp, util, memory, max_len, kv, engine
):
    shape = SHAPES[index % len(SHAPES)]
    size = weights_bytes_from_params(count_parameters(shape), shape)
    try:
        got = estimate(shape, size, gpu_memory_gib=memory, tensor_parallel=tp, pipeline_parallel=pp,
                       gpu_memory_utilization=util, max_model_len=max_len, kv_cache_dtype=kv)  # fmt: skip
        assert got.fits == (got.reason is None)
        artifact = Artifact("original", "safetensors", (), size, shape=shape)
        kv_type = None if engine != "llama.cpp" else "f16"
        need = card_need(engine, artifact, shape, Layout(tp, pp), context=max_len,
                         card_memory_gib=memory, gpu_memory_utilization=util,
                         kv_cache_dtype=kv_type)  # fmt: skip
        assert need.total_gib > 0
    except BadInput as exc:
        assert exc.sentence()
