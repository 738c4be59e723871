"""The offline catalog: published facts, read by the model package's own readers."""

from __future__ import annotations

import pytest

from llmgw_core.catalog import catalog_model, known_models, write_model_dir
from llmgw_core.errors import BadInput
from llmgw_core.model.source import load_model


def test_llama_70b_is_its_published_shape_and_bytes():
    model = catalog_model("catalog:meta-llama/Llama-3.3-70B-Instruct")
    shape = model.shape
    assert (shape.num_layers, shape.hidden_size, shape.num_attention_heads, shape.num_kv_heads) == (
        80,
        8192,
        64,
        8,
    )
    assert (shape.vocab_size, shape.intermediate_size, shape.dtype) == (128256, 28672, "bfloat16")
    (original,) = model.artifacts
    assert original.size_bytes == 141_107_412_992
    assert original.param_count == 70_553_706_496
    assert len(original.files) == 30


def test_the_gguf_set_has_one_artifact_per_quantisation_with_llama_cpp_sizes():
    model = catalog_model("catalog:Qwen/Qwen2.5-14B-Instruct-GGUF")
    sizes = {a.name: round(a.size_gib, 2) for a in model.artifacts}
    assert sizes["Q4_K_M"] == 8.37 and sizes["Q8_0"] == 14.62
    assert all(a.format == "gguf" for a in model.artifacts)


def test_every_catalog_model_reads_as_a_shape():
    for repo_id in known_models():
        model = catalog_model(f"catalog:{repo_id}")
        assert model.shape is not None and model.artifacts, repo_id


def test_a_written_directory_loads_as_the_same_model(tmp_path):
    folder = write_model_dir("catalog:meta-llama/Llama-3.1-8B-Instruct", tmp_path)
    loaded = load_model(str(folder), read_gguf_headers=False)
    shipped = catalog_model("catalog:meta-llama/Llama-3.1-8B-Instruct")
    assert loaded.shape == shipped.shape
    assert [a.size_bytes for a in loaded.artifacts] == [16_060_522_496]


def test_an_unknown_catalog_model_is_bad_input():
    with pytest.raises(BadInput, match="the offline catalog has no model 'acme/None'"):
        catalog_model("catalog:acme/None")
