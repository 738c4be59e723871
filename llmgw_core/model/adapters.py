"""A LoRA adapter's shape, read from its own files, and whether it fits the served model (pure).

Two layouts are read:

* **PEFT** (what `peft` saves and the Hub holds): `adapter_config.json`
  (`r`, `lora_alpha`, `target_modules`, `base_model_name_or_path` …) and the
  tensors of `adapter_model.safetensors`, named
  `…layers.N.self_attn.q_proj.lora_A.weight` (`[r, in]`) and `….lora_B.weight`
  (`[out, r]`).
* **GGUF** (llama.cpp's `convert_lora_to_gguf.py`): `general.type = adapter`,
  `adapter.type = lora`, `adapter.lora.alpha`, and tensors
  `blk.N.attn_q.weight.lora_a` (ggml dims `[in, r]`) and `….lora_b` (`[r, out]`).

Rank, alpha, the modules targeted, the dtype and the widths all come from
those files, never from what an operator typed; `adapter_refusal` then names
the first mismatch with the served model in one sentence. Both files come
from outside (a Hub repository, a colleague's folder): every value is
checked for type and range before it is used, and a file that is not what
it says is refused, never half-read.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from llmgw_core.errors import BadInput, shown_value
from llmgw_core.model.config_numbers import MAX_LAYERS
from llmgw_core.model.model_shape import ModelShape

MAX_RANK = 4096
"""More than any adapter has (vLLM's largest `--max-lora-rank` choice is 512)."""

MODULES = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
"""The linear modules of a decoder layer an adapter may target, by their PEFT names."""

ATTENTION = frozenset(MODULES[:4])

_GGUF_MODULES = {
    "attn_q": "q_proj",
    "attn_k": "k_proj",
    "attn_v": "v_proj",
    "attn_output": "o_proj",
    "ffn_gate": "gate_proj",
    "ffn_up": "up_proj",
    "ffn_down": "down_proj",
}
# Fused names some families use, as vLLM splits them again.
_FUSED = {
    "qkv_proj": ("q_proj", "k_proj", "v_proj"),
    "gate_up_proj": ("gate_proj", "up_proj"),
}
_SAFETENSORS_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "F8_E4M3": 1, "F8_E5M2": 1}
_DTYPES = {"F32": "float32", "F16": "float16", "BF16": "bfloat16"}

_PEFT_TENSOR = re.compile(
    r"(?:^|\.)layers\.(?P<layer>\d{1,5})\.(?:[A-Za-z_]+\.)*?(?P<module>[a-z_]+)"
    r"\.lora_(?P<side>[AB])(?:\.[A-Za-z0-9_-]+)?\.weight$"
)
_GGUF_TENSOR = re.compile(
    r"^blk\.(?P<layer>\d{1,5})\.(?P<module>[a-z_]+)\.weight\.lora_(?P<side>[ab])$"
)

AdapterFormat = Literal["peft", "gguf"]


@dataclass(frozen=True)
class AdapterShape:
    """What one adapter is, from its files.

    Attributes:
        name: the name it is served and asked for by.
        source: where it comes from (a Hub repository, a folder, a GGUF file).
        format: "peft" (safetensors) or "gguf".
        rank: its LoRA rank (the largest, where `rank_pattern` gives some modules more).
        alpha: its `lora_alpha`.
        target_modules: the decoder modules it adapts, by their PEFT names, in `MODULES` order.
        dtype: its tensors' type (`bfloat16`, `float16`, `float32`; GGUF: `F16`, `Q8_0` …).
        n_bytes: its tensors' bytes as stored (what a node downloads, and holds in RAM).
        layers: the decoder layers it adapts (the highest index + 1).
        hidden_size: the model width its tensors were made for.
        base_model: the model it was trained on, as its config names it (PEFT), else None.
        architecture: GGUF's `general.architecture`, else None.
        files: the files it is made of, relative to `source` (with their sizes where known).
        tensor_bytes: GGUF only: each tensor's bytes, as llama.cpp allocates them.
    """

    name: str
    source: str
    format: AdapterFormat
    rank: int
    alpha: float
    target_modules: tuple[str, ...]
    dtype: str
    n_bytes: int
    layers: int
    hidden_size: int
    base_model: str | None = None
    architecture: str | None = None
    files: tuple[tuple[str, int | None], ...] = ()
    tensor_bytes: tuple[int, ...] = ()
    file: str | None = None
    """On the Hub: the repository's GGUF adapter file (None for PEFT files)."""
    origin: str | None = None
    """Where it came from when `source` is where `serve` put it on the nodes (a Hub id)."""

    @property
    def given(self) -> str:
        """The source as the operator gave it (what a service compares)."""
        return self.origin or self.source

    def as_dict(self) -> dict[str, Any]:
        """The adapter as the `plan` and `explain` steps show it."""
        return {
            "name": self.name,
            "source": self.source,
            "format": self.format,
            "rank": self.rank,
            "alpha": self.alpha,
            "target_modules": list(self.target_modules),
            "dtype": self.dtype,
            "bytes": self.n_bytes,
            "layers": self.layers,
            "hidden_size": self.hidden_size,
            "base_model": self.base_model,
            "file": self.file,
            "origin": self.origin,
        }


@dataclass(frozen=True)
class SafeTensor:
    """One tensor of a safetensors header: its dtype name and shape."""

    dtype: str
    shape: tuple[int, ...]

    @property
    def n_bytes(self) -> int:
        """Its bytes (its elements times its dtype's width)."""
        return math.prod(self.shape) * _SAFETENSORS_BYTES.get(self.dtype, 2)


def _count(value: Any, what: str, where: str, *, low: int = 1, high: int = MAX_RANK) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise BadInput(
            f"{where}: {what} is {shown_value(value)}, not a whole number from {low} to {high}"
        )
    return value


def _number(value: Any, what: str, where: str) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or not math.isfinite(value)
        or not 0 < value <= 1e6
    ):
        raise BadInput(f"{where}: {what} is {shown_value(value)}, not a positive number")
    return float(value)


def _text(value: Any, what: str, where: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > 4096 or any(ord(c) < 32 for c in value):
        raise BadInput(f"{where}: {what} is {shown_value(value)}, not a name")
    return value


def _module_names(value: Any, where: str) -> tuple[str, ...]:
    """`target_modules` as PEFT writes it: a list of names, or one name (PEFT reads a single
    string as a regular expression: llmgw takes the modules from the tensors instead)."""
    if value is None or isinstance(value, str):
        return ()
    if not isinstance(value, list) or len(value) > 64:
        raise BadInput(f"{where}: target_modules is {shown_value(value)}, not a list of names")
    names = []
    for item in value:
        if not isinstance(item, str) or not re.fullmatch(r"[A-Za-z0-9_.]{1,64}", item):
            raise BadInput(f"{where}: target_modules holds {shown_value(item)}, not a module name")
        names.append(item)
    return tuple(names)


def _canonical(module: str, where: str) -> tuple[str, ...]:
    if module in MODULES:
        return (module,)
    if module in _FUSED:
        return _FUSED[module]
    raise BadInput(
        f"{where}: it adapts {module!r}, which llmgw does not size",
        f"llmgw plans adapters on {', '.join(MODULES)}",
    )


def _ordered(modules: set[str]) -> tuple[str, ...]:
    return tuple(m for m in MODULES if m in modules)


def peft_adapter(
    name: str,
    source: str,
    config: Any,
    tensors: Mapping[str, SafeTensor],
    *,
    files: tuple[tuple[str, int | None], ...] = (),
    where: str | None = None,
) -> AdapterShape:
    """A PEFT adapter from its `adapter_config.json` (parsed) and its safetensors header.

    Raises:
        BadInput: a config or tensors that are not a LoRA adapter llmgw can size, one sentence.
    """
    where = where or f"adapter {name!r} ({source})"
    if not isinstance(config, dict):
        raise BadInput(f"{where}: adapter_config.json is {shown_value(config)}, not an object")
    kind = config.get("peft_type", "LORA")
    if kind != "LORA":
        raise BadInput(f"{where}: its peft_type is {shown_value(kind)}; only LoRA adapters serve")
    if config.get("use_dora") not in (None, False):
        raise BadInput(f"{where}: it is a DoRA adapter, which vLLM and SGLang do not serve")
    if config.get("modules_to_save") not in (None, []):
        raise BadInput(
            f"{where}: it also saves whole modules (modules_to_save), which the engines do not serve"
        )
    if config.get("bias", "none") != "none":
        raise BadInput(f"{where}: it trains biases (bias {shown_value(config.get('bias'))})")
    rank = _count(config.get("r"), "r (its rank)", where)
    alpha = _number(config.get("lora_alpha", rank), "lora_alpha", where)
    pattern = config.get("rank_pattern") or {}
    if not isinstance(pattern, dict):
        raise BadInput(f"{where}: rank_pattern is {shown_value(pattern)}, not an object")
    ranks = {rank} | {_count(v, "a rank_pattern rank", where) for v in pattern.values()}
    base = _text(config.get("base_model_name_or_path"), "base_model_name_or_path", where)
    named = {
        m for n in _module_names(config.get("target_modules"), where) for m in _canonical(n, where)
    }
    if not tensors:
        raise BadInput(f"{where}: adapter_model.safetensors holds no tensors")
    modules: set[str] = set()
    layers = 0
    hidden = 0
    dtypes: set[str] = set()
    total = 0
    for tensor_name, tensor in tensors.items():
        match = _PEFT_TENSOR.search(tensor_name)
        if match is None:
            raise BadInput(
                f"{where}: tensor {shown_value(tensor_name)} is not a LoRA A or B of a decoder layer"
            )
        if len(tensor.shape) != 2 or not all(0 < d <= 1 << 20 for d in tensor.shape):
            raise BadInput(f"{where}: tensor {tensor_name[:80]} has shape {list(tensor.shape)[:4]}")
        if tensor.dtype not in _DTYPES:
            raise BadInput(f"{where}: tensor {tensor_name[:80]} is {shown_value(tensor.dtype)}")
        adapted = _canonical(match["module"], where)
        module = adapted[0]
        layer = int(match["layer"])
        if layer >= MAX_LAYERS:
            raise BadInput(f"{where}: tensor {tensor_name[:80]} names layer {layer}")
        a_side = match["side"] == "A"
        tensor_rank = tensor.shape[0] if a_side else tensor.shape[1]
        if tensor_rank not in ranks:
            raise BadInput(
                f"{where}: tensor {tensor_name[:80]} has rank {tensor_rank}, "
                f"and adapter_config.json says {max(ranks)}"
            )
        if a_side and module in ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj"):
            hidden = max(hidden, tensor.shape[1])
        if not a_side and module in ("o_proj", "down_proj"):
            hidden = max(hidden, tensor.shape[0])
        modules.update(adapted)
        layers = max(layers, layer + 1)
        dtypes.add(tensor.dtype)
        total += tensor.n_bytes
    if named and not modules <= named:
        extra = ", ".join(sorted(modules - named))
        raise BadInput(f"{where}: its tensors adapt {extra}, which target_modules does not name")
    return AdapterShape(
        name=name,
        source=source,
        format="peft",
        rank=max(ranks),
        alpha=alpha,
        target_modules=_ordered(modules),
        dtype=_DTYPES[max(dtypes, key=lambda d: _SAFETENSORS_BYTES[d])],
        n_bytes=total,
        layers=layers,
        hidden_size=hidden,
        base_model=base,
        files=files,
    )


def gguf_adapter(name: str, source: str, header: Any, *, where: str | None = None) -> AdapterShape:
    """A GGUF LoRA adapter from its header (`gguf_header.GgufHeader`).

    Raises:
        BadInput: a header that is not a LoRA adapter llmgw can size, one sentence.
    """
    where = where or f"adapter {name!r} ({source})"
    meta = header.metadata
    if meta.get("general.type") != "adapter" or meta.get("adapter.type") != "lora":
        raise BadInput(
            f"{where}: this GGUF file is not a LoRA adapter "
            f"(general.type {shown_value(meta.get('general.type'))}, "
            f"adapter.type {shown_value(meta.get('adapter.type'))})"
        )
    arch = _text(meta.get("general.architecture"), "general.architecture", where)
    alpha_given = meta.get("adapter.lora.alpha", 0)
    pairs: dict[tuple[int, str], dict[str, tuple[int, ...]]] = {}
    modules: set[str] = set()
    layers = hidden = total = 0
    types: set[int] = set()
    sizes = []
    for tensor in header.tensors:
        match = _GGUF_TENSOR.match(tensor.name)
        if match is None or match["module"] not in _GGUF_MODULES:
            raise BadInput(
                f"{where}: tensor {shown_value(tensor.name)} is not a LoRA tensor of a layer"
            )
        if len(tensor.dims) != 2 or not all(0 < d <= 1 << 20 for d in tensor.dims):
            raise BadInput(f"{where}: tensor {tensor.name[:80]} has dims {list(tensor.dims)[:4]}")
        layer = int(match["layer"])
        if layer >= MAX_LAYERS:
            raise BadInput(f"{where}: tensor {tensor.name[:80]} names layer {layer}")
        module = _GGUF_MODULES[match["module"]]
        pairs.setdefault((layer, module), {})[match["side"]] = tensor.dims
        modules.add(module)
        layers = max(layers, layer + 1)
        types.add(tensor.ggml_type)
        total += tensor.n_bytes
        sizes.append(tensor.n_bytes)
    if not pairs:
        raise BadInput(f"{where}: the adapter holds no tensors")
    ranks = set()
    for (layer, module), sides in pairs.items():
        if set(sides) != {"a", "b"}:
            raise BadInput(f"{where}: layer {layer}'s {module} has a lora_a or a lora_b, not both")
        # ggml dims: lora_a is [in, r], lora_b is [r, out].
        a, b = sides["a"], sides["b"]
        if a[1] != b[0]:
            raise BadInput(f"{where}: layer {layer}'s {module} has ranks {a[1]} and {b[0]}")
        ranks.add(_count(a[1], f"layer {layer}'s {module} rank", where))
        hidden = max(hidden, b[1] if module in ("o_proj", "down_proj") else a[0])
    from gguf.constants import GGMLQuantizationType

    dtype = GGMLQuantizationType(max(types)).name if len(types) == 1 else "mixed"
    # llama.cpp scales by alpha / rank, and by 1 where alpha is 0 (not given).
    alpha = (
        float(max(ranks)) if alpha_given == 0 else _number(alpha_given, "adapter.lora.alpha", where)
    )
    return AdapterShape(
        name=name,
        source=source,
        format="gguf",
        rank=max(ranks),
        alpha=alpha,
        target_modules=_ordered(modules),
        dtype=dtype,
        n_bytes=total,
        layers=layers,
        hidden_size=hidden,
        architecture=arch,
        tensor_bytes=tuple(sizes),
    )


def module_widths(shape: ModelShape, module: str) -> tuple[int, int]:
    """(in, out) features of one decoder module of `shape`, whole (before tensor parallel)."""
    q = shape.num_attention_heads * shape.head_dim
    kv = shape.num_kv_heads * shape.head_dim
    widths = {
        "q_proj": (shape.hidden_size, q),
        "k_proj": (shape.hidden_size, kv),
        "v_proj": (shape.hidden_size, kv),
        "o_proj": (q, shape.hidden_size),
        "gate_proj": (shape.hidden_size, shape.intermediate_size),
        "up_proj": (shape.hidden_size, shape.intermediate_size),
        "down_proj": (shape.intermediate_size, shape.hidden_size),
    }
    return widths[module]


def _same_model(named: str, served: str) -> bool:
    """Two model names for one model: a Hub id compared without its revision or case, a path by
    its last part (a local copy of `org/name` is often the folder `name`)."""

    def key(text: str) -> str:
        return text.split("@", 1)[0].rstrip("/").rsplit("/", 1)[-1].lower()

    return key(named) == key(served)


def adapter_refusal(
    adapter: AdapterShape,
    shape: ModelShape,
    *,
    served: str,
    gguf_architecture: str | None = None,
    max_lora_rank: int | None = None,
) -> str | None:
    """Why `adapter` cannot serve on the model `served` of `shape`, in one sentence; None if it can.

    `gguf_architecture`: the base GGUF's `general.architecture`, where the base is a GGUF.
    """
    head = f"adapter {adapter.name!r}"
    if adapter.hidden_size != shape.hidden_size:
        return (
            f"{head} was made for a hidden size of {adapter.hidden_size}, "
            f"and {served} has {shape.hidden_size}"
        )
    if adapter.layers > shape.num_layers:
        return f"{head} adapts {adapter.layers} layers, and {served} has {shape.num_layers}"
    for module in adapter.target_modules:
        if shape.is_moe and module not in ATTENTION:
            return f"{head} adapts {module}, and {served}'s feed-forward layers are experts"
    if adapter.base_model and not _same_model(adapter.base_model, served):
        return f"{head} was trained on {adapter.base_model}, not on {served}"
    if adapter.architecture and gguf_architecture and adapter.architecture != gguf_architecture:
        return f"{head} is a {adapter.architecture} adapter, and {served} is a {gguf_architecture} model"
    if max_lora_rank is not None and adapter.rank > max_lora_rank:
        return f"{head} has rank {adapter.rank}, above max_lora_rank {max_lora_rank}"
    return None
