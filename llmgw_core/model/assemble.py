"""A model as the planner sees it, assembled from what was read of it (pure).

`source` (which reads a Hub repository or a local path), `hub` and `local`
hand this module what they read — config text, a file listing, the
safetensors index, GGUF headers — and get a `ModelInfo` back. It imports
none of them, so each reader imports it one way only.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmgw_core.errors import BadInput, shown_value
from llmgw_core.model.artifacts import Artifact, RepoFile, artifacts_from_listing, gguf_quant_name
from llmgw_core.model.model_shape import ModelShape
from llmgw_core.model.numbers import whole_number
from llmgw_core.model.shape import is_full_config, shape_from_config

# Small JSON files that can change how the weights are read.
EXTRA_CONFIG_FILES = ("hf_quant_config.json", "quantize_config.json")


@dataclass(frozen=True)
class ModelInfo:
    """A model as the planner sees it: its shape and every servable artifact.

    Attributes:
        ref: what the user typed.
        repo_id: "org/name" for a Hub model, None for a local one.
        revision: the Hub revision asked for (None = the default branch).
        local_dir: the directory for a local model.
        shape: None for a pure GGUF repository until a header is read.
        artifacts: the safetensors set and every GGUF quantisation.
    """

    ref: str
    repo_id: str | None
    revision: str | None
    local_dir: Path | None
    shape: ModelShape | None
    artifacts: tuple[Artifact, ...]

    @property
    def any_shape(self) -> ModelShape | None:
        """Its own shape, else the first artifact's (a GGUF-only repository's header)."""
        return self.shape or next((a.shape for a in self.artifacts if a.shape), None)


def parse_config_text(text: str, where: str) -> dict[str, Any]:
    """Parse a config file's text, or say in one sentence why it is not JSON."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BadInput(
            f"{where} is not valid JSON (line {exc.lineno}: {exc.msg})",
            "the file is malformed; check the repository",
        ) from None
    except RecursionError:
        raise BadInput(f"{where} is nested too deeply to be a model's configuration") from None
    except ValueError as exc:  # a number past Python's digit limit, and the like
        raise BadInput(f"{where} holds a value JSON cannot carry ({exc})") from None
    if not isinstance(value, dict):
        raise BadInput(f"{where} is not a JSON object")
    if _depth(value) > MAX_JSON_DEPTH:
        raise BadInput(f"{where} nests values more than {MAX_JSON_DEPTH} deep: no model's does")
    return value


MAX_JSON_DEPTH = 32
"""A model's JSON files nest a few levels (`text_config.rope_scaling`); deeper is hostile."""


def _depth(value: Any) -> int:
    """How deep lists and maps nest in `value` (iterative: any depth is measured safely)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            deepest = max(deepest, depth)
            if depth > MAX_JSON_DEPTH:
                return depth
            stack.extend(
                (inner, depth + 1) for inner in (item.values() if isinstance(item, dict) else item)
            )
    return deepest


def shape_or_none(
    config: dict[str, Any] | None, extra: dict[str, dict[str, Any]], where: str
) -> ModelShape | None:
    """The shape of a full config; None for a GGUF repository's stub config."""
    if config is None or not is_full_config(config):
        return None
    try:
        return shape_from_config(config, extra_files=extra)
    except BadInput as exc:
        raise BadInput(f"{where}: {exc.message.removeprefix('config.json: ')}", exc.fix) from None


MAX_MODEL_BYTES = 2**50
"""A petabyte: more than any checkpoint; a larger size in an index is a damaged file."""
MAX_PARAMETERS = 2**46


def read_index(index: Any) -> tuple[int | None, set[str], int | None]:
    """`model.safetensors.index.json` read by its schema: total size, shard files, parameters.

    Raises:
        BadInput: one sentence naming the file and the field that is wrong.
    """
    where = "model.safetensors.index.json"
    if index is None:
        return None, set(), None
    if not isinstance(index, dict):
        raise BadInput(f"{where} is not a JSON object")
    metadata = index.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise BadInput(f"{where}: metadata is {shown_value(metadata)}, not an object")
    total = _count(metadata.get("total_size"), f"{where}: metadata.total_size", MAX_MODEL_BYTES)
    params = _count(
        metadata.get("total_parameters"), f"{where}: metadata.total_parameters", MAX_PARAMETERS
    )
    weight_map = index.get("weight_map") or {}
    if not isinstance(weight_map, dict):
        raise BadInput(f"{where}: weight_map is {shown_value(weight_map)}, not an object")
    shards = set()
    for tensor, shard in weight_map.items():
        if not isinstance(shard, str) or not shard or "\0" in shard or shard.startswith("/"):
            raise BadInput(f"{where}: weight_map[{tensor[:60]!r}] is not a file name")
        shards.add(shard)
    return total, shards, params


def _count(value: Any, what: str, bound: int) -> int | None:
    """A whole, positive number within `bound`, or None when absent."""
    if value is None:
        return None
    number = whole_number(value)
    if number is None:
        raise BadInput(f"{what} is {shown_value(value)}, not a whole number")
    if not 0 < number <= bound:
        raise BadInput(f"{what} is {shown_value(value)}, not a size any model has")
    return number


def listing_artifacts(
    files: list[RepoFile],
    shape: ModelShape | None,
    index: dict[str, Any] | None,
    param_count: int | None,
) -> tuple[Artifact, ...]:
    """Artifacts of a listing, with what the safetensors index says."""
    total, shards, params = read_index(index)
    params = param_count or params
    listed = {f.path for f in files}
    # The index names the shards even where the listing lacks them (an offline
    # cache holds the index but not the weights).
    files = files + [RepoFile(name, None) for name in sorted(shards - listed)]
    no_weights_listed = not any(f.path.endswith(".safetensors") for f in files)
    if total is not None and shape is not None and no_weights_listed:
        # A trimmed index (total_size, no weight_map): the size is still known.
        files = [*files, RepoFile("model.safetensors", None)]
    if params is None and shape is not None:
        from llmgw_core.model.params import count_parameters

        params = count_parameters(shape).total
    return artifacts_from_listing(
        files,
        shape=shape,
        index_total_size=total,
        index_shards=shards,
        param_count=params,
    )


def enrich_gguf(artifact: Artifact, headers: list[Any]) -> Artifact:
    """A GGUF artifact completed from its parts' headers: shape, parameters, bytes per layer."""
    from dataclasses import replace

    from llmgw_core.model.gguf_header import shape_from_gguf, tensor_bytes_by_layer
    from llmgw_core.model.quantization import Quantization

    shape = shape_from_gguf(headers[0], where=artifact.files[0])
    placed = tensor_bytes_by_layer(headers, shape.num_layers)
    bits = placed.total * 8 / placed.parameters if placed.parameters else 0.0
    name = artifact.name
    if gguf_quant_name(artifact.name) is None:
        name = shape.quantization.method if shape.quantization else artifact.name
    return replace(
        artifact,
        name=name,
        shape=shape,
        param_count=placed.parameters,
        quantization=Quantization(method=name, bits=round(bits, 3)),
        tensor_bytes_by_layer=placed.by_layer,
        embedding_bytes=placed.embedding,
        output_bytes=placed.output,
        gguf_tensors=tuple(header.tensors for header in headers),
    )


def scaled_like(artifact: Artifact, measured: Artifact) -> Artifact:
    """A GGUF artifact whose header was not read, apportioned like one that was.

    Every quantisation of a repository shares one shape; only the bytes per
    tensor differ, so the measured artifact's split by layer is scaled to this
    file's real size.
    """
    from dataclasses import replace

    from llmgw_core.model.quantization import Quantization

    if measured.shape is None or not measured.size_bytes:
        return artifact
    ratio = artifact.size_bytes / measured.size_bytes
    params = measured.param_count
    return replace(
        artifact,
        shape=measured.shape,
        param_count=params,
        quantization=Quantization(
            method=artifact.name,
            bits=round(artifact.size_bytes * 8 / params, 3) if params else 0.0,
        ),
        tensor_bytes_by_layer=tuple(int(b * ratio) for b in measured.tensor_bytes_by_layer),
        embedding_bytes=int((measured.embedding_bytes or 0) * ratio),
        output_bytes=int((measured.output_bytes or 0) * ratio),
    )


def with_gguf_headers(
    artifacts: tuple[Artifact, ...], read_headers: Any, *, all_headers: bool
) -> tuple[Artifact, ...]:
    """Fill GGUF artifacts from headers: every one (`all_headers`), or one measured and the rest scaled.

    Args:
        artifacts: the repository's artifacts.
        read_headers: `read_headers(artifact) -> list[GgufHeader]`, one per part.
        all_headers: read every artifact's header (cheap for local files).
    """
    done: list[Artifact] = []
    measured: Artifact | None = None
    for artifact in artifacts:
        if artifact.format != "gguf":
            done.append(artifact)
        elif all_headers or measured is None:
            enriched = enrich_gguf(artifact, read_headers(artifact))
            measured = measured or enriched
            done.append(enriched)
        else:
            done.append(scaled_like(artifact, measured))
    return tuple(done)


def counted_artifact(shape: ModelShape, files: tuple[str, ...] = ()) -> Artifact:
    """The safetensors artifact of a config with no known file sizes: bytes counted from the architecture."""
    from llmgw_core.model.params import count_parameters, weights_bytes_from_params

    params = count_parameters(shape)
    return Artifact(
        name="original",
        format="safetensors",
        files=files,
        size_bytes=weights_bytes_from_params(params, shape),
        param_count=params.total,
        quantization=shape.quantization,
        shape=shape,
    )
