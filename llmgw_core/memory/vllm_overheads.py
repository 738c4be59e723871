"""vLLM's memory outside weights and KV: activation peak, non-torch, CUDA context, graphs (pure).

Each term is modelled from what causes it and calibrated on the llm-d
planner's v0.19.0 sweep on H100-80GB (model-memory.md §2a, §3.3): the dummy
forward and the sampler warm-up of the profiling run, the NCCL and custom
all-reduce buffers that arrive with tensor parallel, the CUDA context made
before the budget snapshot, and the CUDA graph pool.
"""

from __future__ import annotations

import math

from llmgw_core.model.params import dtype_bytes
from llmgw_core.model.shape import ModelShape

NEWEST_KNOWN = (0, 19, 0)

# Bytes the sampler warm-up holds per logit of its `max_num_seqs` dummy rows:
# fp32 logits (4) plus the top-k/top-p sort's fp32 values (4) and int64 indices (8).
SAMPLER_BYTES_PER_LOGIT = 16
# Forward activations per batched token, in units of the served dtype, per hidden
# unit (residual, norms, attention output, temporaries): measured 1.05–1.10 GiB
# for Llama-3.1-8B first pipeline stages at 8192 tokens.
FORWARD_HIDDEN_COPIES = 6
# Non-torch memory inside the budget (cuBLAS workspaces, NCCL / custom all-reduce buffers).
NON_TORCH_SINGLE_GIB = 0.25
NON_TORCH_PIPELINE_ONLY_GIB = 0.07
NON_TORCH_TP_BASE_GIB = 2.0
NON_TORCH_TP_PER_RANK_GIB = 0.0325
# CUDA context (+ NCCL communicators) made before the budget snapshot.
INIT_SINGLE_GIB = 0.51
INIT_PARALLEL_GIB = 1.5
# CUDA graphs: a fixed pool plus per-layer buffers for the largest captured batch.
CUDA_GRAPH_BASE_GIB = 0.39
CUDA_GRAPH_PER_LAYER_GIB = 0.0163
CUDA_GRAPH_MOE_GIB = 0.25


def activation_bytes(
    shape: ModelShape,
    *,
    tensor_parallel: int,
    max_num_batched_tokens: int,
    max_num_seqs: int,
    serve_dtype: str,
    last_stage: bool,
    version: tuple[int, int, int] = NEWEST_KNOWN,
) -> int:
    """Torch peak increase of the profiling run on one card.

    The dense forward of `max_num_batched_tokens` tokens (hidden-sized copies,
    the QKV output and the widest MLP's gate/up/activation, per tensor rank)
    and the sampler warm-up (`max_num_seqs` rows of fp32 logits over the whole
    vocabulary, plus the sort buffers) run one after the other, so the peak
    is the larger of the two. Only the last pipeline stage samples. A MoE's
    fused-kernel workspace (tokens × top-k × (gate/up/down widths + hidden)) is
    kept across calls and adds on top; MXFP4 experts run through other kernels
    that keep none (gpt-oss: 2.87 GiB measured, the sampler alone). vLLM before 0.17 profiled roughly 2.5×
    larger forward activations (Qwen3-14B: 5.64 GiB in 0.15/0.16 vs 2.23 in 0.17).
    """
    tokens = max_num_batched_tokens
    width = dtype_bytes(serve_dtype)
    qkv = (shape.num_attention_heads + 2 * shape.num_kv_heads) * shape.head_dim // tensor_parallel
    mlp = 0
    if any(not shape.layer_is_moe(i) for i in range(shape.num_layers)):
        mlp = 3 * (shape.dense_intermediate_size or shape.intermediate_size) // tensor_parallel
    forward = tokens * width * (FORWARD_HIDDEN_COPIES * shape.hidden_size + qkv + mlp)
    if version < (0, 17, 0):
        forward = int(forward * 2.5)
    sampler = max_num_seqs * shape.vocab_size * SAMPLER_BYTES_PER_LOGIT if last_stage else 0
    moe = 0
    if shape.is_moe and expert_width_multiple(shape) == 1:
        top_k = shape.experts_per_token or 1
        expert_width = (shape.moe_intermediate_size or 0) // tensor_parallel
        moe = tokens * top_k * (3 * expert_width + shape.hidden_size) * width
    return max(forward, sampler) + moe


def expert_width_multiple(shape: ModelShape) -> int:
    """vLLM's MXFP4 MoE kernels (Triton / Marlin on Hopper) pad each expert's width to 256.

    gpt-oss's 2880-wide experts become 3072 wide: 6.7 % more expert bytes than
    the checkpoint, which is why gpt-oss-120b loads 64.4 GiB in vLLM (v0.14.1)
    from a 60.8 GiB checkpoint.
    """
    quant = shape.quantization
    return 256 if quant is not None and quant.method == "mxfp4" else 1


def non_torch_gib(tensor_parallel: int, pipeline_parallel: int) -> float:
    """Non-torch memory inside the budget: ≈0.25 GiB alone, ≈2.1 GiB with tensor parallel.

    Custom all-reduce and NCCL buffers arrive with tensor parallel (v0.19 on
    H100: 2.07 GiB at TP2, 2.13 at TP4); pipeline-only layouts add next to nothing (0.07).
    """
    if tensor_parallel > 1:
        return NON_TORCH_TP_BASE_GIB + NON_TORCH_TP_PER_RANK_GIB * tensor_parallel
    if pipeline_parallel > 1:
        return NON_TORCH_PIPELINE_ONLY_GIB
    return NON_TORCH_SINGLE_GIB


def init_gib(tensor_parallel: int, pipeline_parallel: int) -> float:
    """CUDA context (and NCCL communicators) made before the budget snapshot: outside it."""
    return INIT_SINGLE_GIB if tensor_parallel * pipeline_parallel == 1 else INIT_PARALLEL_GIB


def cuda_graph_gib(shape: ModelShape, layers_in_stage: int, tensor_parallel: int) -> float:
    """CUDA graph pool for the default capture sizes (up to 512): 0.5–1.9 GiB on H100.

    Grows with the stage's layers (piecewise graphs keep each piece's
    outputs) and shrinks with tensor parallel; MoE kernels add a little.
    A rough figure (±0.5 GiB): vLLM itself only estimates it.
    """
    graphs = CUDA_GRAPH_BASE_GIB + CUDA_GRAPH_PER_LAYER_GIB * layers_in_stage / math.sqrt(
        tensor_parallel
    )
    if shape.is_moe:
        graphs += CUDA_GRAPH_MOE_GIB
    return graphs
