"""The rules that decide which ways a model may run, before any memory is counted (pure).

Each rule lives here once and the planner asks it:

* which tensor widths a model's heads allow (`tensor_widths`);
* which engines serve an artifact, and with which flags (`engines_for`,
  `quantization_flag`);
* whether a class of card can load an artifact at all (`load_refusal`):
  a recommendation that cannot load is the worst bug a planner can have, so
  a card whose kernels cannot run the weights is never offered;
* how good a precision is for ranking (`precision_rank_bits`).
"""

from __future__ import annotations

from llmgw_core.model.artifacts import Artifact
from llmgw_core.model.quantization import Quantization
from llmgw_core.model.shape import ModelShape
from llmgw_core.planner.gpu_classes import GpuClass

VLLM = "vllm"
SGLANG = "sglang"
LLAMA_CPP = "llama.cpp"

# The engines in the order they are offered for the same cards and precision.
ENGINE_ORDER = {VLLM: 0, SGLANG: 1, LLAMA_CPP: 2}

# vLLM's own floor: it has no kernels for cards older than Volta.
_VLLM_MIN_COMPUTE_CAPABILITY = 7.0
# bfloat16 needs Ampere (8.0); older cards are served in float16 with `--dtype half`.
_BF16_MIN_COMPUTE_CAPABILITY = 8.0

_DTYPE_BITS = {"bfloat16": 16.0, "float16": 16.0, "float32": 32.0, "float8": 8.0}


def tensor_widths(
    shape: ModelShape, max_width: int, quantization: Quantization | None = None
) -> tuple[int, ...]:
    """The tensor-parallel widths, up to `max_width`, that the model allows (see `width_refusal`)."""
    return tuple(
        width
        for width in range(1, max_width + 1)
        if width_refusal(shape, width, quantization) is None
    )


def width_refusal(
    shape: ModelShape, width: int, quantization: Quantization | None = None
) -> str | None:
    """Why `width` cards cannot split this model's layers, or None when they can.

    A width must divide the attention heads, and divide the KV heads or be a
    multiple of them: past the KV heads each card keeps a copy of one head.
    With 8 KV heads and 64 heads that is 1, 2, 4, 8, 16 — never 12. vLLM
    pads the vocabulary to the width itself, so the vocabulary sets no rule.

    Grouped quantisations (AWQ, GPTQ) also need each card's slice of the MLP
    to be whole groups: Qwen2.5-72B-AWQ (29568 wide, groups of 128) loads 4
    wide but not 8.
    """
    kv_heads = max(1, shape.num_kv_heads)
    if kv_heads % width and width % kv_heads:
        return (
            f"a width of {width} neither divides the {kv_heads} KV heads nor is a multiple of them"
        )
    heads = shape.num_attention_heads
    if heads % width:
        return f"a width of {width} does not divide the {heads} attention heads"
    group = quantization.group_size if quantization is not None else None
    if group and width > 1 and not shape.is_moe:
        mlp = shape.intermediate_size
        if mlp % width or (mlp // width) % group:
            return (
                f"a width of {width} cuts the {mlp}-wide MLP into slices that are not whole"
                f" groups of {group} {quantization.method if quantization else ''} weights"
            )
    return None


def context_refusal(shape: ModelShape, context: int) -> str | None:
    """Why a context cannot be served, or None: engines refuse more than the model was trained for."""
    if shape.max_context and context > shape.max_context:
        return (
            f"a context of {context} tokens is longer than the {shape.max_context} tokens"
            " the model was trained for"
        )
    return None


def engines_for(artifact: Artifact) -> tuple[str, ...]:
    """The engines that serve an artifact: GGUF on llama.cpp, safetensors on vLLM or SGLang."""
    if artifact.format == "gguf":
        return (LLAMA_CPP,)
    return (VLLM, SGLANG)


def quantization_flag(artifact: Artifact, engine: str) -> str | None:
    """The `--quantization` value an engine must be given so it never quietly loads bf16."""
    if engine == LLAMA_CPP or artifact.quantization is None:
        return None
    return artifact.quantization.vllm_flag


def precision_bits(artifact: Artifact, shape: ModelShape | None) -> float:
    """Bits a weight of this artifact: the quantisation's, else the checkpoint dtype's."""
    if artifact.quantization is not None:
        return float(artifact.quantization.bits)
    if shape is not None:
        return _DTYPE_BITS.get(shape.dtype, 16.0)
    return 16.0


def precision_rank_bits(artifact: Artifact, shape: ModelShape | None) -> float:
    """Precision for ranking: better up to 8 bits, no better past it."""
    return min(precision_bits(artifact, shape), 8.0)


def precision_label(artifact: Artifact, shape: ModelShape | None) -> str:
    """`bf16`, `fp8`, `awq`, `Q4_K_M` …: what people call the artifact's precision."""
    if artifact.format == "gguf":
        return artifact.name
    if artifact.quantization is not None:
        return artifact.quantization.method
    dtype = shape.dtype if shape is not None else "bfloat16"
    return {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}.get(dtype, dtype)


def load_refusal(
    engine: str, artifact: Artifact, shape: ModelShape, card: GpuClass | None
) -> str | None:
    """Why this engine on this card cannot load this artifact, or None when it can.

    Args:
        engine: the engine.
        artifact: the weights.
        shape: the model's shape.
        card: the card's class, or None for a CPU node.
    """
    if card is None:
        if engine == VLLM:
            if artifact.format == "gguf":
                return "vLLM's CPU backend is planned for safetensors weights, not GGUF"
            if artifact.quantization is not None:
                return (
                    f"vLLM's CPU backend is planned for unquantised weights here;"
                    f" {artifact.quantization.method} weights need a GPU or a GGUF file on llama.cpp"
                )
            return None
        if engine != LLAMA_CPP:
            return f"{engine} does not run on a CPU node; vLLM's CPU backend or llama.cpp does"
        return None
    if engine in (VLLM, SGLANG):
        if card.compute_capability < _VLLM_MIN_COMPUTE_CAPABILITY:
            return f"{engine} needs compute capability 7.0 and {card.label} has {card.compute_capability}"
        quant = artifact.quantization
        floor = quant.min_compute_capability if quant is not None else None
        if quant is not None and floor is not None and card.compute_capability < floor:
            return (
                f"{quant.method} weights need compute capability {floor}"
                f" and {card.label} has {card.compute_capability}"
            )
    return None


def dtype_flag(
    engine: str, artifact: Artifact, shape: ModelShape, card: GpuClass | None
) -> str | None:
    """`half` when a bf16 checkpoint meets a card without bf16 (older than Ampere), else None.

    vLLM refuses to start a bf16 model on such a card unless told to cast it.
    """
    if engine == LLAMA_CPP or card is None:
        return None
    no_bf16 = card.compute_capability < _BF16_MIN_COMPUTE_CAPABILITY
    if artifact.quantization is None and shape.dtype == "bfloat16" and no_bf16:
        return "half"
    return None


def uses_expert_parallel(engine: str, shape: ModelShape, tensor_parallel: int) -> bool:
    """A mixture of experts on more than one card of a layer spreads whole experts over them.

    Expert parallelism runs over the tensor-parallel ranks, so it needs a
    width above one; llama.cpp has no such mode.
    """
    return engine != LLAMA_CPP and shape.is_moe and tensor_parallel > 1
