"""The families of hostile input a held-out corpus found, each a named regression test,
and a schema-driven fuzz that puts hostile values at any depth of real files.

Every outside document is read by one typed reader with bounds fit for the
domain (`config_numbers._BOUNDS`, shared by `config.json` and GGUF metadata;
`assemble.read_index` for the safetensors index) and cross-field rules
(`shape.check_shape`): a value is taken, or refused in one sentence naming the
file and the field — never a traceback, and never a shape that cannot exist
planned as if it could.
"""

from __future__ import annotations

import copy
import functools
import json
import math
import struct
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from json_paths import json_paths, put

from llmgw_core.errors import BadInput
from llmgw_core.model.assemble import parse_config_text, read_index
from llmgw_core.model.gguf_header import GgufHeader, read_gguf_header, shape_from_gguf
from llmgw_core.model.params import count_parameters
from llmgw_core.model.shape import ModelShape, shape_from_config

MODELS = Path(__file__).resolve().parents[3].parent / "shared" / "fixtures" / "models"
CONFIGS = sorted(MODELS.glob("*/config.json")) if MODELS.exists() else []
needs_fixtures = pytest.mark.skipif(not CONFIGS, reason="the shared model fixtures are absent")


def _deep_list(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = [value]
    return value


HOSTILE = [
    math.nan,
    math.inf,
    -math.inf,
    1e308,
    10**400,
    -(10**400),
    -1,
    0,
    2**63,
    "",
    "4096",
    True,
    [],
    {},
    [4096],
    {"a": 1},
    None,
    "\x00",
]
"""Wrong type, not a number, infinite, huge, negative, empty — each family the corpus named."""


def _config(name: str = "Qwen--Qwen3-30B-A3B") -> dict[str, Any]:
    return json.loads((MODELS / name / "config.json").read_text())


def _read_whole(config: dict[str, Any]) -> ModelShape | None:
    """The file's text read as the product reads it, its shape and what planning computes
    from it first; None when refused in a sentence."""
    try:
        shape = shape_from_config(parse_config_text(json.dumps(config), "config.json"))
    except BadInput as exc:
        sentence = exc.sentence()
        assert sentence and "\n" not in sentence and len(sentence) < 400, sentence
        return None
    counted = count_parameters(shape)
    assert counted.total > 0 and math.isfinite(float(counted.total))
    return shape


@needs_fixtures
@pytest.mark.parametrize("value", [1e308, 10**400, math.nan, math.inf, -math.inf, -4096])
@pytest.mark.parametrize(
    "key", ["hidden_size", "vocab_size", "num_hidden_layers", "intermediate_size", "num_experts"]
)
def test_a_number_that_overflows_or_is_not_finite_is_refused_naming_its_field(key, value):
    config = _config()
    config[key] = value
    with pytest.raises(BadInput) as refused:
        shape_from_config(config)
    assert refused.value.message.startswith(f"config.json: {key} is ")
    assert "0" * 100 not in refused.value.message  # a 400-digit number is not printed


@needs_fixtures
@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("rope_scaling", [1, 2]),
        ("rope_scaling", {"rope_type": "yarn", "factor": math.nan}),
        ("rope_scaling", {"rope_type": "yarn", "factor": 10**400}),
        ("torch_dtype", 16),
        ("num_key_value_heads", "4"),
        ("max_position_embeddings", [40960]),
        ("mlp_only_layers", {"0": 1}),
        ("quantization_config", [1]),
    ],
)
def test_a_value_of_the_wrong_type_at_any_depth_is_read_or_refused_in_a_sentence(key, value):
    config = _config()
    config[key] = value
    _read_whole(config)  # asserts a sentence on refusal, finite figures otherwise


@needs_fixtures
def test_more_experts_per_token_than_experts_cannot_exist():
    config = _config()
    config["num_experts_per_tok"] = config["num_experts"] + 1
    with pytest.raises(BadInput, match=r"config.json: 129 experts per token, but only 128 experts"):
        shape_from_config(config)


@needs_fixtures
def test_more_heads_than_the_embedding_holds_cannot_exist():
    config = _config("Qwen--Qwen3-8B")
    config["num_attention_heads"] = config["num_key_value_heads"] = 8192
    with pytest.raises(BadInput, match=r"8192 attention heads, more than the hidden size \(4096\)"):
        shape_from_config(config)


@pytest.mark.parametrize(
    ("index", "sentence"),
    [
        ({"metadata": {"total_size": -5}}, "metadata.total_size is -5, not a size any model has"),
        (
            {"metadata": {"total_size": 1e308}},
            "metadata.total_size is 1e+308, not a size any model has",
        ),
        ({"metadata": {"total_size": math.nan}}, "metadata.total_size is nan, not a whole number"),
        ({"metadata": {"total_size": "16GB"}}, "metadata.total_size is '16GB', not a whole number"),
        ({"metadata": [1]}, "metadata is a list, not an object"),
        ({"weight_map": [1]}, "weight_map is a list, not an object"),
        ({"weight_map": {"lm_head.weight": 3}}, "weight_map['lm_head.weight'] is not a file name"),
        ({"weight_map": {"x": "/etc/passwd"}}, "weight_map['x'] is not a file name"),
        ([], "model.safetensors.index.json is not a JSON object"),
    ],
)
def test_the_safetensors_index_is_read_by_its_schema(index, sentence):
    with pytest.raises(BadInput) as refused:
        read_index(index)
    assert sentence in refused.value.sentence()


def test_a_sound_index_is_read_whole():
    total, shards, params = read_index(
        {
            "metadata": {"total_size": 16_381_470_720, "total_parameters": 8_190_735_360},
            "weight_map": {
                "a": "model-00001-of-00002.safetensors",
                "b": "model-00002-of-00002.safetensors",
            },
        }
    )
    assert (total, params, len(shards)) == (16_381_470_720, 8_190_735_360, 2)


def _header(**values: Any) -> GgufHeader:
    metadata: dict[str, Any] = {
        "general.architecture": "llama",
        "llama.block_count": 2,
        "llama.embedding_length": 64,
        "llama.attention.head_count": 4,
        "llama.attention.head_count_kv": 2,
        "llama.vocab_size": 6000,
    }
    metadata.update(values)
    return GgufHeader(version=3, metadata=metadata, tensors=(), data_offset=0)


@pytest.mark.parametrize("value", [math.nan, math.inf, 1e308, 10**400, -3])
@pytest.mark.parametrize("key", ["llama.block_count", "llama.embedding_length", "llama.vocab_size"])
def test_gguf_metadata_numbers_are_held_to_the_same_bounds(key, value):
    with pytest.raises(BadInput) as refused:
        shape_from_gguf(_header(**{key: value}), where="model.gguf")
    assert refused.value.message.startswith(f"model.gguf: {key} is ")


def test_gguf_shapes_that_cannot_exist_are_refused():
    with pytest.raises(BadInput, match=r"model.gguf: 9 experts per token, but only 8 experts"):
        shape_from_gguf(
            _header(**{"llama.expert_count": 8, "llama.expert_used_count": 9}), where="model.gguf"
        )
    assert shape_from_gguf(_header(), where="model.gguf").num_layers == 2


def _nested_array_gguf(depth: int) -> bytes:
    """A GGUF header whose one value is an array of arrays … `depth` deep."""
    key = b"x.nested"
    body = struct.pack("<I", 9)  # ARRAY
    for _ in range(depth):
        body += struct.pack("<IQ", 9, 1)  # an array of one array
    body += struct.pack("<IQ", 4, 0)  # …of no uint32
    head = struct.pack("<IIQQ", 0x46554747, 3, 0, 1)
    return head + struct.pack("<Q", len(key)) + key + body


def test_a_config_nested_hundreds_deep_is_refused_before_it_is_read():
    config = {"model_type": "llama", "num_hidden_layers": 2, "rope_scaling": _deep_list(500)}
    with pytest.raises(BadInput, match=r"config.json nests values more than 32 deep"):
        parse_config_text(json.dumps(config), "config.json")


def test_a_gguf_array_nested_thousands_deep_is_refused_not_recursed():
    data = _nested_array_gguf(5000)
    with pytest.raises(BadInput, match="GGUF arrays nested more than 4 deep"):
        read_gguf_header(lambda offset, length: data[offset : offset + length], where="deep.gguf")


# --- the schema-driven fuzz ------------------------------------------------------------


@functools.cache
def _real_indexes() -> list[dict[str, Any]]:
    found = sorted(MODELS.glob("*/model.safetensors.index.json")) if MODELS.exists() else []
    return [json.loads(path.read_text()) for path in found]


hostile_values = st.sampled_from(range(len(HOSTILE))) | st.integers(20, 900)
"""An index into `HOSTILE`, or the depth of a nested list: drawn as a number, so a failing
example prints as one (a list 3,000 deep cannot be printed)."""


def hostile(drawn: int) -> Any:
    return HOSTILE[drawn] if drawn < len(HOSTILE) else _deep_list(drawn)


@needs_fixtures
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(file=st.integers(min_value=0), pick=st.integers(min_value=0), value=hostile_values)
def test_a_hostile_value_anywhere_in_a_real_config_is_read_or_refused_in_a_sentence(
    file, pick, value
):
    config = json.loads(CONFIGS[file % len(CONFIGS)].read_text())
    paths = json_paths(config)
    put(config, paths[pick % len(paths)], hostile(value))
    _read_whole(config)


@settings(max_examples=100, deadline=None)
@given(path=st.sampled_from(["metadata", "total_size", "total_parameters", "weight_map", "shard"]),
       value=hostile_values)  # fmt: skip
def test_a_hostile_value_anywhere_in_an_index_is_read_or_refused_in_a_sentence(path, value):
    drawn, value = value, hostile(value)
    real = _real_indexes()
    index: dict[str, Any] = (
        copy.deepcopy(real[drawn % len(real)])
        if real
        else {"metadata": {"total_size": 10**9}, "weight_map": {"lm_head.weight": "m.safetensors"}}
    )
    index.setdefault("metadata", {})
    index.setdefault("weight_map", {"lm_head.weight": "model-00001-of-00001.safetensors"})
    first = next(iter(index["weight_map"]), "lm_head.weight")
    if path in ("metadata", "weight_map"):
        index[path] = value
    elif path == "shard":
        index["weight_map"][first] = value
    else:
        index["metadata"][path] = value
    try:
        total, _shards, _params = read_index(index)
    except BadInput as exc:
        assert "\n" not in exc.sentence()
        return
    assert total is None or 0 < total <= 2**50


@settings(max_examples=200, deadline=None)
@given(
    key=st.sampled_from(
        ["llama.block_count", "llama.embedding_length", "llama.attention.head_count",
         "llama.attention.head_count_kv", "llama.vocab_size", "llama.context_length",
         "llama.expert_count", "llama.expert_used_count", "llama.feed_forward_length",
         "llama.attention.sliding_window", "llama.rope.dimension_count"]
    ),
    value=hostile_values,
)  # fmt: skip
def test_a_hostile_gguf_value_is_read_or_refused_in_a_sentence(key, value):
    value = hostile(value)
    try:
        shape = shape_from_gguf(_header(**{key: value}), where="model.gguf")
    except BadInput as exc:
        assert exc.sentence().startswith("model.gguf") and "\n" not in exc.sentence()
        return
    assert count_parameters(shape).total > 0


def test_a_split_gguf_with_a_part_missing_is_refused_naming_the_part():
    from llmgw_core.model.artifacts import RepoFile, gguf_sets

    parts = [RepoFile(f"q/tiny-Q8_0-0000{i}-of-00003.gguf", 10) for i in (1, 3)]
    with pytest.raises(BadInput, match=r"split in 3 parts and part 2 is missing"):
        gguf_sets(parts)
    whole = [RepoFile(f"q/tiny-Q8_0-0000{i}-of-00003.gguf", 10) for i in (1, 2, 3)]
    assert [len(v) for v in gguf_sets(whole).values()] == [3]
    disagree = [RepoFile("a-00001-of-00002.gguf", 1), RepoFile("a-00002-of-00003.gguf", 1)]
    with pytest.raises(BadInput, match="disagree on how many"):
        gguf_sets(disagree)


@needs_fixtures
@pytest.mark.parametrize("value", [10**400, -(10**400), math.nan, 2**40])
def test_a_quantisation_number_past_any_format_is_refused(value):
    config = _config()
    config["quantization_config"] = {"quant_method": "gptq", "bits": value, "group_size": 128}
    with pytest.raises(
        BadInput, match=r"quantization_config: bits is .*, not a positive whole number"
    ):
        shape_from_config(config)
