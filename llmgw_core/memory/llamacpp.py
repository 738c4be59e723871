"""llama.cpp's memory for a GGUF model, per device (pure).

* Weights: each device holds the GGUF tensor bytes of the layers it is given
  (layer split, `--split-mode layer`, even across equal cards); the last
  device also holds the output head. The token embeddings stay in host
  memory ("input embeddings are always on the CPU"). On a CPU node
  everything is in RAM.
* KV cache: `layers × cells × (n_embd_k_gqa + n_embd_v_gqa) × type bytes`,
  with cells = the context padded up to a multiple of 256 (20,000 → 20,224
  in a logged run). With several sequences and a split (non-unified) cache,
  each stream holds its own cells. Sliding-window layers get the iSWA cache:
  `pad256(min(cells, window + n_ubatch))` cells per stream (gpt-oss: 128 +
  1024 → 1,280), of the KV type (builds with PR 21277 keep it F16).
  MLA models (deepseek2) cache only the 576-wide latent in the newest builds.
* Compute buffer: one per device, about `n_ubatch × 4 bytes × (2 × hidden +
  the vocabulary on the device holding the head, the FFN width elsewhere)` —
  a micro-batch's fp32 logits dominate (gpt-oss-120b, n_ubatch 1024: 796 MiB logged).
* Quantisation recipes (`llama_tensor_get_type`): for a shape without a file,
  `recipe_bytes` predicts the tensor bytes of Q8_0, Q4_K_M and kin, e.g.
  8.37 GiB for a Qwen2.5-14B Q4_K_M and 14.62 GiB for its Q8_0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from llmgw_core.errors import BadInput
from llmgw_core.memory.kv_vllm import kv_token_bytes
from llmgw_core.memory.need import ENGINE_DEFAULTS, CardNeed, EngineOptions, NeedQuery
from llmgw_core.model.artifacts import GIB, Artifact
from llmgw_core.model.params import count_parameters
from llmgw_core.model.shape import SLIDING, ModelShape

CELL_PADDING = 256
DEFAULT_UBATCH = 512
CUDA_CONTEXT_GIB = 0.35  # per GPU device; not a figure llama.cpp prints (CUDA/ROCm runtime)

# Bytes per weight of ggml types (block bytes / block size, from ggml's type traits).
TYPE_BYTES = {
    "F32": 4.0,
    "F16": 2.0,
    "BF16": 2.0,
    "Q8_0": 34 / 32,
    "Q6_K": 210 / 256,
    "Q5_K": 176 / 256,
    "Q5_0": 22 / 32,
    "Q4_K": 144 / 256,
    "Q4_0": 18 / 32,
    "Q3_K": 110 / 256,
    "Q2_K": 84 / 256,
    "IQ4_XS": 136 / 256,
    "IQ4_NL": 18 / 32,
    "Q5_1": 24 / 32,
    "MXFP4": 17 / 32,
}

_ROW_FALLBACK = {
    "Q2_K": "IQ4_NL",
    "Q3_K": "IQ4_NL",
    "IQ4_XS": "IQ4_NL",
    "Q4_K": "Q5_0",
    "Q5_K": "Q5_1",
    "Q6_K": "Q8_0",
}
"""The type llama.cpp's quantiser falls back to when a row is not a whole number of 256-blocks."""


def _fitted(kind: str, columns: int) -> float:
    """Bytes per weight of `kind` for rows of `columns`, after the quantiser's fallback."""
    if kind in _ROW_FALLBACK and columns % 256:
        kind = _ROW_FALLBACK[kind]
    return TYPE_BYTES[kind]


KV_TYPE_BYTES = {
    "f32": 4.0,
    "f16": 2.0,
    "bf16": 2.0,
    "q8_0": 34 / 32,
    "q5_0": 22 / 32,
    "q4_0": 18 / 32,
}

# Base type of each file type, and the type of the output head.
_RECIPES = {
    "F16": ("F16", "F16"),
    "BF16": ("BF16", "BF16"),
    "Q8_0": ("Q8_0", "Q8_0"),
    "Q6_K": ("Q6_K", "Q6_K"),
    "Q5_K_M": ("Q5_K", "Q6_K"),
    "Q5_K_S": ("Q5_K", "Q6_K"),
    "Q4_K_M": ("Q4_K", "Q6_K"),
    "Q4_K_S": ("Q4_K", "Q6_K"),
    "Q4_0": ("Q4_0", "Q6_K"),
    "Q3_K_M": ("Q3_K", "Q6_K"),
    "Q2_K": ("Q2_K", "Q6_K"),
    "IQ4_XS": ("IQ4_XS", "Q6_K"),
}


def use_more_bits(index: int, count: int) -> bool:
    """llama.cpp's choice of layers that get more bits in *_K_M recipes.

    The first and last eighth of the layers, and every third in between.
    """
    return index < count // 8 or index >= 7 * count // 8 or (index - count // 8) % 3 == 2


def recipe_bytes(shape: ModelShape, file_type: str) -> int:
    """Tensor bytes of a GGUF quantised with `file_type` by llama.cpp's recipe.

    Q4_K_M / Q5_K_M give attn_v and ffn_down Q6_K on the `use_more_bits`
    layers; 80-layer (70B) models move attn_v up to Q5_K; 8-expert models keep
    attn_v in Q8_0 and attn_output in Q5_K; the head is Q6_K unless the file
    is Q8_0 or 16-bit; norms and biases stay F32.

    Raises:
        BadInput: for a file type without a known recipe.
    """
    name = file_type.upper()
    if name not in _RECIPES:
        raise BadInput(
            f"no llama.cpp recipe known for {file_type}", f"known: {', '.join(_RECIPES)}"
        )
    base, head = _RECIPES[name]
    medium = name in ("Q4_K_M", "Q5_K_M")
    params = count_parameters(shape)
    hidden = shape.hidden_size
    q_width = shape.num_attention_heads * shape.head_dim
    kv_width = shape.num_kv_heads * shape.head_dim
    # A tied head is the token embeddings: the quantiser gives them the head's type.
    embedding_type = head if shape.tie_word_embeddings else base
    total = params.embedding * _fitted(embedding_type, hidden) + params.output * _fitted(
        head, hidden
    )
    total += params.final_norm * 4
    n = shape.num_layers
    eight_experts = shape.num_experts == 8
    for i, layer in enumerate(params.layers):
        v_type = base
        down_type = base
        if medium and use_more_bits(i, n):
            v_type = down_type = "Q6_K"
        elif name == "Q4_K_S" and i < n // 8:
            down_type = "Q5_K"
        if n == 80 and v_type in ("Q4_K", "Q3_K"):
            v_type = "Q5_K"
        if eight_experts and base not in ("F16", "BF16", "Q8_0"):
            v_type = "Q8_0"
        out_type = "Q5_K" if eight_experts and base in ("Q4_K", "Q3_K", "Q2_K") else base
        if shape.mla:
            attention = layer.attention * TYPE_BYTES[base]
        else:
            attention = (
                hidden * q_width * _fitted(base, hidden)
                + hidden * kv_width * _fitted(base, hidden)
                + hidden * kv_width * _fitted(v_type, hidden)
                + q_width * hidden * _fitted(out_type, q_width)
            )
        mlp = layer.dense_mlp + layer.routed_experts + layer.shared_experts
        width = shape.moe_intermediate_size if shape.is_moe else shape.intermediate_size
        total += attention + mlp / 3 * (
            2 * _fitted(base, hidden) + _fitted(down_type, width or hidden)
        )
        total += layer.small * 4
    return int(total)


def padded_cells(tokens: int) -> int:
    """KV cells for `tokens`: padded up to a multiple of 256."""
    return -(-tokens // CELL_PADDING) * CELL_PADDING


@dataclass(frozen=True)
class LlamaCppKv:
    """A llama.cpp KV cache on one device: full and sliding parts, in bytes."""

    cells: int
    swa_cells: int
    full_bytes: int
    swa_bytes: int

    @property
    def total_bytes(self) -> int:
        """Both caches."""
        return self.full_bytes + self.swa_bytes


def kv_cache(
    shape: ModelShape,
    layers: range,
    *,
    context: int,
    sequences: int = 1,
    kv_type: str = "f16",
    n_ubatch: int = DEFAULT_UBATCH,
    unified: bool = False,
    swa_f16: bool = False,
) -> LlamaCppKv:
    """The KV cache of `layers` for `sequences` streams of `context` tokens each."""
    kv_bytes = KV_TYPE_BYTES.get(kv_type.lower())
    if kv_bytes is None:
        raise BadInput(
            f"cache type {kv_type!r} is not one llama.cpp offers", f"use {', '.join(KV_TYPE_BYTES)}"
        )
    per_cell_layer = kv_token_bytes(shape, kv_bytes)
    streams = 1 if unified else sequences
    cells = padded_cells(context * sequences if unified else context)
    full_layers = sum(1 for i in layers if shape.layer_attention[i] != SLIDING)
    swa_layers = len(layers) - full_layers
    swa_cells = 0
    swa_bytes = 0
    if swa_layers and shape.sliding_window:
        window_tokens = shape.sliding_window * (sequences if unified else 1) + n_ubatch
        swa_cells = padded_cells(min(cells, window_tokens))
        # The window's cache takes the KV type (measured: llama.cpp in llama-cpp-python
        # 0.3.36); builds with llama.cpp PR 21277 keep it F16 (`swa_f16`).
        swa_per_cell = kv_token_bytes(shape, 2.0 if swa_f16 else kv_bytes)
        swa_bytes = int(swa_layers * swa_cells * swa_per_cell * streams)
    elif swa_layers:
        full_layers += swa_layers
    full = int(full_layers * cells * per_cell_layer * streams)
    return LlamaCppKv(cells=cells, swa_cells=swa_cells, full_bytes=full, swa_bytes=swa_bytes)


@dataclass(frozen=True)
class DeviceWeights:
    """Weights on one device and in host memory, in bytes."""

    device_bytes: list[int]
    host_bytes: int


def device_weights(
    artifact: Artifact, shape: ModelShape, devices: int, *, cpu_only: bool
) -> DeviceWeights:
    """GGUF tensor bytes per device for an even layer split.

    Uses the header's per-layer bytes when read; else the file size divided by
    the parameter count of each part.
    """
    if artifact.tensor_bytes_by_layer and len(artifact.tensor_bytes_by_layer) == shape.num_layers:
        by_layer = list(artifact.tensor_bytes_by_layer)
        embedding = artifact.embedding_bytes or 0
        output = artifact.output_bytes or 0
    else:
        params = count_parameters(shape)
        per_param = artifact.size_bytes / max(1, params.main)
        by_layer = [int(layer.total * per_param) for layer in params.layers]
        embedding = int(params.embedding * per_param)
        output = int((params.output + params.final_norm) * per_param)
        if shape.tie_word_embeddings:
            output += embedding  # a tied head is read from the embedding on the head's device
    if cpu_only:
        return DeviceWeights([sum(by_layer) + embedding + output], 0)
    base, extra = divmod(shape.num_layers, devices)
    result, start = [], 0
    for index in range(devices):
        count = base + (1 if index < extra else 0)
        result.append(sum(by_layer[start : start + count]))
        start += count
    result[-1] += output
    return DeviceWeights(result, embedding)


@dataclass(frozen=True)
class LlamaCppEstimate:
    """llama.cpp on each device (the worst device's figures first), GiB."""

    weights_gib: float
    kv_cache_gib: float
    compute_gib: float
    context_gib: float
    host_gib: float
    kv_cells: int
    swa_cells: int
    devices_gib: tuple[float, ...]
    repack_gib: float = 0.0
    """A CPU node's repacked copy of some matrices (beside the mapped file)."""
    output_gib: float = 0.0
    """The logits buffer in host memory: one row of the vocabulary a sequence."""


def estimate(
    artifact: Artifact,
    shape: ModelShape,
    *,
    devices: int = 1,
    context: int,
    sequences: int = 1,
    kv_type: str = "f16",
    options: EngineOptions = ENGINE_DEFAULTS,
    cpu_only: bool = False,
    repack_types: frozenset[str] = frozenset(),
    swa_full: bool = False,
) -> LlamaCppEstimate:
    """What llama.cpp puts on each device for a layer split over `devices`.

    Raises:
        BadInput: a quantised KV cache without flash attention (llama.cpp refuses it).
    """
    _check_kv(kv_type, options.flash_attn)
    repack = 0
    if cpu_only and artifact.gguf_tensors:
        # The mapped span llama.cpp logs, and beside it the repacked copy (counted both: the
        # span's pages of repacked matrices are read once, then left to the page cache).
        mapped, repack = model_buffers(artifact, repack_types)
        placed = DeviceWeights([mapped], 0)
    else:
        placed = device_weights(artifact, shape, devices, cpu_only=cpu_only)
    count_devices = 1 if cpu_only else devices
    base, extra = divmod(shape.num_layers, count_devices)
    cached = _without_window(shape) if swa_full else shape
    totals, start = [], 0
    worst = None
    for index in range(count_devices):
        count = base + (1 if index < extra else 0)
        layers = range(start, start + count)
        start += count
        kv = kv_cache(
            cached,
            layers,
            context=context,
            sequences=sequences,
            kv_type=kv_type,
            n_ubatch=options.n_ubatch,
        )
        compute = compute_bytes(
            shape,
            n_kv=kv.cells,
            n_kv_swa=kv.swa_cells or kv.cells,
            n_ubatch=options.n_ubatch,
            flash_attn=options.flash_attn,
            quantized_kv=quantised_kv(kv_type),
            holds_head=index == count_devices - 1,
            n_outputs=options.n_outputs,
        )
        context_gib = 0.0 if cpu_only else CUDA_CONTEXT_GIB
        total = (placed.device_bytes[index] + repack + kv.total_bytes + compute) / GIB
        total += context_gib
        totals.append(total)
        if worst is None or total > worst[0]:
            worst = (total, placed.device_bytes[index], kv, compute, context_gib)
    assert worst is not None
    _, weights, kv, compute, context_gib = worst
    return LlamaCppEstimate(
        weights_gib=weights / GIB,
        kv_cache_gib=kv.total_bytes / GIB,
        compute_gib=compute / GIB,
        context_gib=context_gib,
        host_gib=placed.host_bytes / GIB,
        kv_cells=kv.cells,
        swa_cells=kv.swa_cells,
        devices_gib=tuple(totals),
        repack_gib=repack / GIB,
        output_gib=shape.vocab_size * 4 * sequences / GIB,
    )


def card_need(query: NeedQuery) -> CardNeed:
    """The worst device's need under llama.cpp (a layer split over `pipeline_parallel` devices).

    `tensor_parallel` > 1 is treated as more devices of the same split:
    llama.cpp's row split is not planned. `cpu_only` plans a CPU node: one
    device, its RAM, the embeddings and any repacked copy included, no CUDA
    context.
    """
    artifact, shape, layout = query.artifact, query.shape, query.layout
    context, concurrency, usable_gib = query.context, query.concurrency, query.usable_gib
    kv_cache_dtype, cpu_only = query.kv_cache_dtype, query.cpu_only
    devices = 1 if cpu_only else layout.tensor_parallel * layout.pipeline_parallel
    kv_type = kv_cache_dtype if kv_cache_dtype and kv_cache_dtype != "auto" else "f16"
    common: dict[str, Any] = dict(
        devices=devices,
        context=context,
        kv_type=kv_type,
        cpu_only=cpu_only,
        options=query.engine_options,
        repack_types=query.repack_types,
    )
    result = estimate(artifact, shape, sequences=concurrency, **common)
    one = estimate(artifact, shape, sequences=1, **common)
    engine = result.compute_gib + result.context_gib + (result.output_gib if cpu_only else 0)
    weights = result.weights_gib + result.repack_gib
    per_token = kv_cache(shape, range(shape.num_layers), context=CELL_PADDING * 4, kv_type=kv_type)
    per_1k = per_token.full_bytes / (CELL_PADDING * 4) * 1000 / GIB / devices
    left = usable_gib - weights - engine
    return CardNeed(
        weights_gib=weights,
        context_gib=result.kv_cache_gib,
        engine_gib=engine,
        context_gib_per_1k_tokens=per_1k,
        max_concurrency=left / one.kv_cache_gib if left > 0 and one.kv_cache_gib else None,
        usable_gib=usable_gib,
    )


REPACK_TYPES = {
    "none": frozenset(),
    "x86_64": frozenset({"Q4_0", "Q4_K", "IQ4_NL"}),
    "amx": frozenset({"Q4_0", "Q4_1", "Q8_0", "Q4_K", "Q5_K", "Q6_K", "IQ4_XS", "IQ4_NL", "F16"}),
    "aarch64": frozenset({"Q4_0", "Q4_K", "IQ4_NL", "Q8_0"}),
}
"""Tensor types ggml's CPU backend copies out of the mapped file into its own layout, by machine.

x86 repacks with AVX2 into a `CPU_REPACK` buffer (Q4_K measured: every Q4_K
matrix but the token embeddings moved; Q8_0 and Q6_K stayed mapped); ARM with
NEON dot products, Q8_0 included. A CPU with AMX copies the matrices ggml has AMX
kernels for, F16 among them, into an `AMX` buffer first (ggml's AMX
`supports_op`; measured on a Xeon with AMX, `AMX_INT8 = 1`), and IQ4_NL, which
AMX lacks, still to `CPU_REPACK`. A CPU without any of these copies nothing.
"""

AMX_ROW_MULTIPLE = {
    "Q4_0": 32,
    "Q4_1": 32,
    "Q8_0": 32,
    "Q4_K": 256,
    "Q5_K": 256,
    "Q6_K": 256,
    "IQ4_XS": 256,
    "F16": 16,
}
"""The row length (`ne[0]`) each AMX type needs a multiple of; its rows come in 32s (two tiles)."""


def repack_kind(arch: str | None, flags: tuple[str, ...] | None) -> str:
    """`x86_64`, `amx`, `aarch64` or `none`: which repacked copies a node's llama.cpp keeps."""
    have = set(flags or ())
    if arch == "x86_64" and "amx_int8" in have:
        return "amx"
    if arch == "x86_64" and "avx2" in have:
        return "x86_64"
    if arch == "aarch64" and "asimddp" in have:
        return "aarch64"
    return "none"


def _copied(type_name: str | None, dims: tuple[int, ...], repack_types: frozenset[str]) -> bool:
    """Whether a matrix a matmul reads is copied out of the mapped file on this CPU."""
    if type_name not in repack_types or len(dims) < 2:
        return False
    if "F16" in repack_types and type_name in AMX_ROW_MULTIPLE:  # an AMX CPU
        return dims[0] % AMX_ROW_MULTIPLE[type_name] == 0 and dims[1] % 32 == 0
    return dims[1] % 8 == 0


def model_buffers(artifact: Artifact, repack_types: frozenset[str]) -> tuple[int, int]:
    """The mapped span and the repacked bytes of a GGUF set whose tensors were read.

    A matrix is copied when its type is one the CPU repacks and its rows fit the
    layout (`_copied`). The token embeddings are read a row at a time and stay
    mapped; a model with no `output.weight` multiplies by them for its logits, and
    llama.cpp loads them a second time as that output matrix, which is copied too.
    """
    names: dict[int, str] = {}
    if repack_types:
        from gguf import GGMLQuantizationType

        names = {kind.value: kind.name for kind in GGMLQuantizationType}
    every = [tensor for tensors in artifact.gguf_tensors for tensor in tensors]
    tied = not any(tensor.name == "output.weight" for tensor in every)
    mapped = repack = 0
    for tensors in artifact.gguf_tensors:
        kept = []
        for tensor in tensors:
            type_name = names.get(tensor.ggml_type)
            if tensor.name.startswith("token_embd"):
                kept.append(tensor)
                if tied and _copied(type_name, tensor.dims, repack_types):
                    repack += tensor.n_bytes
            elif _copied(type_name, tensor.dims, repack_types):
                repack += tensor.n_bytes
            else:
                kept.append(tensor)
        if kept:
            mapped += max(t.offset + t.n_bytes for t in kept) - min(t.offset for t in kept)
    return mapped, repack


def compute_bytes(
    shape: ModelShape,
    *,
    n_kv: int,
    n_kv_swa: int,
    n_ubatch: int,
    flash_attn: bool,
    quantized_kv: bool,
    holds_head: bool = True,
    n_outputs: int | None = None,
) -> int:
    """llama.cpp's CPU compute buffer: the largest set of tensors alive at once in a micro-batch.

    Widths below are fp32 columns of `n_ubatch` rows; H is the hidden size,
    h the heads, and an MLA model's absorbed query is `h × (latent + rope)`
    wide (q). The masks (`n_kv`, and the window's on a sliding-window model)
    live through every layer: fp32 without flash attention, fp16 (half a
    column a cell) with it. Beside them one of these is the most:
    * the feed-forward: its gate, up and their product (3 × its width, the
      experts a token uses for a mixture) and 4 H of stream;
    * attention without flash attention: every head's scores against every
      cell (`n_kv × h`, soft-maxed in place) and 5 H + 2 × the K/V width of
      stream; MLA 8 H + 2 q, or at long contexts a second `n_kv` with q + H;
    * MLA's attention with flash attention: 8 H + 2 q;
    * the output, on the device holding the head: a logit per vocabulary
      entry for each of `n_outputs` tokens (None: every token of the
      micro-batch, as llama-cpp-python and older llama-server builds
      reserve; newer llama-server builds reserve one a slot) beside 2 H of
      stream (one H more when a quantised KV cache is read through flash
      attention; MLA 6 H).
    The stream terms are measured against llama.cpp's allocator
    (`tests/support/llamacpp_truth.py`), not derived from its graph.
    """
    hidden, heads = shape.hidden_size, shape.num_attention_heads
    masks = n_kv + (n_kv_swa if shape.sliding_window else 0)
    if flash_attn:
        masks = masks // 2
    ffn = (
        (shape.moe_intermediate_size or 0) * (shape.experts_per_token or 1)
        if shape.is_moe
        else shape.intermediate_size
    )
    columns = masks + 3 * ffn + 4 * hidden
    if shape.mla is not None:
        query = heads * (shape.mla.kv_lora_rank + shape.mla.qk_rope_head_dim)
        if flash_attn:
            columns = max(columns, masks + 8 * hidden + 2 * query)
        else:
            columns = max(
                columns,
                n_kv * (heads + 1) + 8 * hidden + 2 * query,
                n_kv * (heads + 2) + query + hidden,
            )
        tail = 6 * hidden
    else:
        if not flash_attn:
            attention = masks + n_kv * heads + 5 * hidden + 2 * shape.num_kv_heads * shape.head_dim
            columns = max(columns, attention)
        tail = 2 * hidden + (hidden if quantized_kv and flash_attn else 0)
    peak = n_ubatch * 4 * columns
    if holds_head:
        outputs = n_ubatch if n_outputs is None else min(n_outputs, n_ubatch)
        peak = max(peak, 4 * (outputs * shape.vocab_size + n_ubatch * tail))
    return peak


def quantised_kv(kv_type: str) -> bool:
    """True for a cache type llama.cpp quantises (`q8_0` …): read only through flash attention."""
    return kv_type.lower() not in ("f16", "f32", "bf16")


def _check_kv(kv_type: str, flash_attn: bool) -> None:
    """llama.cpp reads a quantised V cache only through flash attention (it refuses to start)."""
    if quantised_kv(kv_type) and not flash_attn:
        raise BadInput(
            f"llama.cpp refuses a {kv_type} KV cache without flash attention",
            "turn flash_attn on, or keep the cache f16",
        )


def _without_window(shape: ModelShape) -> ModelShape:
    """The shape with its sliding layers' cache as long as the context (`swa_full`)."""
    from dataclasses import replace

    return replace(shape, sliding_window=None)
