"""Weights counted from the architecture against real file sizes; malformed inputs in one sentence."""

from __future__ import annotations

import json

import pytest
from header_ggufs import write_tiny_llama

from llmgw_core.errors import BadInput
from llmgw_core.model.artifacts import RepoFile, gguf_quant_name, gguf_sets, safetensors_set
from llmgw_core.model.gguf_header import read_gguf_header
from llmgw_core.model.local import read_local_gguf
from llmgw_core.model.params import count_parameters, weights_bytes_from_params
from llmgw_core.model.shape import shape_from_config
from llmgw_core.model.source import load_model


def _shape(models_dir, name):
    directory = models_dir / name
    config = json.loads((directory / "config.json").read_text())
    extra = {
        n: json.loads((directory / n).read_text())
        for n in ("hf_quant_config.json", "quantize_config.json")
        if (directory / n).exists()
    }
    return shape_from_config(config, extra_files=extra)


# directory, real weight bytes (index total_size, or shard sum from files.json)
REAL_SIZES = [
    ("meta-llama--Llama-3.1-8B-Instruct", 16_060_522_496),
    ("mistralai--Mixtral-8x7B-Instruct-v0.1", 93_405_585_408),
    ("Qwen--Qwen2.5-Coder-32B-Instruct", 65_527_752_704),
    ("Qwen--Qwen2.5-Math-72B-Instruct", 145_412_407_296),
    ("mattshumer--Reflection-Llama-3.1-70B", 282_215_219_200),
    ("TheBloke--Genz-70b-GPTQ", 36_652_345_792),
    ("deepseek-ai--DeepSeek-R1", 688_586_727_753),
]


@pytest.mark.parametrize(("name", "real_bytes"), REAL_SIZES, ids=[r[0] for r in REAL_SIZES])
def test_weights_counted_from_the_architecture_land_within_one_percent_of_the_files(
    models_dir, name, real_bytes
):
    shape = _shape(models_dir, name)
    counted = weights_bytes_from_params(count_parameters(shape), shape)
    assert counted == pytest.approx(real_bytes, rel=0.01)


def test_published_parameter_totals(models_dir):
    billions = {
        "meta-llama--Llama-3.1-8B-Instruct": 8.03,
        "meta-llama--Llama-3.1-70B-Instruct": 70.55,
        "mistralai--Mixtral-8x7B-Instruct-v0.1": 46.70,
        "Qwen--Qwen3-235B-A22B": 235.09,
        "deepseek-ai--DeepSeek-V3": 671.03,
        "openai--gpt-oss-120b": 116.83,
    }
    for name, expected in billions.items():
        assert count_parameters(_shape(models_dir, name)).main / 1e9 == pytest.approx(
            expected, abs=0.01
        )


def test_mixtral_listing_counts_only_the_safetensors_set(models_dir):
    listing = [RepoFile(e["path"], e["size"]) for e in json.loads(
        (models_dir / "mistralai--Mixtral-8x7B-Instruct-v0.1" / "files.json").read_text())]  # fmt: skip
    assert any(f.path.startswith("consolidated.") for f in listing)
    chosen = safetensors_set(listing)
    assert len(chosen) == 19 and all(f.path.startswith("model-") for f in chosen)


def test_gguf_listing_gives_every_quantisation_its_file(models_dir):
    listing = [RepoFile(e["path"], e["size"]) for e in json.loads(
        (models_dir / "TheBloke--Mistral-7B-Instruct-v0.2-GGUF" / "files.json").read_text())]  # fmt: skip
    sets = gguf_sets(listing)
    assert len(sets) == 12
    assert sets["Q2_K"][0].size == 3_083_098_400
    assert sets["Q8_0"][0].size == 7_695_857_952


def test_quantisation_names_are_read_from_file_names():
    assert gguf_quant_name("Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf") == "Q4_K_M"
    assert gguf_quant_name("qwen1_5-7b-chat-q5_k_m.gguf") == "Q5_K_M"
    assert gguf_quant_name("Starling-LM-7B-beta-IQ4_XS.gguf") == "IQ4_XS"
    assert gguf_quant_name("Q4_K_M/model-00001-of-00003.gguf") == "Q4_K_M"


def test_a_local_directory_without_config_or_gguf_is_refused(tmp_path):
    (tmp_path / "README.md").write_text("hello")
    with pytest.raises(BadInput) as refused:
        load_model(str(tmp_path))
    assert refused.value.sentence().endswith(
        "has no config.json and no .gguf file: point at a model directory (config.json + weights) or a GGUF file"
    )


def test_a_missing_local_path_is_refused():
    with pytest.raises(BadInput, match="does not exist"):
        load_model("/nonexistent/model")


def test_a_local_directory_counts_its_safetensors_files(tmp_path, models_dir):
    (tmp_path / "config.json").write_bytes(
        (models_dir / "Qwen--Qwen3-8B" / "config.json").read_bytes()
    )
    for i in (1, 2):
        (tmp_path / f"model-0000{i}-of-00002.safetensors").write_bytes(b"\0" * 1000 * i)
    (tmp_path / "original").mkdir()
    (tmp_path / "original" / "consolidated.safetensors").write_bytes(b"\0" * 5000)
    model = load_model(str(tmp_path))
    (original,) = model.artifacts
    assert original.size_bytes == 3000 and len(original.files) == 2


@pytest.mark.parametrize(
    ("config", "sentence"),
    [
        ({"model_type": "llama", "num_hidden_layers": "32", "hidden_size": 4096},
         "config.json: num_hidden_layers is '32', not a whole number"),
        ({"model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096},
         "config.json has no num_attention_heads: it is not a full model config"),
        ({"model_type": "gpt_oss", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
          "layer_types": ["full_attention"]},
         "config.json: layer_types lists 1 layers, num_hidden_layers is 2"),
        ({"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
          "vocab_size": 10, "quantization_config": "fp8"},
         "config.json: quantization_config is not a mapping"),
        ({"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64, "num_attention_heads": 4,
          "vocab_size": 10, "layer_types": ["full_attention", "linear_attention"]},
         "layer type 'linear_attention' is not supported: llmgw sizes full, sliding-window and chunked attention layers"),
        ({"architectures": ["T5ForConditionalGeneration"], "model_type": "t5", "num_layers": 6},
         "architecture T5ForConditionalGeneration is not supported: it is an encoder-decoder: llmgw plans decoder-only transformers"),
        ([1, 2], "config.json is not a JSON object: check that the file is a model config"),
    ],
)  # fmt: skip
def test_a_malformed_config_is_one_sentence(config, sentence):
    with pytest.raises(BadInput) as refused:
        shape_from_config(config)
    assert refused.value.sentence() == sentence


def test_a_file_that_is_not_gguf_is_named(tmp_path):
    bogus = tmp_path / "model.Q4_K_M.gguf"
    bogus.write_bytes(b"PK\x03\x04 not a gguf")
    with pytest.raises(BadInput) as refused:
        read_local_gguf(bogus)
    assert (
        refused.value.sentence()
        == f"{bogus} is not a GGUF file (bad magic): check the file name and download"
    )


def test_a_truncated_gguf_header_is_named(tmp_path):
    whole = write_tiny_llama(tmp_path / "whole.gguf").read_bytes()
    with pytest.raises(BadInput, match="ends inside its GGUF header"):
        read_gguf_header(
            lambda offset, length: whole[:2000][offset : offset + length], where="cut.gguf"
        )


def test_a_local_gguf_header_gives_exact_tensor_bytes_per_layer(tmp_path):
    import gguf

    path = write_tiny_llama(tmp_path / "tiny.Q8_0.gguf", layers=3)
    header = read_local_gguf(path)
    reader = gguf.GGUFReader(str(path))
    assert header.tensor_bytes() == sum(int(t.n_bytes) for t in reader.tensors)
    assert header.data_offset == reader.data_offset
    model = load_model(str(path))
    (artifact,) = model.artifacts
    assert artifact.name == "Q8_0" and len(artifact.tensor_bytes_by_layer) == 3
    assert artifact.quantization.bits == pytest.approx(8.5, abs=0.2)


def test_a_repository_with_only_pytorch_bins_counts_them():
    listing = [
        RepoFile("pytorch_model-00001-of-00002.bin", 9_900_000_000),
        RepoFile("pytorch_model-00002-of-00002.bin", 3_500_000_000),
        RepoFile("training_args.bin", 4_000),
    ]
    chosen = safetensors_set(listing)
    assert [f.path for f in chosen] == [
        "pytorch_model-00001-of-00002.bin",
        "pytorch_model-00002-of-00002.bin",
    ]


def test_older_key_names_are_read_like_the_standard_ones():
    # a GPT-BigCode-style config (StarCoder): n_layer, n_embd, n_head, n_positions
    shape = shape_from_config({
        "architectures": ["GPTBigCodeForCausalLM"], "model_type": "gpt_bigcode",
        "n_layer": 40, "n_embd": 6144, "n_head": 48, "n_positions": 8192, "n_inner": 24576,
        "vocab_size": 49152, "multi_query": True, "torch_dtype": "float32",
    })  # fmt: skip
    assert (shape.num_layers, shape.hidden_size, shape.num_attention_heads) == (40, 6144, 48)
    assert (shape.max_context, shape.intermediate_size, shape.dtype) == (8192, 24576, "float32")
