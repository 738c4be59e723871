"""vLLM V1's KV-cache arithmetic: pages, groups, blocks and concurrency (pure).

Each rule mirrors one piece of vLLM V1 (`vllm/v1/kv_cache_interface.py`,
`vllm/v1/core/kv_cache_utils.py`), restated in our words:

* A page holds `block_size` (16) tokens of one layer. For ordinary attention a
  page is `2 (K and V) × block × kv_heads_per_rank × head_size × dtype bytes`,
  with `kv_heads_per_rank = max(1, kv_heads // tensor_parallel)` — past the
  KV heads every rank keeps a copy of one head, so the cache per card stops
  shrinking. For MLA a page is `block × 1 × (kv_lora_rank + qk_rope_head_dim)
  × dtype bytes`: one latent, no K/V pair, the same on every tensor rank.
* A full-attention layer needs `cdiv(max_model_len, 16)` pages per request; a
  sliding-window layer `cdiv(min(window − 1 + max_num_batched_tokens,
  max_model_len), 16) + 1`; a chunked-local layer (Llama 4)
  `cdiv(min(chunk + max_num_batched_tokens, max_model_len), 16)`.
* Models mixing layer kinds use the hybrid allocator: layers of each kind are
  cut into groups of `group_size` layers (the smallest kind's count, or the
  largest's when it is under 1.5× the smallest; short groups are padded).
  All groups draw from one pool of `available // (page × group_size)` blocks.
  The "GPU KV cache size" line (v0.19) prints `blocks // groups × 16` tokens,
  which for hybrid models is not available ÷ bytes-per-token.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmgw_core.model.shape import CHUNKED, FULL, SLIDING, ModelShape

BLOCK_SIZE = 16
CPU_BLOCK_SIZE = 128
"""vLLM's CPU backend pages 128 tokens unless told otherwise (`vllm/platforms/cpu.py`)."""

_KV_DTYPE_BYTES = {
    "fp8": 1,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "fp8_inc": 1,
    "bfloat16": 2,
    "float16": 2,
    "half": 2,
    "bf16": 2,
    "float32": 4,
    "float": 4,
}
FP8_DS_MLA_BYTES_PER_TOKEN = 656  # DeepSeek's FP8 MLA cache: 512 fp8 + 4 scales + 64 bf16 rope


def cdiv(a: int, b: int) -> int:
    """Ceiling division."""
    return -(-a // b)


def kv_dtype_bytes(kv_cache_dtype: str | None, serve_dtype: str) -> int:
    """Bytes per cached value: the served dtype for "auto", else the format asked for."""
    if not kv_cache_dtype or kv_cache_dtype == "auto":
        return _KV_DTYPE_BYTES.get(serve_dtype, 2)
    return _KV_DTYPE_BYTES.get(kv_cache_dtype, 2)


def kv_heads_per_rank(shape: ModelShape, tensor_parallel: int) -> int:
    """KV heads one tensor rank caches: 1 latent for MLA, else max(1, kv_heads // width)."""
    if shape.mla:
        return 1
    return max(1, shape.num_kv_heads // tensor_parallel)


def kv_token_bytes(shape: ModelShape, dtype_bytes: float, tensor_parallel: int = 1) -> float:
    """The KV rule: bytes one token caches in one layer on one rank, for every engine.

    A key and a value per KV head the rank holds; an MLA model caches its one
    latent instead. `dtype_bytes` is the cache's element size (fractional for
    llama.cpp's block-quantised caches).
    """
    if shape.mla:
        return shape.mla.latent_width * dtype_bytes
    return 2 * kv_heads_per_rank(shape, tensor_parallel) * shape.head_dim * dtype_bytes


def page_bytes(
    shape: ModelShape,
    tensor_parallel: int,
    kv_cache_dtype: str | None,
    serve_dtype: str,
    block_size: int = BLOCK_SIZE,
) -> int:
    """Bytes of one page (`block_size` tokens) of one layer on one card."""
    if shape.mla and kv_cache_dtype == "fp8_ds_mla":
        return block_size * FP8_DS_MLA_BYTES_PER_TOKEN
    width = kv_dtype_bytes(kv_cache_dtype, serve_dtype)
    return int(block_size * kv_token_bytes(shape, width, tensor_parallel))


def pages_per_request(
    kind: str,
    *,
    max_model_len: int,
    max_num_batched_tokens: int,
    sliding_window: int | None,
    attention_chunk_size: int | None,
    block_size: int = BLOCK_SIZE,
) -> int:
    """Pages one layer of `kind` needs for one request of `max_model_len` tokens."""
    if kind == SLIDING and sliding_window:
        tokens = min(sliding_window - 1 + max_num_batched_tokens, max_model_len)
        return cdiv(tokens, block_size) + 1
    if kind == CHUNKED and attention_chunk_size:
        tokens = min(attention_chunk_size + max_num_batched_tokens, max_model_len)
        return cdiv(tokens, block_size)
    return cdiv(max_model_len, block_size)


@dataclass(frozen=True)
class KvGroups:
    """How a stage's layers share the KV pool.

    Attributes:
        group_size: layers per group (tensors of `page × blocks` each).
        groups: the kind of each group, in order.
        padding_layers: empty layers added to fill the last group of a kind.
    """

    group_size: int
    groups: tuple[str, ...]
    padding_layers: int

    @property
    def hybrid(self) -> bool:
        """True when more than one layer kind shares the pool."""
        return len(set(self.groups)) > 1


def kv_groups(layer_kinds: list[str]) -> KvGroups:
    """Group a stage's layers the way vLLM's hybrid allocator does.

    One kind: a single group of every layer. Several kinds: `group_size` is the
    smallest kind's count — or the largest's when that is under 1.5× the
    smallest, to save groups — and each kind is cut into `cdiv(count, group_size)` groups.
    """
    counts: dict[str, int] = {}
    for kind in layer_kinds:
        counts[kind] = counts.get(kind, 0) + 1
    if len(counts) <= 1:
        only = next(iter(counts), FULL)
        return KvGroups(group_size=len(layer_kinds), groups=(only,), padding_layers=0)
    smallest, largest = min(counts.values()), max(counts.values())
    group_size = largest if largest < 1.5 * smallest else smallest
    groups: list[str] = []
    padding = 0
    for kind in (FULL, SLIDING, CHUNKED):
        if kind in counts:
            n = cdiv(counts[kind], group_size)
            groups.extend([kind] * n)
            padding += n * group_size - counts[kind]
    return KvGroups(group_size=group_size, groups=tuple(groups), padding_layers=padding)


@dataclass(frozen=True)
class KvPool:
    """One stage's KV pool.

    Attributes:
        page_bytes: one page of one layer.
        groups: the grouping of the stage's layers.
        num_blocks: blocks in the pool (each block = a page in every group tensor).
        pages_per_request: pages one request of max_model_len takes, all groups summed.
        bytes_per_request: what one request of max_model_len needs.
    """

    page_bytes: int
    groups: KvGroups
    num_blocks: int
    pages_per_request: int
    bytes_per_request: int
    block_size: int = BLOCK_SIZE

    @property
    def reported_tokens(self) -> int:
        """vLLM's "GPU KV cache size" (or "CPU …") figure: blocks per group × the block's tokens."""
        return self.num_blocks // len(self.groups.groups) * self.block_size

    @property
    def max_concurrency(self) -> float:
        """Requests of max_model_len the pool holds at once."""
        return self.num_blocks / self.pages_per_request if self.pages_per_request else 0.0


def kv_pool(
    shape: ModelShape,
    layers: range,
    *,
    available_bytes: int,
    tensor_parallel: int,
    max_model_len: int,
    max_num_batched_tokens: int,
    kv_cache_dtype: str | None,
    serve_dtype: str,
    hybrid_manager: bool = True,
    block_size: int = BLOCK_SIZE,
) -> KvPool:
    """The KV pool of one stage holding `layers`, given the bytes left for it."""
    kinds = [shape.layer_attention[i] for i in layers]
    if not hybrid_manager:
        kinds = [FULL] * len(kinds)
    groups = kv_groups(kinds)
    page = page_bytes(shape, tensor_parallel, kv_cache_dtype, serve_dtype, block_size)
    per_block = page * groups.group_size
    num_blocks = max(0, available_bytes // per_block) if per_block else 0
    pages = sum(
        pages_per_request(
            kind,
            max_model_len=max_model_len,
            max_num_batched_tokens=max_num_batched_tokens,
            sliding_window=shape.sliding_window,
            attention_chunk_size=shape.attention_chunk_size,
            block_size=block_size,
        )
        for kind in groups.groups
    )
    return KvPool(
        page_bytes=page,
        groups=groups,
        num_blocks=int(num_blocks),
        pages_per_request=pages,
        bytes_per_request=pages * per_block,
        block_size=block_size,
    )


def kv_bytes_for(
    shape: ModelShape,
    layers: range,
    *,
    tokens: int,
    sequences: int,
    tensor_parallel: int,
    max_num_batched_tokens: int,
    kv_cache_dtype: str | None,
    serve_dtype: str,
    hybrid_manager: bool = True,
    block_size: int = BLOCK_SIZE,
) -> int:
    """KV bytes one card needs for `sequences` requests of `tokens` each, by the block rules."""
    pool = kv_pool(
        shape,
        layers,
        available_bytes=0,
        tensor_parallel=tensor_parallel,
        max_model_len=tokens,
        max_num_batched_tokens=max_num_batched_tokens,
        kv_cache_dtype=kv_cache_dtype,
        serve_dtype=serve_dtype,
        hybrid_manager=hybrid_manager,
        block_size=block_size,
    )
    return pool.bytes_per_request * sequences


def estimated_max_model_len(
    shape: ModelShape,
    layers: range,
    *,
    available_bytes: int,
    tensor_parallel: int,
    max_num_batched_tokens: int,
    kv_cache_dtype: str | None,
    serve_dtype: str,
    upper: int,
) -> int:
    """The longest max_model_len whose one request fits `available_bytes` (vLLM's binary search)."""
    low, high = 0, upper
    while low < high:
        middle = (low + high + 1) // 2
        need = kv_bytes_for(
            shape,
            layers,
            tokens=middle,
            sequences=1,
            tensor_parallel=tensor_parallel,
            max_num_batched_tokens=max_num_batched_tokens,
            kv_cache_dtype=kv_cache_dtype,
            serve_dtype=serve_dtype,
        )
        if need <= available_bytes:
            low = middle
        else:
            high = middle - 1
    return low
