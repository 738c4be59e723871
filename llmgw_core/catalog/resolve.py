"""The one rule for what a model reference names: the catalog, a local path, or the Hub.

* `catalog:org/name` is the shipped record, always.
* An existing path (relative to the script when one is given) is read from disk.
* `org/name[@revision]` is read from the Hub — unless the Hub cannot be used
  and the catalog knows the model: when asked to stay offline (the demo), when
  `HF_HUB_OFFLINE` is set and the local Hugging Face cache lacks the model, or
  when the Hub does not answer at all (a refused connection, a timeout). Then
  the shipped record stands in, marked so the plan can say "from the shipped
  catalog (offline)". A Hub that answers — 404, gated, a server error — is
  never masked: its sentence reaches the user.
"""

from __future__ import annotations

from pathlib import Path

from llmgw_core.catalog import catalog_entry, catalog_model, is_catalog_ref
from llmgw_core.errors import BadInput, LlmgwError
from llmgw_core.model.source import ModelInfo, load_model, split_ref

OFFLINE_NOTE = "from the shipped catalog (offline)"
PROBE_TIMEOUT_S = 5.0
_PATH_PREFIXES = ("/", "./", "../", "~")


def _transport_errors() -> tuple[type[Exception], ...]:
    """Errors that mean no answer came back, from httpx and from the client `huggingface_hub` uses."""
    import httpx
    from huggingface_hub.utils import httpx as hub_http

    return tuple({httpx.TransportError, hub_http.TransportError})


def hub_answers(endpoint: str) -> bool:
    """True when something answers HTTP at the Hub's address (any status); False when nothing does."""
    import httpx

    try:
        httpx.head(endpoint, timeout=PROBE_TIMEOUT_S, follow_redirects=False)
    except httpx.TransportError:
        return False
    return True


def _local_path(ref: str, script_dir: Path | None) -> Path | None:
    """The path a reference names when it is one: explicit, or existing beside the script."""
    path = Path(ref).expanduser()
    if path.is_absolute():
        return path
    anchored = (script_dir / path) if script_dir is not None else path
    try:
        if ref.startswith(_PATH_PREFIXES) or anchored.is_symlink() or anchored.exists():
            return anchored.resolve()
    except (OSError, RuntimeError):  # Python raises RuntimeError on a symlink loop
        raise BadInput(f"model path {ref} is a symlink loop", "point at the real folder") from None
    return None


def _cached_on_disk(repo_id: str, revision: str | None) -> bool:
    """True when the local Hugging Face cache holds the repository's config.json."""
    from huggingface_hub import try_to_load_from_cache

    found = try_to_load_from_cache(repo_id, "config.json", revision=revision)
    return isinstance(found, str)


def resolve_model(
    ref: str, *, script_dir: Path | None = None, offline: bool | None = None
) -> ModelInfo:
    """The model a reference names (see the module's rule).

    Args:
        ref: `catalog:org/name`, a path, or `org/name[@revision]`.
        script_dir: the directory relative paths are read from (the script's own).
        offline: True to prefer the shipped catalog for the models it knows (the
            demo); None to decide from `HF_HUB_OFFLINE` and whether the Hub answers.

    Raises:
        BadInput: an unknown catalog model, a missing path, a Hub answer that says no.
        LlmgwError: the Hub unreachable and the model not in the catalog.
    """
    ref = ref.strip()
    if is_catalog_ref(ref):
        return catalog_model(ref)
    path = _local_path(ref, script_dir)
    if path is not None:
        return load_model(str(path))
    from llmgw_core.model.hub import hub_endpoint, hub_offline  # the Hub's client, only for the Hub

    repo_id, revision = split_ref(ref)
    shipped = catalog_entry(repo_id) is not None and revision is None
    if shipped and offline:
        return catalog_model(ref, note=OFFLINE_NOTE)
    if shipped and offline is None and hub_offline() and not _cached_on_disk(repo_id, revision):
        return catalog_model(ref, note=f"{OFFLINE_NOTE}: HF_HUB_OFFLINE is set")
    try:
        return load_model(ref)
    except BadInput:
        raise  # the Hub answered (not found, gated, malformed): never masked
    except (LlmgwError, *_transport_errors()) as exc:
        endpoint = hub_endpoint()
        if not shipped or offline is False or hub_answers(endpoint):
            if isinstance(exc, LlmgwError):
                raise
            raise LlmgwError(
                f"cannot reach the Hub at {endpoint} for {repo_id} ({type(exc).__name__})",
                "check the network or HF_ENDPOINT, or plan a model the catalog ships",
            ) from None
        return catalog_model(ref, note=f"{OFFLINE_NOTE}: the Hub at {endpoint} does not answer")


def origin_note(model: ModelInfo) -> str | None:
    """How a resolved model was reached when not from the Hub or a directory, for the plan to show."""
    from llmgw_core.catalog import ShippedModel

    return model.note if isinstance(model, ShippedModel) else None
