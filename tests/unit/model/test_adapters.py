"""LoRA adapters read from their own files, checked against the served model, and sized."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from lora_files import TINY_GGUF, Widths, write_gguf_adapter, write_peft_adapter

from llmgw_core.catalog.resolve import resolve_model
from llmgw_core.errors import BadInput
from llmgw_core.memory import Layout, card_need
from llmgw_core.memory.adapters import (
    LoraSlots,
    card_bytes,
    default_vllm_rank,
    gguf_loaded_bytes,
    slots_for,
)
from llmgw_core.model.adapter_source import load_adapter
from llmgw_core.model.adapters import adapter_refusal

LLAMA_70B = "meta-llama/Llama-3.3-70B-Instruct"
LLAMA_8B = "meta-llama/Llama-3.1-8B-Instruct"
W8B = Widths(hidden=4096, intermediate=14336, heads=32, kv_heads=8, layers=32)


def _shape(ref: str):
    return resolve_model(f"catalog:{ref}").any_shape


def test_a_peft_adapter_is_read_from_its_files(tmp_path: Path) -> None:
    folder = write_peft_adapter(
        tmp_path / "sql",
        W8B,
        rank=16,
        alpha=32,
        targets=("q_proj", "k_proj", "v_proj", "o_proj"),
        base_model=LLAMA_8B,
    )
    adapter = load_adapter("sql", str(folder))
    assert (adapter.rank, adapter.alpha, adapter.format) == (16, 32.0, "peft")
    assert adapter.target_modules == ("q_proj", "k_proj", "v_proj", "o_proj")
    assert (adapter.hidden_size, adapter.layers, adapter.dtype) == (4096, 32, "float16")
    # q: 16 × (4096 + 4096), k and v: 16 × (4096 + 1024), o: 16 × (4096 + 4096), F16, 32 layers.
    assert adapter.n_bytes == 16 * (8192 + 5120 + 5120 + 8192) * 2 * 32
    assert adapter_refusal(adapter, _shape(LLAMA_8B), served=LLAMA_8B) is None


def test_a_gguf_adapter_is_read_from_its_header(tmp_path: Path) -> None:
    path = write_gguf_adapter(
        tmp_path / "a.gguf", TINY_GGUF, rank=4, alpha=8, targets=("q_proj", "down_proj")
    )
    adapter = load_adapter("tiny", str(path))
    assert (adapter.rank, adapter.alpha, adapter.format, adapter.dtype) == (4, 8.0, "gguf", "F32")
    assert (adapter.hidden_size, adapter.layers, adapter.architecture) == (64, 2, "llama")
    assert adapter.target_modules == ("q_proj", "down_proj")
    # Each tensor aligned to 32 bytes as llama.cpp's CPU buffer places it.
    assert gguf_loaded_bytes(adapter) == adapter.n_bytes == 2 * 4 * 4 * (64 + 64 + 128 + 64)


@pytest.mark.parametrize(
    ("change", "words"),
    [
        (
            dict(widths=Widths(hidden=8192, intermediate=28672, heads=64, kv_heads=8, layers=2)),
            "hidden size of 8192, and meta-llama/Llama-3.1-8B-Instruct has 4096",
        ),
        (dict(base_model="mistralai/Mistral-7B-v0.1"), "trained on mistralai/Mistral-7B-v0.1"),
        (dict(rank=128), "rank 128, above max_lora_rank 64"),
        (
            dict(widths=Widths(hidden=4096, intermediate=14336, heads=32, kv_heads=8, layers=40)),
            "adapts 40 layers",
        ),
    ],
)
def test_a_mismatched_adapter_is_refused_naming_the_mismatch(
    tmp_path: Path, change: dict, words: str
) -> None:
    widths = change.pop(
        "widths", Widths(hidden=4096, intermediate=14336, heads=32, kv_heads=8, layers=2)
    )
    folder = write_peft_adapter(tmp_path / "x", widths, **{"base_model": LLAMA_8B, **change})
    adapter = load_adapter("x", str(folder))
    refusal = adapter_refusal(adapter, _shape(LLAMA_8B), served=LLAMA_8B, max_lora_rank=64)
    assert refusal is not None and words in refusal, refusal


@pytest.mark.parametrize(
    ("config", "words"),
    [
        ({"r": True}, "r (its rank) is True"),
        ({"r": 10**40}, "a huge number"),
        ({"r": 0}, "not a whole number from 1"),
        ({"lora_alpha": float("nan")}, "lora_alpha"),
        ({"peft_type": "IA3"}, "only LoRA adapters serve"),
        ({"use_dora": True}, "DoRA"),
        ({"modules_to_save": ["lm_head"]}, "modules_to_save"),
        ({"target_modules": [{"a": 1}]}, "not a module name"),
        ({"target_modules": ["q_proj"]}, "which target_modules does not name"),
        ({"base_model_name_or_path": "x\nrm -rf /"}, "not a name"),
        ({"rank_pattern": [1, 2]}, "rank_pattern"),
    ],
)
def test_hostile_adapter_configs_are_refused_in_one_sentence(
    tmp_path: Path, config: dict, words: str
) -> None:
    folder = write_peft_adapter(tmp_path / "h", W8B, config=config)
    with pytest.raises(BadInput) as caught:
        load_adapter("h", str(folder))
    assert words in caught.value.sentence()
    assert "\n" not in caught.value.sentence()


def test_a_folder_without_adapter_config_is_refused(tmp_path: Path) -> None:
    folder = write_peft_adapter(tmp_path / "n", W8B)
    (folder / "adapter_config.json").unlink()
    with pytest.raises(BadInput, match=r"has no adapter_config\.json"):
        load_adapter("n", str(folder))


@pytest.mark.parametrize(
    "damage",
    [
        b"",
        b"\xff" * 8,
        (10**9).to_bytes(8, "little"),
        (20).to_bytes(8, "little") + b"[1, 2]" + b" " * 14,
        (12).to_bytes(8, "little") + b'{"t": 1}    ',
    ],
)
def test_a_damaged_safetensors_header_is_refused(tmp_path: Path, damage: bytes) -> None:
    folder = write_peft_adapter(tmp_path / "d", W8B)
    (folder / "adapter_model.safetensors").write_bytes(damage)
    with pytest.raises(BadInput):
        load_adapter("d", str(folder))


def test_a_model_gguf_is_not_an_adapter(tmp_path: Path) -> None:
    from tiny_gguf import write_tiny_llama_gguf

    path = write_tiny_llama_gguf(tmp_path / "m.gguf")
    with pytest.raises(BadInput, match="is not a LoRA adapter"):
        load_adapter("m", str(path))


def _slots(rank: int, loras: int, targets=("q_proj", "v_proj")) -> LoraSlots:
    from llmgw_core.model.adapters import AdapterShape

    one = AdapterShape("a", "/a", "peft", rank, 16.0, targets, "bfloat16", 1, 80, 8192)
    return LoraSlots(adapters=(one,), max_loras=loras, max_lora_rank=rank)


def test_vllm_slots_for_a_70b_at_tp4_follow_its_create_lora_weights() -> None:
    """docs/memory-rules.md's figure: Llama 70B, TP4, max_loras 4, rank 64, bf16."""
    shape = _shape(LLAMA_70B)
    bytes_ = card_bytes(
        "vllm", shape, _slots(64, 4), tensor_parallel=4, pipeline_parallel=1, serve_dtype="bfloat16"
    )
    # Per layer and rank, in + out of each module's share: q 8192+2048, k and v 8192+256,
    # o 2048+8192, gate and up 8192+7168, down 7168+8192 = 83,456.
    assert bytes_ == 83_456 * 64 * 4 * 2 * 80 == 3_418_357_760
    # vLLM makes room on every supported module whatever the adapters target; SGLang only on theirs.
    sglang = card_bytes(
        "sglang",
        shape,
        _slots(64, 4),
        tensor_parallel=4,
        pipeline_parallel=1,
        serve_dtype="bfloat16",
    )
    assert sglang == (10_240 + 8_448) * 64 * 4 * 2 * 80


def test_vllm_rounds_the_rank_up_to_a_choice_it_takes() -> None:
    assert [default_vllm_rank(r) for r in (1, 2, 8, 9, 64, 300, 512)] == [1, 8, 8, 16, 64, 320, 512]


def test_the_adapters_come_out_of_the_kv_cache_room() -> None:
    model = resolve_model(f"catalog:{LLAMA_70B}")
    artifact = model.artifacts[0]
    common = dict(context=8192, card_memory_gib=79.2)
    bare = card_need("vllm", artifact, model.any_shape, Layout(4), **common)
    slots = _slots(64, 4)
    loaded = card_need("vllm", artifact, model.any_shape, Layout(4), adapters=slots, **common)
    assert loaded.adapters_gib == pytest.approx(3_418_357_760 / 2**30)
    assert loaded.total_gib == pytest.approx(bare.total_gib + loaded.adapters_gib)
    assert loaded.max_concurrency < bare.max_concurrency


def test_slots_default_to_one_a_given_adapter_at_the_largest_rank(tmp_path: Path) -> None:
    a = load_adapter("a", str(write_peft_adapter(tmp_path / "a", W8B, rank=8)))
    b = load_adapter("b", str(write_peft_adapter(tmp_path / "b", W8B, rank=32)))
    slots = slots_for((a, b))
    assert (slots.max_loras, slots.max_lora_rank) == (2, 32)
    assert json.dumps(slots.as_dict())


def test_a_hub_adapter_is_read_by_ranges_without_its_weights(local_hub, tmp_path: Path) -> None:
    from hub_server import FakeRepo

    folder = write_peft_adapter(tmp_path / "sql", W8B, rank=16, base_model=LLAMA_8B)
    weights = folder / "adapter_model.safetensors"
    local_hub.repos["team/sql-lora"] = FakeRepo(
        files={
            "adapter_config.json": (folder / "adapter_config.json").read_bytes(),
            "adapter_model.safetensors": weights,
        }
    )
    adapter = load_adapter("sql", "team/sql-lora")
    assert (adapter.rank, adapter.base_model, adapter.source) == (16, LLAMA_8B, "team/sql-lora")
    fetched = local_hub.log.bytes_for("adapter_model.safetensors")
    assert fetched < 64 * 1024 < weights.stat().st_size  # the header, not the tensors


def test_a_gguf_adapter_on_the_hub_is_named_by_its_file(local_hub, tmp_path: Path) -> None:
    from hub_server import FakeRepo

    path = write_gguf_adapter(tmp_path / "tiny-lora.gguf", TINY_GGUF, rank=4)
    local_hub.repos["team/tiny-lora-GGUF"] = FakeRepo(files={"tiny-lora.gguf": path})
    adapter = load_adapter("tiny", "team/tiny-lora-GGUF", file="tiny-lora.gguf")
    assert (adapter.format, adapter.rank, adapter.architecture) == ("gguf", 4, "llama")


def test_a_hub_adapter_that_does_not_exist_is_one_sentence(local_hub) -> None:
    from llmgw_core.errors import LlmgwError

    with pytest.raises(LlmgwError) as caught:
        load_adapter("x", "team/no-such-lora")
    assert "\n" not in caught.value.sentence()
