"""A shipped model written out as a directory reads back as the same model."""

from __future__ import annotations

import pytest

from llmgw_core.catalog import CATALOG, catalog_model, write_model_dir
from llmgw_core.model.source import load_model

SAFETENSORS_MODELS = [entry.repo_id for entry in CATALOG if not entry.gguf_files]


def test_every_entry_says_where_its_figures_come_from():
    assert [entry.repo_id for entry in CATALOG if not entry.source] == []
    assert len({entry.repo_id.lower() for entry in CATALOG}) == len(CATALOG)


@pytest.mark.parametrize("repo_id", SAFETENSORS_MODELS)
def test_a_written_directory_loads_with_the_catalog_shape_and_bytes(repo_id, tmp_path):
    folder = write_model_dir(f"catalog:{repo_id}", tmp_path)
    loaded = load_model(str(folder), read_gguf_headers=False)
    shipped = catalog_model(f"catalog:{repo_id}")
    assert loaded.shape == shipped.shape
    assert [a.size_bytes for a in loaded.artifacts] == [a.size_bytes for a in shipped.artifacts]


def test_a_modelopt_checkpoint_keeps_its_quant_file_when_written(tmp_path):
    folder = write_model_dir("catalog:nvidia/Llama-3.1-70B-Instruct-FP8", tmp_path)
    assert (folder / "hf_quant_config.json").exists()
    quantization = load_model(str(folder), read_gguf_headers=False).shape.quantization
    assert (quantization.method, quantization.kv_cache_dtype) == ("modelopt-fp8", "fp8")
