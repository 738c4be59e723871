"""llama.cpp's sizes reproduced: quantisation recipes, padded cells, the iSWA cache, splits."""

from __future__ import annotations

import json

import pytest
from published_shapes import QWEN25_14B

from llmgw_core.memory import Layout, card_need
from llmgw_core.memory.llamacpp import (
    compute_bytes,
    device_weights,
    estimate,
    kv_cache,
    padded_cells,
    recipe_bytes,
    use_more_bits,
)
from llmgw_core.model.artifacts import Artifact
from llmgw_core.model.shape import shape_from_config

GIB = 2**30
MIB = 2**20


def test_a_qwen25_14b_q4_k_m_is_8_37_gib_as_llama_cpp_prints_it():
    shape = shape_from_config(QWEN25_14B)
    assert (
        round(recipe_bytes(shape, "Q4_K_M") / GIB, 2) == 8.37
    )  # gpustack#1681: 8.37 GiB (4.87 BPW)


def test_a_qwen25_14b_q8_0_is_14_62_gib():
    assert round(recipe_bytes(shape_from_config(QWEN25_14B), "Q8_0") / GIB, 2) == 14.62


def test_a_70b_llama_q4_0_is_37_22_gib(model_shape):
    shape = model_shape("meta-llama--Llama-3.1-70B-Instruct")
    assert round(recipe_bytes(shape, "Q4_0") / GIB, 2) == 37.22  # ollama#6279: 37.22 GiB, 70.55 B


def test_q4_k_m_gives_half_of_48_layers_more_bits():
    assert sum(use_more_bits(i, 48) for i in range(48)) == 24


def test_cells_are_padded_to_a_multiple_of_256():
    assert padded_cells(20000) == 20224
    assert padded_cells(8192) == 8192


def test_gpt_oss_120b_iswa_cache_matches_the_logged_mib(model_shape):
    shape = model_shape("openai--gpt-oss-120b")
    kv = kv_cache(shape, range(36), context=131072, sequences=2, n_ubatch=1024)
    # ollama#16480: non-SWA 9216.00 MiB (131072 cells, 18 layers, 2/2 seqs); SWA 1280 cells, 90.00 MiB
    assert (kv.cells, kv.swa_cells) == (131072, 1280)
    assert kv.full_bytes == 9216 * MIB
    assert kv.swa_bytes == 90 * MIB


def test_gpt_oss_compute_buffer_is_near_the_logged_796_mib(model_shape):
    shape = model_shape("openai--gpt-oss-120b")
    # a micro-batch's logits (201,088 wide) and the stream beside them; flash attention on
    got = compute_bytes(
        shape, n_kv=131072, n_kv_swa=1280, n_ubatch=1024, flash_attn=True, quantized_kv=False
    )
    assert got / MIB == pytest.approx(796, rel=0.02)


def test_a_layer_split_keeps_embeddings_on_the_host_and_the_head_on_the_last_card():
    shape = shape_from_config(QWEN25_14B)
    artifact = Artifact("Q8_0", "gguf", ("q8.gguf",), recipe_bytes(shape, "Q8_0"))
    placed = device_weights(artifact, shape, 2, cpu_only=False)
    assert placed.host_bytes > 0
    assert placed.device_bytes[1] > placed.device_bytes[0]
    assert sum(placed.device_bytes) + placed.host_bytes == pytest.approx(
        artifact.size_bytes, rel=0.001
    )


def test_on_a_cpu_node_everything_is_in_ram():
    shape = shape_from_config(QWEN25_14B)
    artifact = Artifact("Q4_K_M", "gguf", ("q4.gguf",), recipe_bytes(shape, "Q4_K_M"))
    cpu = estimate(artifact, shape, context=8192, cpu_only=True)
    assert cpu.weights_gib == pytest.approx(8.37, abs=0.01)
    assert cpu.host_gib == 0 and cpu.context_gib == 0
    # 48 layers × 8192 cells × 2 × 8 × 128 × 2 bytes = 1.5 GiB
    assert cpu.kv_cache_gib == pytest.approx(1.5)


def test_card_need_for_llama_cpp_counts_kv_for_every_sequence():
    shape = shape_from_config(QWEN25_14B)
    artifact = Artifact("Q4_K_M", "gguf", ("q4.gguf",), recipe_bytes(shape, "Q4_K_M"))
    one = card_need("llama.cpp", artifact, shape, Layout(), context=8192, card_memory_gib=23.58)
    four = card_need("llama.cpp", artifact, shape, Layout(), context=8192, concurrency=4,
                     card_memory_gib=23.58)  # fmt: skip
    assert four.context_gib == pytest.approx(4 * one.context_gib)
    assert one.fits and one.max_concurrency > 4
    assert one.context_gib_per_1k_tokens == pytest.approx(48 * 2 * 8 * 128 * 2 * 1000 / GIB)


def test_gguf_shape_drives_the_same_rules(models_dir):
    config = json.loads((models_dir / "Qwen--Qwen2.5-7B-Instruct" / "config.json").read_text())
    shape = shape_from_config(config)
    assert recipe_bytes(shape, "Q8_0") < recipe_bytes(shape, "F16")


def test_a_cpu_node_need_holds_the_whole_file_in_ram_without_a_cuda_context():
    shape = shape_from_config(QWEN25_14B)
    artifact = Artifact("Q4_K_M", "gguf", ("q4.gguf",), recipe_bytes(shape, "Q4_K_M"))
    gpu = card_need("llama.cpp", artifact, shape, Layout(), context=8192, card_memory_gib=23.58)
    cpu = card_need("llama.cpp", artifact, shape, Layout(), context=8192, card_memory_gib=512,
                    cpu_only=True)  # fmt: skip
    assert cpu.weights_gib == pytest.approx(artifact.size_gib, rel=0.001)
    assert gpu.weights_gib < cpu.weights_gib  # the GPU leaves the embeddings on the host
    assert cpu.engine_gib < gpu.engine_gib


def test_flash_attention_off_holds_every_head_s_scores_against_the_whole_context():
    from llmgw_core.memory.need import EngineOptions

    shape = shape_from_config(QWEN25_14B)
    artifact = Artifact("Q4_K_M", "gguf", ("q4.gguf",), recipe_bytes(shape, "Q4_K_M"))
    common = dict(context=32768, card_memory_gib=79.19)
    on = card_need("llama.cpp", artifact, shape, Layout(), **common)
    off = card_need(
        "llama.cpp",
        artifact,
        shape,
        Layout(),
        engine_options=EngineOptions(flash_attn=False),
        **common,
    )
    row = 512 * 4  # an fp32 column of a 512-token micro-batch
    # Without it: 32,768 cells × 40 heads of scores (2.5 GiB), the mask, the stream (5 H + 2 KV).
    assert off.engine_gib - 0.35 == pytest.approx(row * (32768 * 41 + 5 * 5120 + 2 * 1024) / GIB)
    # With it, the output's logits (152,064 wide) and the stream beside them are the most.
    assert on.engine_gib - 0.35 == pytest.approx(row * (152064 + 2 * 5120) / GIB)
    bigger = card_need(
        "llama.cpp",
        artifact,
        shape,
        Layout(),
        engine_options=EngineOptions(n_ubatch=1024),
        **common,
    )
    assert bigger.engine_gib == pytest.approx(2 * (on.engine_gib - 0.35) + 0.35, rel=0.01)


def _tiny_llama_artifact(folder, quant_name: str) -> Artifact:
    """A tiny llama GGUF of one tensor type, written and read as the planner reads a file."""
    import gguf
    from header_ggufs import write_tiny_llama

    from llmgw_core.model.assemble import enrich_gguf
    from llmgw_core.model.local import read_local_gguf

    path = write_tiny_llama(
        folder / f"{quant_name}.gguf", hidden=256, heads=4, kv_heads=2, ffn=512, vocab=512,
        quant=gguf.GGMLQuantizationType[quant_name],
    )  # fmt: skip
    bare = Artifact(quant_name, "gguf", (path.name,), path.stat().st_size)
    return enrich_gguf(bare, [read_local_gguf(path)])


def test_a_cpu_that_repacks_q4_k_holds_a_second_copy_of_those_matrices(tmp_path):
    from llmgw_core.memory.llamacpp import REPACK_TYPES

    artifact = _tiny_llama_artifact(tmp_path, "Q4_K")
    matrices = sum(
        t.n_bytes
        for t in artifact.gguf_tensors[0]
        if t.name.startswith("blk.") and len(t.dims) == 2
    )
    common = dict(context=1024, card_memory_gib=64, cpu_only=True)
    plain = card_need("llama.cpp", artifact, artifact.shape, Layout(), **common)
    repacked = card_need(
        "llama.cpp",
        artifact,
        artifact.shape,
        Layout(),
        repack_types=REPACK_TYPES["x86_64"],
        **common,
    )
    assert (repacked.weights_gib - plain.weights_gib) * GIB == pytest.approx(matrices, abs=1)


def test_an_amx_cpu_copies_f16_matrices_and_keeps_the_embeddings_mapped(tmp_path):
    """Measured on a Xeon with AMX (tests/e2e/test_llamacpp_truth.py): F16 matrices whose rows
    come in 32s go to the AMX buffer; an AVX2 CPU without AMX copies no F16 at all."""
    from llmgw_core.memory.llamacpp import REPACK_TYPES, model_buffers

    artifact = _tiny_llama_artifact(tmp_path, "F16")
    tensors = artifact.gguf_tensors[0]
    matrices = sum(t.n_bytes for t in tensors if len(t.dims) == 2 and t.name != "token_embd.weight")
    embeddings = next(t.n_bytes for t in tensors if t.name == "token_embd.weight")
    assert model_buffers(artifact, REPACK_TYPES["x86_64"])[1] == 0
    mapped, copied = model_buffers(artifact, REPACK_TYPES["amx"])
    assert copied == matrices  # output.weight included; the embeddings are read by rows
    assert mapped >= embeddings


def test_the_agent_names_the_cpu_features_that_decide_repacking():
    from llmgw_agent.discover.host import cpu_flags
    from llmgw_core.memory.llamacpp import repack_kind

    x86 = "processor\t: 0\nflags\t\t: fpu sse2 avx avx2 avx512f amx_tile amx_int8\n"
    arm = "processor\t: 0\nFeatures\t: fp asimd asimddp i8mm sve\n"
    assert cpu_flags(x86) == ["avx2", "avx512f", "amx_int8", "amx_tile"]
    assert cpu_flags(arm) == ["asimddp", "i8mm", "sve"]
    assert cpu_flags("") == []
    assert repack_kind("x86_64", ("avx2", "amx_int8")) == "amx"
    assert repack_kind("x86_64", ("avx2",)) == "x86_64"
    assert repack_kind("aarch64", ("asimddp",)) == "aarch64"
    assert repack_kind("x86_64", ()) == "none"
    assert repack_kind(None, None) == "none"
