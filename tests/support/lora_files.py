"""LoRA adapters written as their tools write them: PEFT folders and GGUF files.

`write_peft_adapter` writes `adapter_config.json` as `peft` saves it and an
`adapter_model.safetensors` in the safetensors layout (8 bytes of header
length, the JSON header, the tensors), with `peft`'s tensor names
(`base_model.model.model.layers.N.self_attn.q_proj.lora_A.weight`).
`write_gguf_adapter` writes a GGUF adapter with the `gguf` package, the keys
and tensor names llama.cpp's `convert_lora_to_gguf.py` writes.
"""

from __future__ import annotations

import json
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gguf
import numpy as np

PEFT_MODULES = {
    "q_proj": "self_attn",
    "k_proj": "self_attn",
    "v_proj": "self_attn",
    "o_proj": "self_attn",
    "gate_proj": "mlp",
    "up_proj": "mlp",
    "down_proj": "mlp",
}
GGUF_NAMES = {
    "q_proj": "attn_q",
    "k_proj": "attn_k",
    "v_proj": "attn_v",
    "o_proj": "attn_output",
    "gate_proj": "ffn_gate",
    "up_proj": "ffn_up",
    "down_proj": "ffn_down",
}


@dataclass(frozen=True)
class Widths:
    """The widths of a Llama-like model, as an adapter's tensors follow them."""

    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    layers: int

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads

    def module(self, name: str) -> tuple[int, int]:
        """(in, out) of one module."""
        q, kv = self.heads * self.head_dim, self.kv_heads * self.head_dim
        return {
            "q_proj": (self.hidden, q),
            "k_proj": (self.hidden, kv),
            "v_proj": (self.hidden, kv),
            "o_proj": (q, self.hidden),
            "gate_proj": (self.hidden, self.intermediate),
            "up_proj": (self.hidden, self.intermediate),
            "down_proj": (self.intermediate, self.hidden),
        }[name]


def safetensors_bytes(tensors: dict[str, tuple[str, tuple[int, ...]]]) -> bytes:
    """A safetensors file of zero-filled tensors: name → (dtype, shape)."""
    widths = {"F32": 4, "F16": 2, "BF16": 2}
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, (dtype, shape) in tensors.items():
        size = int(np.prod(shape)) * widths[dtype]
        header[name] = {
            "dtype": dtype,
            "shape": list(shape),
            "data_offsets": [offset, offset + size],
        }
        offset += size
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw + bytes(offset)


def write_peft_adapter(
    folder: Path,
    widths: Widths,
    *,
    rank: int = 8,
    alpha: float = 16.0,
    targets: tuple[str, ...] = ("q_proj", "v_proj"),
    base_model: str | None = None,
    dtype: str = "F16",
    config: dict[str, Any] | None = None,
) -> Path:
    """A PEFT LoRA adapter folder; `config` replaces keys of the config it writes."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    written = {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "r": rank,
        "lora_alpha": alpha,
        "lora_dropout": 0.05,
        "target_modules": list(targets),
        "bias": "none",
        "base_model_name_or_path": base_model,
        "fan_in_fan_out": False,
        "inference_mode": True,
    }
    written.update(config or {})
    (folder / "adapter_config.json").write_text(json.dumps(written))
    tensors = {}
    for layer in range(widths.layers):
        for module in targets:
            width_in, width_out = widths.module(module)
            stem = f"base_model.model.model.layers.{layer}.{PEFT_MODULES[module]}.{module}"
            tensors[f"{stem}.lora_A.weight"] = (dtype, (rank, width_in))
            tensors[f"{stem}.lora_B.weight"] = (dtype, (width_out, rank))
    (folder / "adapter_model.safetensors").write_bytes(safetensors_bytes(tensors))
    return folder


def write_gguf_adapter(
    path: Path,
    widths: Widths,
    *,
    rank: int = 4,
    alpha: float = 8.0,
    targets: tuple[str, ...] = ("q_proj", "v_proj"),
    architecture: str = "llama",
    dtype: type = np.float32,
    seed: int = 7,
) -> Path:
    """A GGUF LoRA adapter, as `convert_lora_to_gguf.py` writes one (small random values)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    writer = gguf.GGUFWriter(path, architecture)
    writer.add_string("general.type", "adapter")
    writer.add_string("adapter.type", "lora")
    writer.add_float32("adapter.lora.alpha", alpha)
    for layer in range(widths.layers):
        for module in targets:
            width_in, width_out = widths.module(module)
            stem = f"blk.{layer}.{GGUF_NAMES[module]}.weight"
            # numpy shapes (rows, columns): lora_a [rank, in], lora_b [out, rank].
            writer.add_tensor(
                f"{stem}.lora_a", (rng.standard_normal((rank, width_in)) * 0.01).astype(dtype)
            )
            writer.add_tensor(
                f"{stem}.lora_b", (rng.standard_normal((width_out, rank)) * 0.01).astype(dtype)
            )
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


TINY_GGUF = Widths(hidden=64, intermediate=128, heads=4, kv_heads=2, layers=2)
"""The widths of `tiny_gguf`'s model."""


def write_loud_gguf_adapter(path: Path, *, rank: int = 8, seed: int = 1) -> Path:
    """A GGUF adapter for `tiny_gguf`'s model that changes what it answers.

    The model's attention outputs and FFN down projections are zero, which is
    what keeps its reply fixed; this adapter gives both large random deltas
    (alpha 0: llama.cpp scales them by 1), so with it applied the model no
    longer says `tiny_gguf.REPLY` (it repeats a word of it), and without it, it does.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_string("general.type", "adapter")
    writer.add_string("adapter.type", "lora")
    writer.add_float32("adapter.lora.alpha", 0.0)
    widths = TINY_GGUF
    for layer in range(widths.layers):
        for module in ("o_proj", "down_proj"):
            width_in, width_out = widths.module(module)
            stem = f"blk.{layer}.{GGUF_NAMES[module]}.weight"
            writer.add_tensor(
                f"{stem}.lora_a", (rng.standard_normal((rank, width_in)) * 3).astype(np.float32)
            )
            writer.add_tensor(
                f"{stem}.lora_b", (rng.standard_normal((width_out, rank)) * 3).astype(np.float32)
            )
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
