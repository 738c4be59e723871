"""The LoRA adapters a `plan`, `serve` or service names, read and checked against its model.

Each adapter's shape comes from its own files (`model.adapter_source`);
one that does not fit the served model is refused here, in one sentence,
before anything is planned or started (`model.adapters.adapter_refusal`).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from llmgw_core.errors import AdapterRefused, BadInput
from llmgw_core.memory.adapters import LoraSlots, slots_for
from llmgw_core.model.adapters import AdapterShape, adapter_refusal

if TYPE_CHECKING:
    from llmgw_core.model.model_shape import ModelShape
    from llmgw_core.model.source import ModelInfo
    from llmgw_core.serve.args import AdapterArg


def adapter_path(source: str, script_dir: Path) -> str:
    """A local adapter's absolute path (relative ones from the script's folder); a Hub id as is."""
    if source.startswith(("./", "../")):
        return str((script_dir / source).resolve())
    path = Path(source).expanduser()
    if source.startswith(("/", "~")) or path.exists():
        return str(path.resolve())
    return source


def is_local(source: str) -> bool:
    """True for an adapter on this machine (a path), False for a Hub repository."""
    return source.startswith("/")


def checked_slots(
    adapters: Sequence[AdapterArg],
    model: ModelInfo,
    script_dir: Path,
    *,
    max_loras: int | None = None,
    max_lora_rank: int | None = None,
) -> LoraSlots | None:
    """The adapters read from their files and checked against `model`, as the plan's slots.

    Raises:
        AdapterRefused: an adapter that cannot be read, or that does not fit the model.
    """
    if not adapters:
        return None
    try:
        return _checked_slots(adapters, model, script_dir, max_loras, max_lora_rank)
    except AdapterRefused:
        raise
    except BadInput as exc:
        raise AdapterRefused(exc.message, exc.fix) from None


def _checked_slots(
    adapters: Sequence[AdapterArg],
    model: ModelInfo,
    script_dir: Path,
    max_loras: int | None,
    max_lora_rank: int | None,
) -> LoraSlots:
    from llmgw_core.model.adapter_source import load_adapter

    shapes: list[AdapterShape] = []
    served = model.repo_id or model.ref
    for given in adapters:
        try:
            shape = load_adapter(
                given.name, adapter_path(given.source, script_dir), file=given.file
            )
        except BadInput as exc:
            named = f"adapter {given.name!r}"
            if named in exc.message:
                raise
            raise AdapterRefused(f"{named}: {exc.message}", exc.fix) from None
        shapes.append(shape)
        base = _base_for(shape, model)
        if base is None:
            kind = "a GGUF" if shape.format == "gguf" else "a PEFT (safetensors)"
            raise BadInput(
                f"adapter {given.name!r} is {kind} adapter, and {served} has no "
                f"{'GGUF' if shape.format == 'gguf' else 'safetensors'} weights to serve it on",
                "give a GGUF adapter for a GGUF model (convert_lora_to_gguf.py), a PEFT one otherwise",
            )
        refusal = adapter_refusal(
            shape,
            base[0],
            served=served,
            gguf_architecture=base[1],
            max_lora_rank=max_lora_rank,
        )
        if refusal:
            raise BadInput(refusal)
    formats = {s.format for s in shapes}
    if len(formats) > 1:
        raise BadInput(
            "give adapters of one kind: GGUF ones for llama.cpp, PEFT ones for vLLM and SGLang"
        )
    return slots_for(tuple(shapes), max_loras=max_loras, max_lora_rank=max_lora_rank)


def _base_for(adapter: AdapterShape, model: ModelInfo) -> tuple[ModelShape, str | None] | None:
    """The model shape the adapter is checked against, and the GGUF architecture where the
    adapter is a GGUF one; None when the model has no weights of the adapter's kind."""
    wanted = "gguf" if adapter.format == "gguf" else "safetensors"
    for artifact in model.artifacts:
        if artifact.format != wanted:
            continue
        shape = artifact.shape or model.shape
        if shape is None:
            continue
        return shape, shape.architecture if wanted == "gguf" and artifact.shape else None
    return None


def parse_adapter_entries(text: str) -> list[dict[str, str]]:
    """`NAME=SOURCE …` as typed (the wizard's field): `[{name, source}]`.

    Raises:
        BadInput: an entry without `=`, a name no client could ask for, or a name given twice.
    """
    import re

    from llmgw_core.arguments import NAME_PATTERN

    found: list[dict[str, str]] = []
    for entry in text.split():
        name, equals, source = entry.partition("=")
        if not equals or not source:
            raise BadInput(f"adapters: {entry[:40]!r} is not NAME=PATH")
        if len(name) > 64:
            raise BadInput(f"adapters: a name is 64 characters at most, not {len(name)}")
        if not re.match(NAME_PATTERN, name):
            raise BadInput(f"adapters: {name[:40]!r} is not a name (letters, digits, . _ -)")
        if any(given["name"] == name for given in found):
            raise BadInput(f"adapters: {name!r} is named twice")
        found.append({"name": name, "source": source})
    return found
