"""A local stand-in for the Hugging Face Hub: a real HTTP server on 127.0.0.1.

It answers the three things llmgw asks of the Hub — the model API with file
sizes, `resolve` downloads (HEAD and GET, with Range) and nothing else — and
the Hub's refusals: 404 RepoNotFound for an unknown repository, 401/403
GatedRepo for files of a gated one without the right token. Repositories are
built by the tests from real fixture files (served byte for byte) and from
GGUF files the tests write.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from huggingface_hub import constants

COMMIT = "0123456789abcdef0123456789abcdef01234567"


@dataclass
class FakeRepo:
    """One repository: file contents (path → bytes or a file on disk) and listed-only sizes."""

    files: dict[str, bytes | Path] = field(default_factory=dict)
    sizes_only: dict[str, int | None] = field(default_factory=dict)
    gated_token: str | None = None  # when set, resolve needs this bearer token
    safetensors_total: int | None = None

    def size(self, path: str) -> int | None:
        if path in self.files:
            body = self.files[path]
            return len(body) if isinstance(body, bytes) else body.stat().st_size
        return self.sizes_only.get(path)


@dataclass
class HubLog:
    """What the server served: (method, path, range header, bytes sent)."""

    requests: list[tuple[str, str, str | None, int]] = field(default_factory=list)

    def bytes_for(self, suffix: str) -> int:
        """Bytes sent for paths ending in `suffix`."""
        return sum(sent for _, path, _, sent in self.requests if path.endswith(suffix))


_RESOLVE = re.compile(r"^/(?P<repo>[^/]+/[^/]+)/resolve/(?P<rev>[^/]+)/(?P<path>.+)$")
_TREE = re.compile(r"^/api/models/(?P<repo>[^/]+/[^/]+)/tree/(?P<rev>[^/]+)/?$")
_API = re.compile(r"^/api/models/(?P<repo>[^/]+/[^/]+?)(?:/revision/(?P<rev>[^/]+))?$")


def _slice(body: bytes | Path, start: int, stop: int) -> bytes:
    """Bytes [start, stop) of an in-memory or on-disk file, reading only those from disk."""
    if isinstance(body, bytes):
        return body[start:stop]
    with body.open("rb") as handle:
        handle.seek(start)
        return handle.read(stop - start)


def _handler(repos: dict[str, FakeRepo], log: HubLog) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: object) -> None:
            return

        def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
            path = self.path.split("?")[0]
            sent = 0 if self.command == "HEAD" else len(body)
            log.requests.append((self.command, path, self.headers.get("Range"), sent))
            self.send_response(status)
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _error(self, status: int, code: str, message: str) -> None:
            body = json.dumps({"error": message}).encode()
            self._send(
                status,
                body,
                {
                    "X-Error-Code": code,
                    "X-Error-Message": message,
                    "Content-Type": "application/json",
                },
            )

        def do_HEAD(self) -> None:
            self.do_GET()

        def do_GET(self) -> None:
            path = self.path.split("?")[0]
            tree = _TREE.match(path)
            if tree:
                if tree.group("rev") not in ("main", COMMIT):
                    return self._error(404, "RevisionNotFound", "Invalid rev id")
                return self._tree(tree.group("repo"))
            api = _API.match(path)
            if api:
                if api.group("rev") not in (None, "main", COMMIT):
                    return self._error(404, "RevisionNotFound", "Invalid rev id")
                return self._model_api(api.group("repo"))
            resolve = _RESOLVE.match(path)
            if resolve:
                if resolve.group("rev") not in ("main", COMMIT):
                    return self._error(404, "RevisionNotFound", "Invalid rev id")
                return self._resolve(resolve.group("repo"), resolve.group("path"))
            return self._error(404, "EntryNotFound", "no such route")

        def _tree(self, repo_id: str) -> None:
            """The repository's files, as `list_repo_tree` (which `snapshot_download` calls) reads them."""
            repo = repos.get(repo_id)
            if repo is None:
                return self._error(401, "RepoNotFound", "Repository not found")
            entries = [
                {
                    "type": "file",
                    "path": name,
                    "size": repo.size(name),
                    "oid": hashlib.sha1(name.encode()).hexdigest(),
                }
                for name in sorted(repo.files)
            ]
            self._send(200, json.dumps(entries).encode(), {"Content-Type": "application/json"})

        def _model_api(self, repo_id: str) -> None:
            repo = repos.get(repo_id)
            if repo is None:
                return self._error(401, "RepoNotFound", "Repository not found")
            names = sorted(set(repo.files) | set(repo.sizes_only))
            siblings = []
            for name in names:
                entry: dict[str, object] = {"rfilename": name, "size": repo.size(name)}
                siblings.append(entry)
            body: dict[str, object] = {
                "id": repo_id,
                "modelId": repo_id,
                "sha": COMMIT,
                "private": False,
                "gated": "manual" if repo.gated_token else False,
                "siblings": siblings,
            }
            if repo.safetensors_total:
                body["safetensors"] = {
                    "parameters": {"BF16": repo.safetensors_total},
                    "total": repo.safetensors_total,
                }
            self._send(200, json.dumps(body).encode(), {"Content-Type": "application/json"})

        def _resolve(self, repo_id: str, file_path: str) -> None:
            repo = repos.get(repo_id)
            if repo is None:
                return self._error(404, "RepoNotFound", "Repository not found")
            if repo.gated_token:
                auth = self.headers.get("Authorization", "")
                if not auth:
                    return self._error(401, "GatedRepo", "Access to this gated repo is restricted")
                if auth != f"Bearer {repo.gated_token}":
                    return self._error(403, "GatedRepo", "Access to this gated repo is restricted")
            body = repo.files.get(file_path)
            if body is None:
                return self._error(404, "EntryNotFound", "Entry not found")
            size = len(body) if isinstance(body, bytes) else body.stat().st_size
            etag = hashlib.sha256(f"{repo_id}/{file_path}/{size}".encode()).hexdigest()
            headers = {
                "X-Repo-Commit": COMMIT,
                "ETag": f'"{etag}"',
                "Accept-Ranges": "bytes",
                "Content-Type": "application/octet-stream",
            }
            wanted = self.headers.get("Range")
            if wanted and wanted.startswith("bytes="):
                start_text, _, end_text = wanted[6:].partition("-")
                start = int(start_text)
                end = min(int(end_text) if end_text else size - 1, size - 1)
                if start >= size:
                    return self._send(416, b"", {"Content-Range": f"bytes */{size}"})
                headers["Content-Range"] = f"bytes {start}-{end}/{size}"
                return self._send(206, _slice(body, start, end + 1), headers)
            return self._send(200, _slice(body, 0, size), headers)

    return Handler


class LocalHub:
    """The server, its repositories and its log; a context manager."""

    def __init__(self) -> None:
        self.repos: dict[str, FakeRepo] = {}
        self.log = HubLog()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self.repos, self.log))
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def endpoint(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def __enter__(self) -> LocalHub:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def repo_from_fixture(directory: Path, **options: object) -> FakeRepo:
    """A repository serving a fixture directory's JSON files, listed with files.json's sizes."""
    repo = FakeRepo(**options)  # type: ignore[arg-type]
    listing = directory / "files.json"
    if listing.exists():
        for entry in json.loads(listing.read_text()):
            repo.sizes_only[entry["path"]] = entry["size"]
    for path in directory.iterdir():
        if path.name != "files.json":
            repo.files[path.name] = path
    return repo


def point_hub_at(endpoint: str, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Point huggingface_hub at `endpoint`, online, with a private cache under `home` and no token."""
    monkeypatch.setenv("HF_ENDPOINT", endpoint)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("TRANSFORMERS_OFFLINE", raising=False)
    monkeypatch.delenv("HF_TOKEN", raising=False)
    monkeypatch.setenv("HF_HOME", str(home / "hf-home"))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(home / "hub-cache"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "HF_TOKEN_PATH", str(home / "no-token"))
    monkeypatch.setattr(constants, "HF_STORED_TOKENS_PATH", str(home / "no-tokens"))
