"""A model on this machine: a directory with config.json and weights, or a GGUF file."""

from __future__ import annotations

import re
import stat
from pathlib import Path
from typing import Any

from llmgw_core.errors import BadInput
from llmgw_core.model.artifacts import Artifact, RepoFile
from llmgw_core.model.assemble import (
    EXTRA_CONFIG_FILES,
    ModelInfo,
    counted_artifact,
    listing_artifacts,
    parse_config_text,
    shape_or_none,
    with_gguf_headers,
)
from llmgw_core.model.gguf_header import GgufHeader, read_gguf_header

_SPLIT = re.compile(r"-(\d{5})-of-(\d{5})\.gguf$", re.IGNORECASE)
_SKIP_DIRS = {".git", ".cache", "__pycache__"}


MAX_CONFIG_BYTES = 16 * 1024 * 1024
"""The largest JSON file read beside the weights: configs and indexes are kilobytes."""


def _regular_file(path: Path) -> bool:
    """True for a regular file (following links); False for a pipe, a device, a folder, a loop.

    A named pipe would block the read forever, so it is refused before opening.
    """
    try:
        return stat.S_ISREG(path.stat().st_mode)
    except (OSError, RuntimeError):
        return False


def read_local_gguf(path: Path) -> GgufHeader:
    """A local GGUF file's header, read a chunk at a time like a remote one."""
    if not _regular_file(path):
        raise BadInput(f"{path} is not a regular file (a pipe, a folder or a symlink loop)")
    try:
        with path.open("rb") as handle:

            def read(offset: int, length: int) -> bytes:
                handle.seek(offset)
                return handle.read(length)

            return read_gguf_header(read, where=str(path))
    except OSError as exc:
        raise BadInput(f"cannot read {path}: {exc.strerror or exc}") from None


def _read_json(path: Path) -> dict[str, Any] | None:
    if not path.is_symlink() and not path.exists():
        return None
    if not _regular_file(path):
        raise BadInput(
            f"{path} is not a regular file (a pipe, a folder, a dangling link or a symlink loop)"
        )
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_CONFIG_BYTES + 1)
        if len(raw) > MAX_CONFIG_BYTES:
            raise BadInput(
                f"{path} is over {MAX_CONFIG_BYTES // 1024**2} MB; a model's JSON files are kilobytes"
            )
        text = raw.decode("utf-8")
    except OSError as exc:
        raise BadInput(f"cannot read {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError as exc:
        raise BadInput(f"{path} is not UTF-8 text (byte {exc.start} cannot be read)") from None
    return parse_config_text(text, str(path))


def _listing(folder: Path) -> list[RepoFile]:
    files = []
    for path in sorted(folder.rglob("*")):
        relative = path.relative_to(folder)
        if any(part in _SKIP_DIRS for part in relative.parts) or not path.is_file():
            continue
        files.append(RepoFile(relative.as_posix(), path.stat().st_size))
    return files


def load_local(ref: str, path: Path, *, read_gguf_headers: bool) -> ModelInfo:
    """Read a local directory or GGUF file.

    Raises:
        BadInput: no such path, no config.json and no GGUF, or a malformed file.
    """
    try:
        exists = path.exists()
    except (OSError, RuntimeError):  # a symlink loop
        raise BadInput(f"model path {ref} is a symlink loop", "point at the real folder") from None
    if not exists:
        raise BadInput(f"model path {ref} does not exist", "give a directory or a .gguf file")
    if not path.is_dir() and not _regular_file(path):
        raise BadInput(f"model path {ref} is not a regular file or a folder (a pipe?)")
    if path.is_file():
        if path.suffix.lower() != ".gguf":
            raise BadInput(
                f"{ref} is a file but not a .gguf", "give the model's directory or a GGUF file"
            )
        folder, names = path.parent, [path.name]
        match = _SPLIT.search(path.name)
        if match:
            stem = path.name[: match.start()]
            names = sorted(p.name for p in folder.glob(f"{stem}-*-of-{match.group(2)}.gguf"))
        files = [RepoFile(n, (folder / n).stat().st_size) for n in names]
        config: dict[str, Any] | None = None
        extra: dict[str, dict[str, Any]] = {}
        index = None
    else:
        folder = path
        files = _listing(folder)
        config = _read_json(folder / "config.json")
        extra = {n: v for n in EXTRA_CONFIG_FILES if (v := _read_json(folder / n)) is not None}
        index = _read_json(folder / "model.safetensors.index.json")
        if config is None and not any(f.path.lower().endswith(".gguf") for f in files):
            raise BadInput(
                f"directory {ref} has no config.json and no .gguf file",
                "point at a model directory (config.json + weights) or a GGUF file",
            )
    shape = shape_or_none(config, extra, str(folder / "config.json"))
    artifacts = listing_artifacts(files, shape, index, None)
    if shape is not None and not any(a.format == "safetensors" for a in artifacts):
        artifacts = (*_config_only(shape), *artifacts)

    def headers(artifact: Artifact) -> list[GgufHeader]:
        return [read_local_gguf(folder / name) for name in artifact.files]

    if read_gguf_headers:
        artifacts = with_gguf_headers(artifacts, headers, all_headers=True)
    if shape is None:
        shape = next((a.shape for a in artifacts if a.shape is not None), None)
    return ModelInfo(
        ref=ref,
        repo_id=None,
        revision=None,
        local_dir=folder,
        shape=shape,
        artifacts=artifacts,
    )


def _config_only(shape: Any) -> tuple[Artifact, ...]:
    """A config with no weight files beside it: the weights' size counted from the architecture."""
    return (counted_artifact(shape),)


__all__ = ["load_local", "read_local_gguf"]
