"""Where a model comes from: a Hub repository, a local directory or a local GGUF file.

This is the I/O edge of the model package: it reads `config.json`, the
safetensors index and the file listing (from disk, or through
`huggingface_hub`), and GGUF headers (from disk, or with HTTP range requests),
then hands the pure modules values.
"""

from __future__ import annotations

import re
from pathlib import Path

from llmgw_core.errors import BadInput
from llmgw_core.model.assemble import ModelInfo, counted_artifact

__all__ = ["ModelInfo", "counted_artifact", "load_model", "split_ref"]

_REPO_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


def split_ref(ref: str) -> tuple[str, str | None]:
    """`org/name@rev` → ("org/name", "rev"); no `@` → revision None."""
    if "@" in ref:
        repo, _, revision = ref.partition("@")
        return repo, revision or None
    return ref, None


def load_model(ref: str, *, token: str | None = None, read_gguf_headers: bool = True) -> ModelInfo:
    """Read a model's shape and artifacts.

    Args:
        ref: "org/name[@revision]", a local directory, or a local `.gguf` file.
        token: a Hugging Face token; None uses the usual places (HF_TOKEN, the CLI login).
        read_gguf_headers: read each GGUF quantisation's header (range requests on
            the Hub) to learn its shape and per-layer tensor bytes.

    Raises:
        BadInput: unknown repository, gated repository, no config, malformed
            config, unsupported architecture — one sentence each.
    """
    path = Path(ref).expanduser()
    if path.exists() or ref.startswith(("/", "./", "../", "~")):
        from llmgw_core.model.local import load_local

        return load_local(ref, path, read_gguf_headers=read_gguf_headers)
    repo_id, revision = split_ref(ref)
    if not _REPO_ID.match(repo_id):
        raise BadInput(
            f"model {ref!r} is neither a local path nor a Hub repository id",
            "give org/name[@revision] or a directory",
        )
    from llmgw_core.model.hub import load_hub_model

    return load_hub_model(ref, repo_id, revision, token=token, read_gguf_headers=read_gguf_headers)
