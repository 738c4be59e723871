"""vLLM's CPU backend: a rank per NUMA node, the KV cache in whole GiB, the figures it logs."""

from __future__ import annotations

from llmgw_core.memory import Layout, card_need
from llmgw_core.memory.vllm_cpu import CPU_RUNTIME_GIB, kv_space_gib
from llmgw_core.model.artifacts import GIB, Artifact
from llmgw_core.model.shape import shape_from_config

TINY_LLAMA = {
    # What tests/support/tiny_hf_llama.py writes, as transformers 5 writes it ("dtype").
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "dtype": "bfloat16",
    "head_dim": 64,
    "hidden_size": 256,
    "intermediate_size": 512,
    "max_position_embeddings": 512,
    "num_attention_heads": 4,
    "num_hidden_layers": 4,
    "num_key_value_heads": 2,
    "tie_word_embeddings": True,
    "vocab_size": 383,
}


def _need(context: int, concurrency: int = 1, width: int = 1, memory: float = 23.54):
    shape = shape_from_config(TINY_LLAMA)
    artifact = Artifact(name="original", format="safetensors", size_bytes=4_923_376, files=())
    return card_need(
        "vllm",
        artifact,
        shape,
        Layout(width),
        context=context,
        concurrency=concurrency,
        card_memory_gib=memory,
        cpu_only=True,
    )


def test_the_kv_cache_is_whole_gib_rounded_up_as_vllm_reads_it_with_int():
    assert [kv_space_gib(n) for n in (1, GIB - 1, GIB, GIB + 1, 5 * GIB)] == [1, 1, 1, 2, 5]


def test_the_tiny_llama_in_one_gib_is_what_the_real_vllm_logged():
    # vLLM 0.32 on this machine: "Explicitly set (1.0/23.54) GiB for KV cache on node 0."
    # "CPU KV cache size: 524,288 tokens, Maximum concurrency for 512 tokens per request: 1024.00x"
    need = _need(context=512)
    assert need.context_gib == 1.0
    assert need.kv_tokens == 524_288
    assert need.max_concurrency == 1024.0
    assert need.weights_gib < 0.01 and need.engine_gib >= CPU_RUNTIME_GIB
    assert need.fits


def test_more_sequences_than_a_gib_holds_ask_for_another_gib():
    # A 512-token request is 4 pages of 128 tokens × 4 layers × 2 KV heads × 64 × K, V × 2 bytes.
    one_request = 4 * 128 * 4 * 2 * 64 * 2 * 2
    assert one_request * 1024 == GIB
    assert _need(context=512, concurrency=1024).context_gib == 1.0
    assert _need(context=512, concurrency=1025).context_gib == 2.0


def test_a_rank_is_sized_against_one_numa_nodes_ram():
    assert not _need(context=512, memory=2.0).fits
    assert _need(context=512, memory=4.0).fits
