"""Where a LoRA adapter comes from: a local folder, a local GGUF file, or a Hub repository.

The I/O edge of `model.adapters`: it reads `adapter_config.json` and the
header of `adapter_model.safetensors` (8 bytes of length, then JSON; a range
request on the Hub, never the whole file), or a GGUF adapter's header, and
hands the pure readers values.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import replace
from pathlib import Path
from typing import Any

from llmgw_core.errors import BadInput, LlmgwError, shown_value
from llmgw_core.model.adapters import AdapterShape, SafeTensor, gguf_adapter, peft_adapter
from llmgw_core.model.gguf_header import ReadRange, read_gguf_header

CONFIG = "adapter_config.json"
WEIGHTS = "adapter_model.safetensors"
MAX_SAFETENSORS_HEADER = 16 * 1024 * 1024
"""An adapter's safetensors header is kilobytes; more is not an adapter."""


def safetensors_header(read: ReadRange, where: str) -> dict[str, SafeTensor]:
    """The tensors a safetensors file declares, read through `read(offset, length)`.

    Raises:
        BadInput: bytes that are not a safetensors header, in one sentence.
    """
    head = read(0, 8)
    if len(head) != 8:
        raise BadInput(f"{where} is shorter than a safetensors header")
    (length,) = struct.unpack("<Q", head)
    if not 2 <= length <= MAX_SAFETENSORS_HEADER:
        raise BadInput(f"{where} is not a safetensors file (its header length is {length})")
    raw = read(8, length)
    if len(raw) != length:
        raise BadInput(f"{where} ends inside its safetensors header")
    try:
        parsed = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise BadInput(f"{where}: its safetensors header is not JSON") from None
    if not isinstance(parsed, dict):
        raise BadInput(f"{where}: its safetensors header is {shown_value(parsed)}, not an object")
    tensors: dict[str, SafeTensor] = {}
    for name, entry in parsed.items():
        if name == "__metadata__":
            continue
        if not isinstance(entry, dict):
            raise BadInput(
                f"{where}: tensor {shown_value(name)} is described by {shown_value(entry)}"
            )
        dtype, shape, offsets = entry.get("dtype"), entry.get("shape"), entry.get("data_offsets")
        if (
            not isinstance(dtype, str)
            or not isinstance(shape, list)
            or len(shape) > 8
            or not all(
                isinstance(d, int) and not isinstance(d, bool) and 0 <= d < 1 << 32 for d in shape
            )
        ):
            raise BadInput(f"{where}: tensor {shown_value(name)} has no dtype and shape")
        tensor = SafeTensor(dtype, tuple(shape))
        if (
            not isinstance(offsets, list)
            or len(offsets) != 2
            or not all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)
            or offsets[1] - offsets[0] != math.prod(shape) * _width(dtype, where, name)
        ):
            raise BadInput(f"{where}: tensor {shown_value(name)}'s offsets do not match its shape")
        tensors[name] = tensor
    return tensors


def _width(dtype: str, where: str, name: str) -> int:
    widths = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1,
              "U8": 1, "BOOL": 1, "F8_E4M3": 1, "F8_E5M2": 1}  # fmt: skip
    if dtype not in widths:
        raise BadInput(f"{where}: tensor {shown_value(name)} has dtype {shown_value(dtype)}")
    return widths[dtype]


def _file_reader(path: Path) -> tuple[ReadRange, Any]:
    handle = path.open("rb")

    def read(offset: int, length: int) -> bytes:
        handle.seek(offset)
        return handle.read(length)

    return read, handle


def _local(name: str, source: str, path: Path) -> AdapterShape:
    from llmgw_core.model.local import _read_json, _regular_file, read_local_gguf

    where = f"adapter {name!r} ({source})"
    if path.is_file() or path.suffix == ".gguf":
        return gguf_adapter(name, source, read_local_gguf(path), where=where)
    if not path.is_dir():
        raise BadInput(f"{where}: no such file or folder")
    config = _read_json(path / CONFIG)
    if config is None:
        raise BadInput(
            f"{where}: the folder has no {CONFIG}",
            "give a PEFT adapter's folder (adapter_config.json and adapter_model.safetensors) "
            "or a GGUF adapter file",
        )
    weights = path / WEIGHTS
    if not _regular_file(weights):
        raise BadInput(
            f"{where}: the folder has no {WEIGHTS}",
            "llmgw reads an adapter's shape from safetensors (a .bin file is a pickle it will not open)",
        )
    read, handle = _file_reader(weights)
    try:
        tensors = safetensors_header(read, f"{source}/{WEIGHTS}")
    except OSError as exc:
        raise BadInput(f"cannot read {weights}: {exc.strerror or exc}") from None
    finally:
        handle.close()
    files = tuple((f.name, f.stat().st_size) for f in sorted(path.iterdir()) if f.is_file())
    return peft_adapter(name, source, config, tensors, files=files, where=where)


def _hub(name: str, source: str, file: str | None, token: str | None) -> AdapterShape:
    import httpx
    from huggingface_hub import get_token

    from llmgw_core.model.hub import HTTP_TIMEOUT_S, RangeReader
    from llmgw_core.model.source import split_ref

    where = f"adapter {name!r} ({source})"
    repo_id, revision = split_ref(source)
    token = token or get_token()
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    with httpx.Client(follow_redirects=True, headers=headers, timeout=HTTP_TIMEOUT_S) as client:
        if file:
            header = read_gguf_header(RangeReader(client, repo_id, file, revision))
            return replace(gguf_adapter(name, source, header, where=where), file=file)
        reader = RangeReader(client, repo_id, CONFIG, revision)
        raw = reader(0, 1 << 20)
        try:
            config = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError):
            raise BadInput(f"{where}: its {CONFIG} is not JSON") from None
        tensors = safetensors_header(
            RangeReader(client, repo_id, WEIGHTS, revision), f"{repo_id}/{WEIGHTS}"
        )
    return peft_adapter(name, source, config, tensors, where=where)


def load_adapter(
    name: str, source: str, *, file: str | None = None, token: str | None = None
) -> AdapterShape:
    """One adapter's shape from its files.

    Args:
        name: the name it is served by.
        source: a local folder (PEFT) or `.gguf` file, or a Hub `org/name[@revision]`.
        file: on the Hub, the GGUF adapter file of the repository (None for PEFT files).
        token: a Hugging Face token; None uses the usual places.

    Raises:
        BadInput: a source that is not an adapter, or one whose files say something impossible.
    """
    path = Path(source).expanduser()
    if path.exists() or source.startswith(("/", "./", "../", "~")):
        return _local(name, source, path)
    from llmgw_core.model.source import _REPO_ID, split_ref

    if not _REPO_ID.match(split_ref(source)[0]):
        raise BadInput(
            f"adapter {name!r}: {source!r} is neither a local path nor a Hub repository id"
        )
    try:
        return _hub(name, source, file, token)
    except LlmgwError:
        raise
    except OSError as exc:
        raise LlmgwError(f"adapter {name!r}: cannot read {source}: {exc}") from None
