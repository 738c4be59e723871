"""Tiny GGUF files of many shapes written with the `gguf` package, for header and range-read tests.

(The one llama.cpp really loads and answers with is `tests/support/tiny_gguf.py`.)
"""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np


def write_tiny_llama(
    path: Path,
    *,
    layers: int = 2,
    hidden: int = 64,
    heads: int = 4,
    kv_heads: int = 2,
    ffn: int = 128,
    vocab: int = 6000,
    context: int = 4096,
    quant: gguf.GGMLQuantizationType = gguf.GGMLQuantizationType.Q8_0,
    sliding_window: int | None = None,
) -> Path:
    """Write a llama-architecture GGUF with a real tokenizer-sized vocabulary and tensors."""
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(layers)
    writer.add_embedding_length(hidden)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_context_length(context)
    writer.add_feed_forward_length(ffn)
    writer.add_rope_dimension_count(hidden // heads)
    writer.add_file_type(
        gguf.LlamaFileType.MOSTLY_Q8_0
        if quant == gguf.GGMLQuantizationType.Q8_0
        else gguf.LlamaFileType.MOSTLY_F16
    )
    if sliding_window:
        writer.add_sliding_window(sliding_window)
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list([f"tok{i}" for i in range(vocab)])
    writer.add_token_scores([0.0] * vocab)
    writer.add_token_types([1] * vocab)
    rng = np.random.default_rng(0)

    def add(name: str, rows: int, cols: int) -> None:
        if quant == gguf.GGMLQuantizationType.F16:
            writer.add_tensor(name, np.zeros((rows, cols), dtype=np.float16))
            return
        # Only the header matters to the tests: random bytes of the quantised size.
        block, type_size = gguf.GGML_QUANT_SIZES[quant]
        packed = rng.integers(0, 255, (rows, cols // block * type_size), dtype=np.uint8)
        writer.add_tensor(name, packed, raw_dtype=quant)

    head_dim = hidden // heads
    add("token_embd.weight", vocab, hidden)
    for i in range(layers):
        writer.add_tensor(f"blk.{i}.attn_norm.weight", np.ones(hidden, dtype=np.float32))
        add(f"blk.{i}.attn_q.weight", hidden, hidden)
        add(f"blk.{i}.attn_k.weight", kv_heads * head_dim, hidden)
        add(f"blk.{i}.attn_v.weight", kv_heads * head_dim, hidden)
        add(f"blk.{i}.attn_output.weight", hidden, hidden)
        writer.add_tensor(f"blk.{i}.ffn_norm.weight", np.ones(hidden, dtype=np.float32))
        add(f"blk.{i}.ffn_gate.weight", ffn, hidden)
        add(f"blk.{i}.ffn_up.weight", ffn, hidden)
        add(f"blk.{i}.ffn_down.weight", hidden, ffn)
    writer.add_tensor("output_norm.weight", np.ones(hidden, dtype=np.float32))
    add("output.weight", vocab, hidden)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
