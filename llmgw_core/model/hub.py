"""A model on the Hugging Face Hub, through `huggingface_hub` and HTTP range requests.

Metadata (the listing with sizes, safetensors parameter counts) comes from
`HfApi.model_info(files_metadata=True)`; small files (config.json, the
safetensors index, hf_quant_config.json) from `hf_hub_download`, so they land
in the usual cache and `HF_HUB_OFFLINE=1` reads them back from it. GGUF
headers are read with httpx range requests on the file's resolve URL, a chunk
at a time. The endpoint is read from `HF_ENDPOINT` on every call (the
library reads it once at import), and the token from the usual places
(`HF_TOKEN`, the CLI login) unless one is given.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import httpx
from huggingface_hub import HfApi, constants, get_token, hf_hub_download, hf_hub_url
from huggingface_hub.errors import (
    EntryNotFoundError,
    GatedRepoError,
    HfHubHTTPError,
    LocalEntryNotFoundError,
    OfflineModeIsEnabled,
    RepositoryNotFoundError,
    RevisionNotFoundError,
)
from huggingface_hub.utils import httpx as hub_httpx

from llmgw_core.errors import BadInput, LlmgwError
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

INDEX_FILE = "model.safetensors.index.json"
HTTP_TIMEOUT_S = 30.0


def hub_endpoint() -> str:
    """The Hub's address: `HF_ENDPOINT` as it is now, else the library's default."""
    return (os.environ.get("HF_ENDPOINT") or constants.ENDPOINT).rstrip("/")


def hub_offline() -> bool:
    """True when `HF_HUB_OFFLINE` (or `TRANSFORMERS_OFFLINE`) asks for the cache only."""
    value = os.environ.get("HF_HUB_OFFLINE") or os.environ.get("TRANSFORMERS_OFFLINE") or ""
    return value.upper() in ("1", "ON", "YES", "TRUE") or constants.HF_HUB_OFFLINE


NETWORK_ERRORS: tuple[type[Exception], ...] = (httpx.HTTPError, hub_httpx.HTTPError)
"""Transport failures from our own httpx and from the HTTP client huggingface_hub brings."""


def _hub_error(exc: Exception, repo_id: str, revision: str | None) -> LlmgwError:
    """One sentence for each way the Hub says no."""
    if isinstance(exc, GatedRepoError):
        return BadInput(
            f"{repo_id} is a gated repository and this token has no access to it",
            f"accept its terms on {hub_endpoint()}/{repo_id} and set HF_TOKEN to a token with access",
        )
    if isinstance(exc, RevisionNotFoundError):
        return BadInput(
            f"{repo_id} has no revision {revision!r}", "check the branch, tag or commit after @"
        )
    if isinstance(exc, RepositoryNotFoundError):
        return BadInput(
            f"{repo_id} is not a model repository on {hub_endpoint()}",
            "check the name; a private repository also needs HF_TOKEN",
        )
    if isinstance(exc, OfflineModeIsEnabled | LocalEntryNotFoundError):
        return BadInput(
            f"{repo_id} is not in the local Hugging Face cache and HF_HUB_OFFLINE=1 forbids fetching it",
            "unset HF_HUB_OFFLINE or download the model first",
        )
    if isinstance(exc, HfHubHTTPError):
        status = exc.response.status_code if exc.response is not None else "no"
        return LlmgwError(
            f"the Hub answered HTTP {status} for {repo_id}", "try again, or check HF_ENDPOINT"
        )
    return LlmgwError(
        f"cannot reach the Hub at {hub_endpoint()} for {repo_id} ({type(exc).__name__})",
        "check the network or set HF_HUB_OFFLINE=1 to use the cache",
    )


def _download(
    repo_id: str, filename: str, revision: str | None, token: str | None
) -> dict[str, Any] | None:
    """A small JSON file of the repository (from the cache when offline), None when absent."""
    try:
        path = hf_hub_download(
            repo_id,
            filename,
            revision=revision,
            token=token,
            endpoint=hub_endpoint(),
            local_files_only=hub_offline(),
        )
    except (EntryNotFoundError, LocalEntryNotFoundError) as exc:
        if isinstance(exc, LocalEntryNotFoundError) and filename == "config.json":
            raise _hub_error(exc, repo_id, revision) from None
        return None
    except (HfHubHTTPError, OfflineModeIsEnabled, *NETWORK_ERRORS) as exc:
        raise _hub_error(exc, repo_id, revision) from None
    text = Path(path).read_text(encoding="utf-8", errors="replace")
    return parse_config_text(text, f"{filename} of {repo_id}")


def _listing(
    repo_id: str, revision: str | None, token: str | None
) -> tuple[list[RepoFile], int | None]:
    """The repository's files with sizes, and the safetensors parameter count when given."""
    api = HfApi(endpoint=hub_endpoint(), token=token)
    try:
        repo = api.model_info(repo_id, revision=revision, files_metadata=True)
    except (HfHubHTTPError, OfflineModeIsEnabled, *NETWORK_ERRORS) as exc:
        raise _hub_error(exc, repo_id, revision) from None
    files = [RepoFile(s.rfilename, s.size) for s in repo.siblings or []]
    params = None
    safetensors = getattr(repo, "safetensors", None)
    if safetensors is not None and getattr(safetensors, "total", None):
        params = int(safetensors.total)
    return files, params


def _cached_listing(repo_id: str, revision: str | None) -> list[RepoFile]:
    """Files of the cached snapshot (offline): what has been downloaded, with sizes."""
    from huggingface_hub import snapshot_download

    try:
        folder = Path(
            snapshot_download(
                repo_id, revision=revision, local_files_only=True, allow_patterns=["*.json"]
            )
        )
    except (LocalEntryNotFoundError, OfflineModeIsEnabled, FileNotFoundError) as exc:
        raise _hub_error(LocalEntryNotFoundError(str(exc)), repo_id, revision) from None
    return [
        RepoFile(p.relative_to(folder).as_posix(), p.resolve().stat().st_size)
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    ]


class RangeReader:
    """Reads byte ranges of one Hub file with HTTP range requests, counting what it fetched."""

    def __init__(
        self, client: httpx.Client, repo_id: str, filename: str, revision: str | None
    ) -> None:
        self.repo_id = repo_id
        self.filename = filename
        self.url = hf_hub_url(
            repo_id, filename, revision=revision or "main", endpoint=hub_endpoint()
        )
        self._client = client
        self.bytes_fetched = 0

    def __call__(self, offset: int, length: int) -> bytes:
        """`length` bytes of the file from `offset` (fewer at its end), by one Range request."""
        headers = {"Range": f"bytes={offset}-{offset + length - 1}"}
        try:
            with self._client.stream("GET", self.url, headers=headers) as response:
                if response.status_code == 416:
                    return b""
                if response.status_code in (401, 403):
                    raise BadInput(
                        f"{self.repo_id} is a gated repository and this token cannot read {self.filename}",
                        f"accept its terms on {hub_endpoint()}/{self.repo_id} and set HF_TOKEN",
                    )
                if response.status_code == 404:
                    raise BadInput(f"{self.filename} is not in {self.repo_id}")
                if response.status_code == 200 and offset > 0:
                    raise LlmgwError(
                        f"the server of {self.url} ignores range requests",
                        "llmgw will not download a whole GGUF to read its header",
                    )
                if response.status_code not in (200, 206):
                    raise LlmgwError(
                        f"reading {self.filename} of {self.repo_id} got HTTP {response.status_code}"
                    )
                chunks = []
                taken = 0
                for chunk in response.iter_bytes():
                    chunks.append(chunk)
                    taken += len(chunk)
                    if taken >= length:
                        break
        except httpx.HTTPError as exc:
            raise LlmgwError(
                f"cannot read {self.filename} of {self.repo_id}: {type(exc).__name__}",
                "check the network or HF_ENDPOINT",
            ) from None
        fetched = b"".join(chunks)[:length]
        self.bytes_fetched += len(fetched)
        return fetched


def read_hub_gguf_headers(
    repo_id: str,
    revision: str | None,
    files: tuple[str, ...],
    *,
    token: str | None = None,
    client: httpx.Client | None = None,
) -> list[GgufHeader]:
    """The headers of every part of a GGUF set on the Hub, by range requests."""
    token = token or get_token()
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    own = client is None
    client = client or httpx.Client(follow_redirects=True, headers=headers, timeout=HTTP_TIMEOUT_S)
    try:
        result = []
        for name in files:
            reader = RangeReader(client, repo_id, name, revision)
            result.append(read_gguf_header(reader, where=f"{repo_id}/{name}"))
        return result
    finally:
        if own:
            client.close()


def load_hub_model(
    ref: str,
    repo_id: str,
    revision: str | None,
    *,
    token: str | None,
    read_gguf_headers: bool,
) -> ModelInfo:
    """Read a Hub repository's shape and artifacts (see `source.load_model`)."""
    offline = hub_offline()
    if offline:
        files, params = _cached_listing(repo_id, revision), None
    else:
        files, params = _listing(repo_id, revision, token)
    names = {f.path for f in files}
    has_gguf = any(n.lower().endswith(".gguf") for n in names)
    config = None
    if offline or "config.json" in names:
        config = _download(repo_id, "config.json", revision, token)
    if config is None and not has_gguf:
        raise BadInput(
            f"{repo_id} has no config.json and no GGUF file",
            "it is not a model llmgw can plan (is it a dataset or an adapter?)",
        )
    extra = {
        name: value
        for name in EXTRA_CONFIG_FILES
        if (offline or name in names)
        and (value := _download(repo_id, name, revision, token)) is not None
    }
    index = None
    if offline or INDEX_FILE in names:
        index = _download(repo_id, INDEX_FILE, revision, token)
    shape = shape_or_none(config, extra, f"config.json of {repo_id}")
    artifacts = listing_artifacts(files, shape, index, params)
    no_weights = not has_gguf and not any(a.format == "safetensors" for a in artifacts)
    if shape is not None and no_weights:
        artifacts = (counted_artifact(shape), *artifacts)
    if read_gguf_headers and has_gguf and not offline:

        def headers(artifact: Artifact) -> list[GgufHeader]:
            return read_hub_gguf_headers(repo_id, revision, artifact.files, token=token)

        artifacts = with_gguf_headers(artifacts, headers, all_headers=False)
    if shape is None:
        shape = next((a.shape for a in artifacts if a.shape is not None), None)
    return ModelInfo(
        ref=ref,
        repo_id=repo_id,
        revision=revision,
        local_dir=None,
        shape=shape,
        artifacts=artifacts,
    )
