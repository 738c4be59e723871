"""One resolution rule: catalog, local path, or Hub — and the catalog only when the Hub cannot answer."""

from __future__ import annotations

import pytest
from hub_server import repo_from_fixture

from llmgw_core.catalog import ShippedModel
from llmgw_core.catalog.resolve import OFFLINE_NOTE, origin_note, resolve_model
from llmgw_core.errors import BadInput, LlmgwError

LLAMA_70B = "meta-llama/Llama-3.3-70B-Instruct"


def test_a_catalog_reference_is_the_shipped_record():
    model = resolve_model(f"catalog:{LLAMA_70B}")
    assert origin_note(model) == "from the shipped catalog"
    assert model.artifacts[0].size_bytes == 141_107_412_992


def test_offline_a_hub_id_the_catalog_knows_is_planned_from_it_and_says_so(
    hub_at, refusing_endpoint
):
    hub_at(refusing_endpoint)
    model = resolve_model(LLAMA_70B, offline=True)
    assert origin_note(model) == "from the shipped catalog (offline)"
    assert model.ref == LLAMA_70B and model.repo_id == LLAMA_70B
    assert model.shape.num_layers == 80


def test_a_hub_that_refuses_connections_falls_back_to_the_catalog(hub_at, refusing_endpoint):
    hub_at(refusing_endpoint)
    model = resolve_model(LLAMA_70B)
    assert isinstance(model, ShippedModel)
    assert origin_note(model) == f"{OFFLINE_NOTE}: the Hub at {refusing_endpoint} does not answer"


def test_an_unreachable_hub_and_a_model_the_catalog_lacks_is_one_sentence(
    hub_at, refusing_endpoint
):
    hub_at(refusing_endpoint)
    with pytest.raises(LlmgwError, match=f"cannot reach the Hub at {refusing_endpoint}") as caught:
        resolve_model("acme/unknown-model-7B")
    assert not isinstance(caught.value, BadInput)


def test_a_404_from_a_reachable_hub_is_not_masked_by_the_catalog(local_hub):
    with pytest.raises(BadInput, match=f"{LLAMA_70B} is not a model repository on"):
        resolve_model(LLAMA_70B)


def test_offline_false_never_uses_the_catalog_for_a_hub_id(hub_at, refusing_endpoint):
    hub_at(refusing_endpoint)
    with pytest.raises(LlmgwError, match="cannot reach the Hub"):
        resolve_model(LLAMA_70B, offline=False)


def test_a_reachable_hub_is_read_even_for_a_model_the_catalog_knows(local_hub, models_dir):
    local_hub.repos["mistralai/Mixtral-8x7B-Instruct-v0.1"] = repo_from_fixture(
        models_dir / "mistralai--Mixtral-8x7B-Instruct-v0.1"
    )
    model = resolve_model("mistralai/Mixtral-8x7B-Instruct-v0.1")
    assert origin_note(model) is None
    assert [a.size_bytes for a in model.artifacts] == [93_405_585_408]


def test_hf_hub_offline_with_an_empty_cache_uses_the_catalog(
    hub_at, refusing_endpoint, monkeypatch
):
    hub_at(refusing_endpoint)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model = resolve_model(LLAMA_70B)
    assert origin_note(model) == f"{OFFLINE_NOTE}: HF_HUB_OFFLINE is set"


def test_a_directory_is_read_relative_to_the_script(tmp_path, models_dir):
    script_dir = tmp_path / "scripts"
    script_dir.mkdir()
    (tmp_path / "weights").symlink_to(models_dir / "mistralai--Mixtral-8x7B-Instruct-v0.1")
    model = resolve_model("../weights", script_dir=script_dir, offline=True)
    assert origin_note(model) is None
    assert model.shape.num_experts == 8


def test_a_missing_directory_is_named_not_looked_up_on_the_hub(tmp_path):
    with pytest.raises(BadInput, match="nope"):
        resolve_model("./nope", script_dir=tmp_path)


def test_hf_hub_offline_prefers_the_local_cache_to_the_catalog(local_hub, models_dir, monkeypatch):
    from huggingface_hub import constants

    local_hub.repos["mistralai/Mixtral-8x7B-Instruct-v0.1"] = repo_from_fixture(
        models_dir / "mistralai--Mixtral-8x7B-Instruct-v0.1"
    )
    resolve_model("mistralai/Mixtral-8x7B-Instruct-v0.1")  # fills the private cache
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    model = resolve_model("mistralai/Mixtral-8x7B-Instruct-v0.1")
    assert origin_note(model) is None
    assert model.shape.num_experts == 8
