"""Parameters counted from the architecture, layer by layer (pure).

Used when a repository gives nothing but a `config.json` (no index, no sizes),
and to split real file bytes between pipeline stages and between weights an
engine shards and weights it keeps whole. Counted per group because a
quantisation rarely covers everything: embeddings, the output head, norms and
routers usually stay in 16-bit while the linear layers shrink.

Checks against published totals: Llama-3.1-8B 8.03 B, Llama-3.1-70B 70.55 B,
Mixtral-8x7B 46.7 B, Qwen3-235B-A22B 235 B, DeepSeek-V3 671 B plus its MTP layer.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmgw_core.model.model_shape import ModelShape

_DTYPE_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2}


def dtype_bytes(dtype: str) -> int:
    """Bytes of one value of a 16/32-bit torch dtype name."""
    return _DTYPE_BYTES.get(dtype, 2)


@dataclass(frozen=True)
class LayerParams:
    """One decoder layer's parameters, by what a quantisation may cover.

    Attributes:
        attention: q/k/v/o (or MLA) projection weights.
        dense_mlp: a dense MLP's weights (dense layers, Llama 4 dense layers).
        routed_experts: every routed expert's weights.
        shared_experts: always-on shared experts' weights.
        small: norms, biases, routers, sinks — kept in 16/32-bit by every format.
    """

    attention: int
    dense_mlp: int
    routed_experts: int
    shared_experts: int
    small: int

    @property
    def total(self) -> int:
        """All parameters of the layer."""
        return (
            self.attention + self.dense_mlp + self.routed_experts + self.shared_experts + self.small
        )


@dataclass(frozen=True)
class ParameterCount:
    """A model's parameters: per layer, embeddings, head and MTP layers.

    Attributes:
        embedding: input token embeddings.
        output: the output head (0 when tied to the embeddings).
        final_norm: the last norm.
        layers: one entry per decoder layer.
        mtp: multi-token-prediction layers shipped in the checkpoint (DeepSeek-V3),
            which engines do not load unless speculative decoding asks for them.
    """

    embedding: int
    output: int
    final_norm: int
    layers: tuple[LayerParams, ...]
    mtp: int = 0

    @property
    def main(self) -> int:
        """Parameters of the served model (no MTP)."""
        return self.embedding + self.output + self.final_norm + sum(x.total for x in self.layers)

    @property
    def total(self) -> int:
        """Every parameter in the checkpoint, MTP included."""
        return self.main + self.mtp


def _attention(shape: ModelShape) -> tuple[int, int]:
    """(projection weights, biases and norms) of one attention block."""
    hidden = shape.hidden_size
    heads = shape.num_attention_heads
    small = 0
    if shape.mla:
        mla = shape.mla
        qk = mla.qk_nope_head_dim + mla.qk_rope_head_dim
        if mla.q_lora_rank:
            q = hidden * mla.q_lora_rank + mla.q_lora_rank * heads * qk
            small += mla.q_lora_rank
        else:
            q = hidden * heads * qk
        kv = hidden * mla.latent_width + mla.kv_lora_rank * heads * (
            mla.qk_nope_head_dim + mla.v_head_dim
        )
        small += mla.kv_lora_rank
        out = heads * mla.v_head_dim * hidden
        return q + kv + out, small
    q_width = heads * shape.head_dim
    kv_width = shape.num_kv_heads * shape.head_dim
    weights = hidden * q_width + 2 * hidden * kv_width + q_width * hidden
    if shape.attention_bias:
        small += q_width + 2 * kv_width
    if shape.output_bias:
        small += hidden
    if shape.qk_norm:
        small += 2 * shape.head_dim
    if shape.model_type == "gpt_oss":
        small += heads  # attention sinks
    return weights, small


def _mlp(hidden: int, width: int) -> int:
    """Gated MLP: gate, up and down projections."""
    return 3 * hidden * width


def count_parameters(shape: ModelShape) -> ParameterCount:
    """Count a model's parameters from its shape, layer by layer."""
    hidden = shape.hidden_size
    attention, attention_small = _attention(shape)
    layers = []
    for index in range(shape.num_layers):
        small = attention_small + shape.norms_per_layer * hidden
        if shape.layer_is_moe(index):
            experts = shape.num_experts or 0
            routed = experts * _mlp(hidden, shape.moe_intermediate_size or 0)
            small += hidden * experts  # router
            if shape.model_type == "gpt_oss":
                # biases on the router and on each expert's two projections
                width = shape.moe_intermediate_size or 0
                small += experts + experts * (2 * width + hidden)
            shared = (
                _mlp(hidden, shape.shared_expert_intermediate_size)
                if shape.num_shared_experts and shape.shared_expert_intermediate_size
                else 0
            )
            if shared and shape.model_type == "qwen2_moe":
                small += hidden  # shared-expert gate
            layers.append(LayerParams(attention, 0, routed, shared, small))
        else:
            width = shape.dense_intermediate_size or shape.intermediate_size
            layers.append(LayerParams(attention, _mlp(hidden, width), 0, 0, small))
    embedding = shape.vocab_size * hidden
    output = 0 if shape.tie_word_embeddings else shape.vocab_size * hidden
    mtp = 0
    if shape.num_mtp_layers:
        # Each MTP module: a full decoder layer (MoE at DeepSeek-V3's depth), two
        # norms and a projection of [embedding; hidden] back to hidden. Its
        # embedding and head are shared with the main model in the checkpoint.
        last = layers[-1]
        mtp = shape.num_mtp_layers * (last.total + 2 * hidden + 2 * hidden * hidden + hidden)
    return ParameterCount(
        embedding=embedding,
        output=output,
        final_norm=hidden,
        layers=tuple(layers),
        mtp=mtp,
    )


def weights_bytes_from_params(
    params: ParameterCount, shape: ModelShape, *, include_mtp: bool = True
) -> int:
    """Checkpoint bytes predicted from the parameter count and the quantisation.

    The quantised groups follow each format's rule: FP8 and GPTQ/AWQ cover
    every linear layer; MXFP4 (gpt-oss) only the experts; compressed-tensors
    as its `ignore` list says. Embeddings, head, norms and routers stay in the
    checkpoint's 16/32-bit dtype.
    """
    wide = dtype_bytes(shape.dtype)
    quant = shape.quantization
    quant_bytes = quant.bits / 8 if quant else wide
    total = 0.0
    for layer in params.layers:
        total += layer.small * wide
        attention_bytes = (
            wide if quant is None or quant.experts_only or quant.keeps_attention else quant_bytes
        )
        dense_bytes = (
            wide if quant is None or quant.experts_only or quant.keeps_dense_mlp else quant_bytes
        )
        total += layer.attention * attention_bytes
        total += (layer.dense_mlp + layer.shared_experts) * dense_bytes
        total += layer.routed_experts * quant_bytes
    total += (params.embedding + params.output + params.final_norm) * wide
    if include_mtp and params.mtp:
        per_param = total / max(1, params.main)
        total += params.mtp * per_param
    return int(total)
