"""A repository's weight files, grouped into what can be served (pure).

An artifact is one servable set of weights: the repository's safetensors (the
"original"), or one GGUF quantisation (a single file or every part of a split
set). Sizes are the real bytes of the files; a safetensors index's
`total_size` is preferred to file sizes because file sizes include each
shard's JSON header.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from llmgw_core.errors import BadInput
from llmgw_core.model.model_shape import ModelShape
from llmgw_core.model.quantization import Quantization

GIB = 1024**3


@dataclass(frozen=True)
class RepoFile:
    """One file of a repository listing: repo-relative path and size in bytes (None if unknown)."""

    path: str
    size: int | None


@dataclass(frozen=True)
class Artifact:
    """One servable set of weights.

    Attributes:
        name: "original" for the repository's safetensors; the quantisation for GGUF ("Q4_K_M").
        format: "safetensors" | "gguf".
        files: repo-relative paths (every part of a split GGUF set, in order).
        size_bytes: exact bytes of the weights.
        param_count: parameters, when known (safetensors metadata, GGUF header, or counted).
        quantization: safetensors: from the config; GGUF: the type name in `method`, BPW in `bits`.
        shape: the model's shape (GGUF: from the file's header once read).
        tensor_bytes_by_layer: GGUF only, once its header is read: bytes of each
            `blk.N` layer, in order; `embedding_bytes` / `output_bytes` hold the rest.
    """

    name: str
    format: str
    files: tuple[str, ...]
    size_bytes: int
    param_count: int | None = None
    quantization: Quantization | None = None
    shape: ModelShape | None = None
    tensor_bytes_by_layer: tuple[int, ...] = ()
    embedding_bytes: int | None = None
    output_bytes: int | None = None
    gguf_tensors: tuple[tuple[Any, ...], ...] = ()
    """GGUF only, once read: each part's tensors (`GgufTensor`: name, dims, type, offset, bytes)."""

    @property
    def size_gib(self) -> float:
        """Size in GiB (2^30 bytes)."""
        return self.size_bytes / GIB


# GGUF type names as llama.cpp's quantize tool and the big uploaders spell them.
_GGUF_QUANT = re.compile(
    r"(?<![A-Za-z0-9])("
    r"IQ1_[SM]|IQ2_(?:XXS|XS|S|M)|IQ3_(?:XXS|XS|S|M)|IQ4_(?:XS|NL)|"
    r"Q2_K(?:_[SLM]|_XL)?|Q3_K(?:_[SML]|_XL)?|Q4_K(?:_[SML]|_XL)?|Q5_K(?:_[SML]|_XL)?|Q6_K(?:_L|_XL)?|"
    r"Q4_0(?:_4_4|_4_8|_8_8)?|Q4_1|Q5_0|Q5_1|Q8_0|Q8_K_XL|TQ1_0|TQ2_0|MXFP4(?:_MOE)?|BF16|F16|F32"
    r")(?![A-Za-z0-9])",
    re.IGNORECASE,
)
_SPLIT = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)

# Nominal bits per weight of each GGUF type (llama.cpp's block sizes: e.g. Q4_K
# stores 144 bytes per 256 weights = 4.5 bits). Mixed recipes (Q4_K_M) average higher.
GGUF_NOMINAL_BITS = {
    "F32": 32.0,
    "F16": 16.0,
    "BF16": 16.0,
    "Q8_0": 8.5,
    "Q6_K": 6.5625,
    "Q5_K_M": 5.69,
    "Q5_K_S": 5.54,
    "Q5_0": 5.5,
    "Q5_1": 6.0,
    "Q4_K_M": 4.85,
    "Q4_K_S": 4.58,
    "Q4_0": 4.5,
    "Q4_1": 5.0,
    "IQ4_XS": 4.25,
    "IQ4_NL": 4.5,
    "Q3_K_L": 4.27,
    "Q3_K_M": 3.91,
    "Q3_K_S": 3.5,
    "Q2_K": 3.35,
    "MXFP4": 4.25,
}


def gguf_quant_name(path: str) -> str | None:
    """The quantisation a GGUF file name carries ("Q4_K_M"), None when it names none."""
    name = path.rsplit("/", 1)[-1]
    found = _GGUF_QUANT.findall(name)
    if not found:
        folder = path.rsplit("/", 1)[0] if "/" in path else ""
        found = _GGUF_QUANT.findall(folder)
    return found[-1].upper() if found else None


def is_projector(path: str) -> bool:
    """True for a multimodal projector GGUF (`mmproj-*.gguf`), which is not a language model."""
    return "mmproj" in path.rsplit("/", 1)[-1].lower()


def safetensors_set(files: Iterable[RepoFile], shard_names: Iterable[str] = ()) -> list[RepoFile]:
    """The files that hold the repository's safetensors weights.

    The index's shard names win when known. Otherwise the top-level
    `*.safetensors` files, preferring the `model*` set when a repository also
    ships Mistral's `consolidated.safetensors` copy of the same weights.
    Other formats in the listing (`consolidated.*.pt`, `*.bin`) are not counted,
    unless a repository has no safetensors at all: then its `pytorch_model*.bin`.
    """
    files = list(files)
    listing = [f for f in files if f.path.endswith(".safetensors")]
    if not listing:
        # Older repositories ship only PyTorch pickles; engines load them the same way.
        listing = [f for f in files if f.path.endswith(".bin") and "pytorch_model" in f.path]
    wanted = set(shard_names)
    if wanted:
        chosen = [f for f in listing if f.path in wanted]
        if chosen:
            return sorted(chosen, key=lambda f: f.path)
    top = [f for f in listing if "/" not in f.path]
    if not top:
        return []
    model_files = [f for f in top if f.path.startswith(("model", "pytorch_model"))]
    return sorted(model_files or top, key=lambda f: f.path)


def gguf_sets(files: Iterable[RepoFile]) -> dict[str, list[RepoFile]]:
    """GGUF files grouped by quantisation; each split set becomes one group, in part order."""
    groups: dict[str, list[RepoFile]] = {}
    for file in files:
        if not file.path.lower().endswith(".gguf") or is_projector(file.path):
            continue
        quant = gguf_quant_name(file.path) or _SPLIT.sub("", file.path.rsplit("/", 1)[-1])
        base = _SPLIT.sub("", file.path)
        key = quant
        existing = groups.get(key)
        if existing and _SPLIT.sub("", existing[0].path) != base:
            key = base.rsplit("/", 1)[-1].removesuffix(".gguf")
        groups.setdefault(key, []).append(file)
    sets = {name: sorted(parts, key=lambda f: f.path) for name, parts in groups.items()}
    for name, parts in sets.items():
        _check_split(name, parts)
    return sets


def _check_split(name: str, parts: list[RepoFile]) -> None:
    """Refuse a split GGUF set with a part missing, or parts that disagree on their count.

    Raises:
        BadInput: naming the set and the part missing.
    """
    numbered = [_SPLIT.search(part.path) for part in parts]
    if not any(numbered):
        return
    if not all(numbered):
        raise BadInput(f"the GGUF set {name} mixes split parts with whole files")
    counts = {int(match.group(2)) for match in numbered if match}
    if len(counts) != 1:
        raise BadInput(f"the parts of the GGUF set {name} disagree on how many there are")
    (count,) = counts
    have = {int(match.group(1)) for match in numbered if match}
    missing = sorted(set(range(1, count + 1)) - have)
    if missing or len(parts) != count:
        raise BadInput(
            f"the GGUF set {name} is split in {count} parts and part {missing[0] if missing else '?'} "
            "is missing",
            "download every part, or remove the others",
        )


def artifacts_from_listing(
    files: Iterable[RepoFile],
    *,
    shape: ModelShape | None,
    index_total_size: int | None = None,
    index_shards: Iterable[str] = (),
    param_count: int | None = None,
) -> tuple[Artifact, ...]:
    """Every servable artifact of a repository listing.

    Args:
        files: the listing (path, size).
        shape: the shape from config.json, None for a GGUF-only repository.
        index_total_size: `metadata.total_size` of `model.safetensors.index.json`.
        index_shards: the shard names of the index's `weight_map`.
        param_count: parameters from safetensors metadata, when the Hub gives them.
    """
    listing = list(files)
    artifacts: list[Artifact] = []
    shards = safetensors_set(listing, index_shards)
    if shards and shape is not None:
        sizes = [f.size for f in shards]
        size = index_total_size or (sum(s for s in sizes if s) if all(sizes) else None)
        if size:
            artifacts.append(
                Artifact(
                    name="original",
                    format="safetensors",
                    files=tuple(f.path for f in shards),
                    size_bytes=int(size),
                    param_count=param_count,
                    quantization=shape.quantization,
                    shape=shape,
                )
            )
    for quant, parts in gguf_sets(listing).items():
        sizes = [p.size for p in parts]
        if not all(sizes):
            continue
        total = sum(s for s in sizes if s)
        artifacts.append(
            Artifact(
                name=quant,
                format="gguf",
                files=tuple(p.path for p in parts),
                size_bytes=total,
                quantization=Quantization(
                    method=quant, bits=GGUF_NOMINAL_BITS.get(quant.upper(), 0.0)
                ),
            )
        )
    return tuple(artifacts)
