"""A GGUF file's header read a range at a time, and the shape it describes.

`gguf.GGUFReader` maps a whole file; a planner looking at a 40 GiB
quantisation on the Hub must not download it. This parser walks the header
(magic, key/value metadata, tensor descriptions) over any `read(offset,
length)` function — a local file or HTTP range requests — fetching in chunks
and stepping over large numeric arrays (token scores, token types) without
fetching them. Value types, key names and block sizes come from the `gguf`
package's constants, so new quantisation types are known when `gguf` knows them.
"""

from __future__ import annotations

import re
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gguf.constants import (
    GGML_QUANT_SIZES,
    GGUF_MAGIC,
    GGMLQuantizationType,
    GGUFValueType,
    Keys,
    LlamaFileType,
)

from llmgw_core.errors import BadInput
from llmgw_core.model.config_numbers import MAX_LAYERS, bounded_count
from llmgw_core.model.model_shape import FULL, SLIDING, MlaShape, ModelShape, check_shape
from llmgw_core.model.quantization import Quantization

ReadRange = Callable[[int, int], bytes]

FIRST_CHUNK_BYTES = 1 << 20
MAX_HEADER_BYTES = 96 << 20
SMALL_ARRAY_ITEMS = 4096  # arrays longer than this keep only their type and length

_SCALARS: dict[GGUFValueType, str] = {
    GGUFValueType.UINT8: "<B",
    GGUFValueType.INT8: "<b",
    GGUFValueType.UINT16: "<H",
    GGUFValueType.INT16: "<h",
    GGUFValueType.UINT32: "<I",
    GGUFValueType.INT32: "<i",
    GGUFValueType.FLOAT32: "<f",
    GGUFValueType.BOOL: "<?",
    GGUFValueType.UINT64: "<Q",
    GGUFValueType.INT64: "<q",
    GGUFValueType.FLOAT64: "<d",
}
_LAYER = re.compile(r"^blk\.(\d+)\.")


@dataclass(frozen=True)
class LongArray:
    """An array too long to keep (a tokenizer's vocabulary): its item type and length."""

    item_type: int
    length: int


@dataclass(frozen=True)
class GgufTensor:
    """One tensor's description: name, dimensions, ggml type and bytes in the file."""

    name: str
    dims: tuple[int, ...]
    ggml_type: int
    offset: int
    n_bytes: int


@dataclass(frozen=True)
class GgufHeader:
    """A GGUF header: version, metadata, tensors, and how many bytes reading it fetched."""

    version: int
    metadata: dict[str, Any]
    tensors: tuple[GgufTensor, ...]
    data_offset: int
    bytes_fetched: int = 0
    fetches: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def architecture(self) -> str:
        """`general.architecture` ("llama", "qwen2", "gpt-oss" ...)."""
        return str(self.metadata.get(Keys.General.ARCHITECTURE, ""))

    def tensor_bytes(self) -> int:
        """Bytes of every tensor described here."""
        return sum(t.n_bytes for t in self.tensors)


class _Cursor:
    """Sequential reads over a range reader, fetching in growing chunks."""

    def __init__(self, read: ReadRange, where: str) -> None:
        self._read = read
        self._where = where
        self._start = 0
        self._buffer = b""
        self.position = 0
        self.fetched = 0
        self.fetches = 0

    def _ensure(self, size: int) -> None:
        end = self._start + len(self._buffer)
        if self.position >= self._start and self.position + size <= end:
            return
        if self.position + size > MAX_HEADER_BYTES:
            raise BadInput(
                f"{self._where}: the GGUF header runs past {MAX_HEADER_BYTES >> 20} MiB",
                "the file is not a GGUF model or is damaged",
            )
        if not (self._start <= self.position <= end):
            self._start, self._buffer, end = self.position, b"", self.position
        want = max(size - (end - self.position), FIRST_CHUNK_BYTES << min(self.fetches, 3))
        chunk = self._read(end, want)
        self.fetched += len(chunk)
        self.fetches += 1
        self._buffer = self._buffer[self.position - self._start :] + chunk
        self._start = self.position
        if self.position + size > self._start + len(self._buffer):
            raise BadInput(
                f"{self._where}: the file ends inside its GGUF header",
                "the download is truncated or the file is not GGUF",
            )

    def take(self, size: int) -> bytes:
        """The next `size` bytes."""
        self._ensure(size)
        offset = self.position - self._start
        self.position += size
        return self._buffer[offset : offset + size]

    def skip(self, size: int) -> None:
        """Step over `size` bytes without fetching them."""
        self.position += size

    def unpack(self, fmt: str) -> Any:
        """The next value of a `struct` format."""
        return struct.unpack(fmt, self.take(struct.calcsize(fmt)))[0]

    def string(self) -> str:
        """The next GGUF string (64-bit length, then UTF-8 bytes)."""
        length = self.unpack("<Q")
        if length > 1 << 24:
            raise BadInput(
                f"{self._where}: a GGUF string claims {length} bytes", "the file is damaged"
            )
        return self.take(length).decode("utf-8", errors="replace")


MAX_ARRAY_DEPTH = 4
"""Arrays of arrays nest this deep at most: real files nest none (a token list is flat)."""


def _value(cursor: _Cursor, value_type: int, where: str, depth: int = 0) -> Any:
    try:
        kind = GGUFValueType(value_type)
    except ValueError:
        raise BadInput(
            f"{where}: unknown GGUF value type {value_type}", "the file is damaged"
        ) from None
    if kind == GGUFValueType.STRING:
        return cursor.string()
    if kind == GGUFValueType.ARRAY:
        if depth >= MAX_ARRAY_DEPTH:
            raise BadInput(
                f"{where}: GGUF arrays nested more than {MAX_ARRAY_DEPTH} deep",
                "the file is damaged",
            )
        item_type = cursor.unpack("<I")
        length = cursor.unpack("<Q")
        item_kind = GGUFValueType(item_type) if item_type in set(GGUFValueType) else None
        if item_kind is None:
            raise BadInput(f"{where}: unknown GGUF array type {item_type}", "the file is damaged")
        if item_kind in _SCALARS and length > SMALL_ARRAY_ITEMS:
            cursor.skip(length * struct.calcsize(_SCALARS[item_kind]))
            return LongArray(item_type, length)
        if length > SMALL_ARRAY_ITEMS:
            for _ in range(length):
                _value(cursor, item_type, where, depth + 1)
            return LongArray(item_type, length)
        return [_value(cursor, item_type, where, depth + 1) for _ in range(length)]
    return cursor.unpack(_SCALARS[kind])


def read_gguf_header(read: ReadRange, *, where: str = "GGUF file") -> GgufHeader:
    """Parse a GGUF header through `read(offset, length)`.

    Raises:
        BadInput: when the bytes are not a GGUF header, in one sentence.
    """
    cursor = _Cursor(read, where)
    magic = cursor.unpack("<I")
    if magic != GGUF_MAGIC:
        raise BadInput(
            f"{where} is not a GGUF file (bad magic)", "check the file name and download"
        )
    version = cursor.unpack("<I")
    if version not in (2, 3):
        raise BadInput(
            f"{where}: GGUF version {version} is not supported", "llmgw reads versions 2 and 3"
        )
    tensor_count = cursor.unpack("<Q")
    kv_count = cursor.unpack("<Q")
    if tensor_count > 1 << 20 or kv_count > 1 << 20:
        raise BadInput(f"{where}: the GGUF header counts are implausible", "the file is damaged")
    metadata: dict[str, Any] = {}
    for _ in range(kv_count):
        key = cursor.string()
        metadata[key] = _value(cursor, cursor.unpack("<I"), where)
    infos = []
    for _ in range(tensor_count):
        name = cursor.string()
        n_dims = cursor.unpack("<I")
        dims = tuple(cursor.unpack("<Q") for _ in range(n_dims))
        ggml_type = cursor.unpack("<I")
        offset = cursor.unpack("<Q")
        infos.append((name, dims, ggml_type, offset))
    alignment = metadata.get(Keys.General.ALIGNMENT)
    if isinstance(alignment, bool) or not isinstance(alignment, int) or alignment <= 0:
        alignment = 32
    data_offset = -(-cursor.position // alignment) * alignment
    tensors = tuple(
        GgufTensor(name, dims, ggml_type, offset, _tensor_bytes(dims, ggml_type, where))
        for name, dims, ggml_type, offset in infos
    )
    return GgufHeader(
        version=version,
        metadata=metadata,
        tensors=tensors,
        data_offset=data_offset,
        bytes_fetched=cursor.fetched,
        fetches=cursor.fetches,
    )


def _tensor_bytes(dims: tuple[int, ...], ggml_type: int, where: str) -> int:
    try:
        block, type_size = GGML_QUANT_SIZES[GGMLQuantizationType(ggml_type)]
    except (ValueError, KeyError):
        raise BadInput(
            f"{where}: unknown ggml tensor type {ggml_type}", "update the gguf package"
        ) from None
    elements = 1
    for d in dims:
        elements *= d
    return elements // block * type_size


@dataclass(frozen=True)
class GgufTensorBytes:
    """Where a GGUF set's tensor bytes sit: per layer, the embeddings and the output head."""

    by_layer: tuple[int, ...]
    embedding: int
    output: int
    total: int
    parameters: int


def tensor_bytes_by_layer(headers: list[GgufHeader], num_layers: int) -> GgufTensorBytes:
    """Sum the tensors of every part of a set by layer (`blk.N.`), embeddings and output."""
    by_layer = [0] * num_layers
    embedding = output = total = params = 0
    for header in headers:
        for tensor in header.tensors:
            total += tensor.n_bytes
            count = 1
            for d in tensor.dims:
                count *= d
            params += count
            match = _LAYER.match(tensor.name)
            if match and int(match.group(1)) < num_layers:
                by_layer[int(match.group(1))] += tensor.n_bytes
            elif tensor.name.startswith("token_embd"):
                embedding += tensor.n_bytes
            else:
                output += tensor.n_bytes
    return GgufTensorBytes(tuple(by_layer), embedding, output, total, params)


def _key(metadata: dict[str, Any], template: str, arch: str) -> Any:
    return metadata.get(template.format(arch=arch))


_BOUND_NAMES = {
    Keys.LLM.BLOCK_COUNT: "num_hidden_layers",
    Keys.LLM.EMBEDDING_LENGTH: "hidden_size",
    Keys.Attention.HEAD_COUNT: "num_attention_heads",
    Keys.Attention.HEAD_COUNT_KV: "num_key_value_heads",
    Keys.Attention.KEY_LENGTH: "head_dim",
    Keys.LLM.VOCAB_SIZE: "vocab_size",
    Keys.LLM.CONTEXT_LENGTH: "max_position_embeddings",
    Keys.LLM.EXPERT_COUNT: "num_experts",
    Keys.LLM.EXPERT_USED_COUNT: "num_experts_per_tok",
    Keys.LLM.FEED_FORWARD_LENGTH: "intermediate_size",
    Keys.LLM.EXPERT_FEED_FORWARD_LENGTH: "moe_intermediate_size",
    Keys.Attention.KV_LORA_RANK: "kv_lora_rank",
    Keys.Attention.Q_LORA_RANK: "q_lora_rank",
    Keys.Rope.DIMENSION_COUNT: "qk_rope_head_dim",
    Keys.Attention.SLIDING_WINDOW: "sliding_window",
}
"""Each hyper-parameter key llama.cpp writes, by the config.json name its bound is kept under."""


def _count(metadata: dict[str, Any], template: str, arch: str, where: str) -> int | None:
    """A count that may be per layer (a list): its largest value; None when absent or zero.

    Every value is a whole number within the bound `config.json` is held to
    (`config_numbers.bounded_count`): NaN, infinite, negative or huge is one sentence.
    """
    name = template.format(arch=arch)
    value = metadata.get(name)
    if value is None or isinstance(value, str):
        return None
    values = value if isinstance(value, list) else [value]
    bound_name = _BOUND_NAMES.get(template, name)
    numbers = [
        bounded_count(v, bound_name, where, name)
        for v in values
        if not isinstance(v, bool | str | list)
    ]
    largest = max(numbers, default=0)
    return largest or None


_MODEL_TYPES = {
    "gemma3": "gemma3_text",
    "qwen3moe": "qwen3_moe",
    "qwen2moe": "qwen2_moe",
    "gpt-oss": "gpt_oss",
    "deepseek2": "deepseek_v3",
    "llama4": "llama4_text",
}


def shape_from_gguf(header: GgufHeader, *, where: str = "GGUF file") -> ModelShape:
    """The model shape a GGUF header describes (llama.cpp's own hyper-parameter keys).

    Raises:
        BadInput: when the header lacks the keys a language model has.
    """
    metadata = header.metadata
    arch = header.architecture
    if not arch:
        raise BadInput(f"{where} names no general.architecture", "the file is not a GGUF model")
    layers = _count(metadata, Keys.LLM.BLOCK_COUNT, arch, where)
    hidden = _count(metadata, Keys.LLM.EMBEDDING_LENGTH, arch, where)
    heads = _count(metadata, Keys.Attention.HEAD_COUNT, arch, where)
    if not layers or not hidden or not heads:
        raise BadInput(
            f"{where}: architecture {arch} has no block_count, embedding_length or head_count",
            "it is not a language model llmgw can size",
        )
    if layers > MAX_LAYERS:
        raise BadInput(
            f"{where}: block_count is {layers}, more than any model has", "the file is damaged"
        )
    kv_heads = _count(metadata, Keys.Attention.HEAD_COUNT_KV, arch, where) or heads
    head_dim = _count(metadata, Keys.Attention.KEY_LENGTH, arch, where) or hidden // heads
    vocab = _count(metadata, Keys.LLM.VOCAB_SIZE, arch, where)
    tokens = metadata.get(Keys.Tokenizer.LIST)
    if not vocab:
        vocab = (
            tokens.length
            if isinstance(tokens, LongArray)
            else len(tokens)
            if isinstance(tokens, list)
            else 0
        )
    experts = _count(metadata, Keys.LLM.EXPERT_COUNT, arch, where)
    experts = experts if experts and experts > 1 else None
    used = _count(metadata, Keys.LLM.EXPERT_USED_COUNT, arch, where)
    ffn = _count(metadata, Keys.LLM.FEED_FORWARD_LENGTH, arch, where) or 4 * hidden
    expert_ffn = _count(metadata, Keys.LLM.EXPERT_FEED_FORWARD_LENGTH, arch, where)
    kv_lora = _count(metadata, Keys.Attention.KV_LORA_RANK, arch, where)
    rope_dims = _count(metadata, Keys.Rope.DIMENSION_COUNT, arch, where)
    mla = None
    if kv_lora:
        mla = MlaShape(
            kv_lora_rank=int(kv_lora),
            qk_rope_head_dim=int(rope_dims or 64),
            q_lora_rank=_count(metadata, Keys.Attention.Q_LORA_RANK, arch, where),
        )
    window = _count(metadata, Keys.Attention.SLIDING_WINDOW, arch, where)
    kinds = _gguf_layer_pattern(metadata, arch, layers, window)
    file_type = metadata.get(Keys.General.FILE_TYPE)
    shape = ModelShape(
        architecture=arch,
        model_type=_MODEL_TYPES.get(arch, arch),
        num_layers=layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        vocab_size=int(vocab),
        max_context=_count(metadata, Keys.LLM.CONTEXT_LENGTH, arch, where) or 2048,
        dtype="float16",
        intermediate_size=ffn,
        num_experts=experts,
        experts_per_token=int(used) if experts and used else None,
        moe_intermediate_size=int(expert_ffn)
        if experts and expert_ffn
        else (ffn if experts else None),
        mla=mla,
        layer_attention=kinds,
        sliding_window=window if SLIDING in kinds else None,
        attention_chunk_size=None,
        quantization=gguf_file_quantization(file_type),
        tie_word_embeddings=not any(t.name == "output.weight" for t in header.tensors),
        rotary_dim=int(rope_dims) if rope_dims else None,
    )
    return check_shape(shape, where)


def _gguf_layer_pattern(
    metadata: dict[str, Any], arch: str, layers: int, window: int | None
) -> tuple[str, ...]:
    if not window:
        return (FULL,) * layers
    pattern = _key(metadata, Keys.Attention.SLIDING_WINDOW_PATTERN, arch)
    if isinstance(pattern, list) and len(pattern) == layers:
        return tuple(SLIDING if flag else FULL for flag in pattern)
    if isinstance(pattern, int) and pattern > 0:
        return tuple(FULL if (i + 1) % pattern == 0 else SLIDING for i in range(layers))
    every = {"gemma3": 6, "gemma2": 2, "gpt-oss": 2, "cohere2": 4}.get(arch)
    if every is None:
        return (SLIDING,) * layers
    if arch in ("gemma2", "gpt-oss"):
        return tuple(SLIDING if i % 2 == 0 else FULL for i in range(layers))
    return tuple(FULL if (i + 1) % every == 0 else SLIDING for i in range(layers))


def gguf_file_quantization(file_type: Any) -> Quantization | None:
    """The `general.file_type` as a quantisation ("Q4_K_M"), None when absent."""
    if not isinstance(file_type, int):
        return None
    try:
        name = LlamaFileType(file_type).name
    except ValueError:
        return None
    name = name.removeprefix("MOSTLY_").removeprefix("ALL_")
    from llmgw_core.model.artifacts import GGUF_NOMINAL_BITS

    return Quantization(method=name, bits=GGUF_NOMINAL_BITS.get(name, 0.0))
