"""What LoRA adapters take on a card, by each engine's own rule (pure).

* **vLLM** (`vllm/lora/layers/base_linear.py`, `create_lora_weights`): with
  `--enable-lora`, every supported linear module of every layer gets
  `max_loras` slots of rank `max_lora_rank`, whatever the adapters target
  (`--lora-target-modules` narrows that): a slot is `lora_a [rank, in]` and
  `lora_b [out, rank]` in the LoRA dtype (the model's unless `--lora-dtype`).
  Tensor parallel splits them as it splits the module: a column-parallel
  module (q, k, v, gate, up) keeps `in` whole and splits `out`; a
  row-parallel one (o, down) splits `in` and keeps `out` whole. The slots
  are allocated with the model, before the KV cache is sized, so they come
  out of the KV cache's room. `max_cpu_loras` adapters are kept in host RAM
  at their own size.
* **SGLang** (`sglang/srt/lora/mem_pool.py`): the same two buffers a module,
  `max_loras_per_batch` slots of `max_lora_rank`, for the modules the
  adapters target (`--lora-target-modules`), split as vLLM splits them;
  allocated before the KV pool.
* **llama.cpp** (`src/llama-adapter.cpp`): every adapter given with `--lora`
  is loaded whole, each tensor at its own type, beside the layer it adapts
  (on the card that holds the layer, in RAM on a CPU node).

Every figure here is bytes; `memory.card_need` turns them into the card's
`adapters_gib`.
"""

from __future__ import annotations

from dataclasses import dataclass

from llmgw_core.model.adapters import AdapterShape, module_widths
from llmgw_core.model.model_shape import ModelShape

VLLM_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)
"""`--max-lora-rank`'s choices in vLLM 0.32 (`vllm/config/lora.py`, `MaxLoRARanks`)."""

COLUMN = frozenset({"q_proj", "k_proj", "v_proj", "gate_proj", "up_proj"})
"""Modules tensor parallel splits by their output (the others, o and down, by their input)."""

LORA_DTYPE_BYTES = {"float16": 2, "bfloat16": 2, "float32": 4}

GGML_ALIGNMENT = 32
"""llama.cpp's tensor alignment in a CPU buffer (`TENSOR_ALIGNMENT`)."""


@dataclass(frozen=True)
class LoraSlots:
    """The adapters a replica serves and the room its engine keeps for them.

    Attributes:
        adapters: each adapter, as its files describe it.
        max_loras: adapters in one batch (vLLM's `--max-loras`, SGLang's
            `--max-loras-per-batch`): the slots a card holds.
        max_lora_rank: the rank every slot is made for.
        max_cpu_loras: vLLM: adapters kept in host RAM (at least `max_loras`).
        dtype: the slots' type (`--lora-dtype`); None for the model's.
    """

    adapters: tuple[AdapterShape, ...]
    max_loras: int
    max_lora_rank: int
    max_cpu_loras: int | None = None
    dtype: str | None = None

    @property
    def target_modules(self) -> tuple[str, ...]:
        """The modules any adapter adapts (what SGLang makes room for)."""
        wanted = {m for a in self.adapters for m in a.target_modules}
        from llmgw_core.model.adapters import MODULES

        return tuple(m for m in MODULES if m in wanted)

    @classmethod
    def from_record(cls, record: object) -> LoraSlots | None:
        """The slots a replica's spec recorded (`as_dict`), for a heal; None for none or for
        anything that is not such a record."""
        if not isinstance(record, dict) or not isinstance(record.get("adapters"), list):
            return None
        try:
            adapters = tuple(
                AdapterShape(
                    name=str(a["name"]),
                    source=str(a["source"]),
                    format="gguf" if a.get("format") == "gguf" else "peft",
                    rank=int(a["rank"]),
                    alpha=float(a.get("alpha") or a["rank"]),
                    target_modules=tuple(str(m) for m in a.get("target_modules") or ()),
                    dtype=str(a.get("dtype") or ""),
                    n_bytes=int(a.get("bytes") or 0),
                    layers=int(a.get("layers") or 0),
                    hidden_size=int(a.get("hidden_size") or 0),
                    file=str(a["file"]) if isinstance(a.get("file"), str) else None,
                    origin=str(a["origin"]) if isinstance(a.get("origin"), str) else None,
                )
                for a in record["adapters"]
            )
            return cls(
                adapters=adapters,
                max_loras=int(record["max_loras"]),
                max_lora_rank=int(record["max_lora_rank"]),
                max_cpu_loras=record.get("max_cpu_loras")
                if isinstance(record.get("max_cpu_loras"), int)
                else None,
            )
        except (KeyError, TypeError, ValueError):
            return None

    def as_dict(self) -> dict[str, object]:
        """The slots as the `plan` step shows them."""
        return {
            "adapters": [a.as_dict() for a in self.adapters],
            "max_loras": self.max_loras,
            "max_lora_rank": self.max_lora_rank,
            "max_cpu_loras": self.max_cpu_loras,
        }


def default_vllm_rank(rank: int) -> int:
    """The smallest `--max-lora-rank` vLLM takes that holds `rank` (its choices are fixed)."""
    for choice in VLLM_RANKS:
        if choice >= rank:
            return choice
    return VLLM_RANKS[-1]


def _partitioned(shape: ModelShape, module: str, tp: int) -> tuple[int, int]:
    """(in, out) of one rank's share of `module` under tensor parallel `tp`."""
    width_in, width_out = module_widths(shape, module)
    if module in COLUMN:
        if module in ("k_proj", "v_proj") and shape.num_kv_heads < tp:
            # vLLM replicates KV heads when there are fewer than ranks: one head a rank.
            return width_in, shape.head_dim
        return width_in, -(-width_out // tp)
    return -(-width_in // tp), width_out


def slot_bytes(
    shape: ModelShape,
    modules: tuple[str, ...],
    *,
    rank: int,
    slots: int,
    tensor_parallel: int,
    dtype_bytes: int,
    layers: int | None = None,
) -> int:
    """Bytes of `slots` rank-`rank` slots on every module in `modules` of every layer, on one rank."""
    per_layer = 0
    for module in modules:
        width_in, width_out = _partitioned(shape, module, tensor_parallel)
        per_layer += rank * (width_in + width_out)
    return per_layer * slots * dtype_bytes * (shape.num_layers if layers is None else layers)


def _dtype_bytes(slots: LoraSlots, serve_dtype: str) -> int:
    return LORA_DTYPE_BYTES.get(slots.dtype or serve_dtype, 2)


def card_bytes(
    engine: str,
    shape: ModelShape,
    slots: LoraSlots,
    *,
    tensor_parallel: int,
    pipeline_parallel: int,
    serve_dtype: str,
    devices: int = 1,
) -> int:
    """What the adapters take on the worst card (on a CPU node, in its RAM) under `engine`."""
    from llmgw_core.model.adapters import MODULES

    stage_layers = -(-shape.num_layers // pipeline_parallel)
    if engine == "vllm":
        return slot_bytes(
            shape,
            MODULES,
            rank=slots.max_lora_rank,
            slots=slots.max_loras,
            tensor_parallel=tensor_parallel,
            dtype_bytes=_dtype_bytes(slots, serve_dtype),
            layers=stage_layers,
        )
    if engine == "sglang":
        return slot_bytes(
            shape,
            slots.target_modules,
            rank=slots.max_lora_rank,
            slots=slots.max_loras,
            tensor_parallel=tensor_parallel,
            dtype_bytes=_dtype_bytes(slots, serve_dtype),
            layers=stage_layers,
        )
    whole = sum(gguf_loaded_bytes(a) for a in slots.adapters)
    return -(-whole // max(devices, 1))


def gguf_loaded_bytes(adapter: AdapterShape) -> int:
    """A GGUF adapter's tensors as llama.cpp allocates them (each aligned); its stored bytes
    for any other adapter."""
    if not adapter.tensor_bytes:
        return adapter.n_bytes
    return sum(-(-n // GGML_ALIGNMENT) * GGML_ALIGNMENT for n in adapter.tensor_bytes)


def host_bytes(engine: str, slots: LoraSlots) -> int:
    """What vLLM keeps in host RAM for adapters: up to `max_cpu_loras` of them at their size."""
    if engine != "vllm":
        return 0
    kept = slots.max_cpu_loras or slots.max_loras
    sizes = sorted((a.n_bytes for a in slots.adapters), reverse=True)
    return sum(sizes[:kept])


PEFT_ENGINES = ("vllm", "sglang")
"""The engines that serve PEFT (safetensors) adapters; llama.cpp serves GGUF ones."""


def slots_for(
    adapters: tuple[AdapterShape, ...],
    *,
    max_loras: int | None = None,
    max_lora_rank: int | None = None,
) -> LoraSlots | None:
    """The room a replica keeps for `adapters`: a slot each unless `max_loras` says otherwise,
    made for the largest adapter's rank unless `max_lora_rank` does; None for no adapters."""
    if not adapters:
        return None
    return LoraSlots(
        adapters=adapters,
        max_loras=max_loras or len(adapters),
        max_lora_rank=max_lora_rank or max(a.rank for a in adapters),
    )


def takes_adapters(engine: str, slots: LoraSlots | None) -> bool:
    """True when `engine` serves every adapter of `slots` as its files are (PEFT for vLLM and
    SGLang, GGUF for llama.cpp)."""
    if slots is None:
        return True
    wanted = "peft" if engine in PEFT_ENGINES else "gguf"
    return all(a.format == wanted for a in slots.adapters)
