"""The shape of a model, as the memory rules size it: `ModelShape` and its MLA part (pure).

Also the names of the per-layer attention kinds (`FULL`, `SLIDING`,
`CHUNKED`) and `check_shape`, the refusal of a shape no model can have,
whichever file (`config.json`, a GGUF header) it was read from.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmgw_core.errors import BadInput
from llmgw_core.model.quantization import Quantization

__all__ = [
    "CHUNKED",
    "FULL",
    "SLIDING",
    "MlaShape",
    "ModelShape",
    "check_shape",
]

# The attention kinds of `ModelShape.layer_attention`.
FULL = "full"
SLIDING = "sliding"
CHUNKED = "chunked"


@dataclass(frozen=True)
class MlaShape:
    """Multi-head latent attention (DeepSeek V2/V3, Kimi K2): the KV cache is one latent.

    Attributes:
        kv_lora_rank: width of the compressed KV latent (512 for DeepSeek-V3).
        qk_rope_head_dim: width of the decoupled rotary key (64), cached beside the latent.
        qk_nope_head_dim: per-head non-rotary query/key width (128).
        v_head_dim: per-head value width (128).
        q_lora_rank: width of the query compression, None when queries are not compressed.
    """

    kv_lora_rank: int
    qk_rope_head_dim: int
    qk_nope_head_dim: int = 128
    v_head_dim: int = 128
    q_lora_rank: int | None = None

    @property
    def latent_width(self) -> int:
        """Values cached per token per layer: latent plus rotary key (576 for DeepSeek-V3)."""
        return self.kv_lora_rank + self.qk_rope_head_dim


@dataclass(frozen=True)
class ModelShape:
    """The language model's shape, as the engines size it.

    The first block of fields is the contract with the planner; the rest are
    what parameter counting and the engines' finer rules need.
    """

    architecture: str
    model_type: str
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_kv_heads: int
    head_dim: int
    vocab_size: int
    max_context: int
    dtype: str
    intermediate_size: int
    num_experts: int | None
    experts_per_token: int | None
    moe_intermediate_size: int | None
    mla: MlaShape | None
    layer_attention: tuple[str, ...]
    sliding_window: int | None
    attention_chunk_size: int | None
    quantization: Quantization | None
    tie_word_embeddings: bool
    # Finer facts (defaults keep hand-built shapes in tests short).
    moe_layers: tuple[bool, ...] = ()
    num_shared_experts: int = 0
    shared_expert_intermediate_size: int | None = None
    dense_intermediate_size: int | None = None
    attention_bias: bool = False
    output_bias: bool = False
    qk_norm: bool = False
    norms_per_layer: int = 2
    num_mtp_layers: int = 0
    rope_type: str | None = None
    rope_factor: float = 1.0
    rope_original_max_position: int | None = None
    rotary_dim: int | None = None
    multimodal: bool = False

    @property
    def is_moe(self) -> bool:
        """True when some layers route tokens to experts."""
        return bool(self.num_experts) and self.num_experts > 1

    @property
    def kv_head_dim(self) -> int:
        """Values cached per KV head per token: the MLA latent for MLA, else head_dim."""
        return self.mla.latent_width if self.mla else self.head_dim

    def layer_is_moe(self, layer: int) -> bool:
        """True when `layer` (0-based) has routed experts."""
        if not self.is_moe:
            return False
        return self.moe_layers[layer] if self.moe_layers else True

    def count_layers(self, kind: str) -> int:
        """How many layers use attention `kind` ("full", "sliding", "chunked")."""
        return sum(1 for k in self.layer_attention if k == kind)


def check_shape(shape: ModelShape, where: str) -> ModelShape:
    """Refuse a shape no model can have, whichever file it was read from.

    Raises:
        BadInput: more experts per token than experts, more attention heads
            than the hidden size holds, more key/value heads than heads.
    """
    experts, used = shape.num_experts, shape.experts_per_token
    if experts and used is not None and used > experts:
        raise BadInput(
            f"{where}: {used} experts per token, but only {experts} experts",
            "the file is damaged",
        )
    if shape.num_attention_heads > shape.hidden_size:
        raise BadInput(
            f"{where}: {shape.num_attention_heads} attention heads, more than the hidden size "
            f"({shape.hidden_size}) holds",
            "the file is damaged",
        )
    if shape.num_kv_heads > shape.num_attention_heads:
        raise BadInput(
            f"{where}: {shape.num_kv_heads} key/value heads, more than its "
            f"{shape.num_attention_heads} attention heads",
            "the file is damaged",
        )
    return shape
