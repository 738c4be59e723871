"""Any damage to a real config.json ends in a shape or one BadInput sentence, never a traceback."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from llmgw_core.errors import BadInput
from llmgw_core.model.shape import shape_from_config

MODELS = Path(__file__).resolve().parents[3].parent / "shared" / "fixtures" / "models"
CONFIGS = sorted(MODELS.glob("*/config.json")) if MODELS.exists() else []

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.floats() | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=8,
)


@pytest.mark.skipif(not CONFIGS, reason="the shared model fixtures are absent")
@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    index=st.integers(min_value=0),
    key_pick=st.integers(min_value=0),
    value=json_values,
    in_text=st.booleans(),
)
def test_a_damaged_config_is_a_shape_or_a_sentence(index, key_pick, value, in_text):
    config = json.loads(CONFIGS[index % len(CONFIGS)].read_text())
    target = (
        config["text_config"] if in_text and isinstance(config.get("text_config"), dict) else config
    )
    keys = sorted(target)
    key = keys[key_pick % len(keys)]
    nested = target[key]
    if isinstance(nested, dict) and nested and key_pick % 2:
        # damage one level down: rope_scaling, quantization_config, ...
        inner = sorted(nested)
        nested[inner[key_pick // 2 % len(inner)]] = value
    else:
        target[key] = value
    try:
        shape = shape_from_config(config)
    except BadInput as exc:
        assert exc.sentence() and "\n" not in exc.sentence()
        return
    assert shape.num_layers >= 1 and len(shape.layer_attention) == shape.num_layers


@pytest.mark.parametrize(
    ("where", "key", "value", "sentence"),
    [
        ("rope_scaling", "factor", "x", "config.json: rope_scaling.factor is 'x', not a positive number"),
        ("rope_scaling", "original_max_position_embeddings", -1,
         "config.json: rope_scaling.original_max_position_embeddings is -1, not a positive number"),
        ("quantization_config", "bits", "four",
         "quantization_config: bits is 'four', not a positive whole number"),
        (None, "mlp_only_layers", 7, None),
        (None, "num_key_value_heads", 2.5, "config.json: num_key_value_heads is 2.5, not a whole number"),
    ],
)  # fmt: skip
@pytest.mark.skipif(not CONFIGS, reason="the shared model fixtures are absent")
def test_damaged_nested_values_are_named(where, key, value, sentence):
    config = json.loads((MODELS / "Qwen--Qwen3-30B-A3B" / "config.json").read_text())
    if where == "rope_scaling":
        config["rope_scaling"] = {"rope_type": "yarn", "factor": 4.0, key: value}
    elif where == "quantization_config":
        config["quantization_config"] = {"quant_method": "gptq", "group_size": 128, key: value}
    else:
        config[key] = value
    if sentence is None:
        assert shape_from_config(config).num_layers == 48
        return
    with pytest.raises(BadInput) as refused:
        shape_from_config(config)
    assert refused.value.sentence() == sentence
