"""Model directories: which models are there, whether they are whole, and on what storage.

A directory is `missing`, `unreadable`, `empty` (nothing in it), `present`
(files, but nothing recognisable as a model), `partial` (a model is
half-downloaded) or `complete` (every model found is whole). Models are found
in the Hugging Face cache layout (`models--org--name/snapshots/<rev>/`) and as
plain directories holding `config.json` or `*.gguf` files. Shared storage
(NFS, Lustre ...) is told from local disk by the filesystem type of the mount.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from llmgw_agent.discover.schema import CaptureError, MapOf, Record, Text, read_json

TYPE_CHECKING = False  # `typing` costs ms of every agent start; annotations are strings here
if TYPE_CHECKING:
    from typing import Any, Dict, Iterable, List, Optional

SHARED_FS_TYPES = frozenset(
    (
        "nfs",
        "nfs4",
        "lustre",
        "gpfs",
        "beegfs",
        "ceph",
        "cephfs",
        "glusterfs",
        "fuse.glusterfs",
        "wekafs",
        "cifs",
        "smb3",
        "fuse.juicefs",
        "fuse.s3fs",
        "fuse.gcsfuse",
        "virtiofs",
    )
)
"""Filesystem types whose contents other nodes see too."""

_PARTIAL_SUFFIXES = (".incomplete", ".part", ".tmp", ".download")
_MAX_DEPTH = 3

INDEX_SCHEMA = Record({"weight_map": MapOf(Text())})
"""What discovery reads of a `*.index.json`: which file holds each tensor."""

_MOUNT_ESCAPES = {"\\040": " ", "\\011": "\t", "\\012": "\n", "\\134": "\\"}
"""The four characters the kernel escapes in a mount point (`mangle` in fs/proc_namespace.c)."""
_MOUNT_ESCAPE = re.compile(r"\\(?:040|011|012|134)")


def parse_mountinfo(text: str) -> List[Dict[str, str]]:
    """`/proc/self/mountinfo` -> `[{path, fs_type}]` (octal escapes such as `\\040` decoded)."""
    mounts = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        fields = left.split()
        if not sep or len(fields) < 5 or not right.split():
            continue
        path = _MOUNT_ESCAPE.sub(lambda m: _MOUNT_ESCAPES[m.group(0)], fields[4])
        mounts.append({"path": path, "fs_type": right.split()[0]})
    return mounts


def fs_type_of(path: Path, mounts: Iterable[Dict[str, str]]) -> Optional[str]:
    """The filesystem type of the mount holding `path` (the longest matching mount point)."""
    text = str(path)
    best = None
    best_len = -1
    for mount in mounts:
        point = mount["path"].rstrip("/") or "/"
        inside = text == point or text.startswith(point + "/") or point == "/"
        if inside and len(point) > best_len:
            best, best_len = mount["fs_type"], len(point)
    return best


def _is_partial_name(name: str) -> bool:
    return name.endswith(_PARTIAL_SUFFIXES)


def _usable(path: Path) -> bool:
    """A weight file that is there and not empty (a hub-cache link may point at no blob)."""
    try:
        return path.stat().st_size > 0
    except OSError:
        return False


def _weights_state(directory: Path) -> Dict[str, Any]:
    """Format, state, size and missing files of one model directory."""
    files = list(directory.iterdir())
    names = {p.name for p in files}
    missing: List[str] = []
    partial = any(_is_partial_name(n) for n in names)
    download_cache = directory / ".cache" / "huggingface" / "download"
    if download_cache.is_dir():
        partial = partial or any(
            _is_partial_name(p.name) for p in download_cache.rglob("*") if p.is_file()
        )
    ggufs = sorted(n for n in names if n.endswith(".gguf"))
    shards = sorted(n for n in names if n.endswith(".safetensors"))
    bins = sorted(n for n in names if n.endswith(".bin") and n.startswith("pytorch_model"))
    listed: List[str] = []
    for index_name in ("model.safetensors.index.json", "pytorch_model.bin.index.json"):
        index = directory / index_name
        if not index.is_file():
            continue
        try:
            _, document = read_json(index)
            listed += list(INDEX_SCHEMA.read(document, str(index)).get("weight_map", {}).values())
        except CaptureError:
            missing.append(index_name)
    for weight in sorted(set(listed) | set(shards) | set(bins) | set(ggufs)):
        if not _usable(directory / weight):
            missing.append(weight)
    if ggufs and not shards and not bins:
        fmt = "gguf"
    elif shards or any(n.endswith(".safetensors") for n in listed):
        fmt = "safetensors"
    elif bins or listed:
        fmt = "pytorch"
    else:
        fmt = "other"
    if fmt in ("safetensors", "pytorch") and "config.json" not in names:
        missing.append("config.json")
    if fmt == "other" and "config.json" in names:
        missing.append("weights (*.safetensors)")
    size_bytes = sum(p.stat().st_size for p in files if _usable(p) and p.is_file())
    return {
        "format": fmt,
        "state": "partial" if (partial or missing) else "complete",
        "size_bytes": size_bytes,
        "files": ggufs if fmt == "gguf" else [],
        "missing": missing[:5],
    }


def _revisions(entry: Path) -> List[Path]:
    """A hub-cache model's snapshots, the one `refs/main` names last (it is the one used)."""
    snapshots = entry / "snapshots"
    if not snapshots.is_dir():
        return []
    revisions = sorted(
        (p for p in snapshots.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime
    )
    main = entry / "refs" / "main"
    if main.is_file():
        try:
            wanted = main.read_text(errors="replace").strip()
        except OSError:
            return revisions  # an unreadable ref names no snapshot: the newest is used
        revisions.sort(key=lambda p: p.name == wanted)
    return revisions


def _hub_cache_models(root: Path) -> List[Dict[str, Any]]:
    models = []
    for entry in sorted(root.iterdir()):
        if not entry.name.startswith("models--") or not entry.is_dir():
            continue
        name = entry.name[len("models--") :].replace("--", "/")
        revisions = _revisions(entry)
        blobs = entry / "blobs"
        incomplete = blobs.is_dir() and any(_is_partial_name(p.name) for p in blobs.iterdir())
        if not revisions:
            models.append(
                {
                    "name": name,
                    "path": str(entry),
                    "format": "other",
                    "state": "partial",
                    "size_bytes": 0,
                    "files": [],
                    "missing": ["snapshots"],
                }
            )
            continue
        state = _weights_state(revisions[-1])
        if incomplete:
            state["state"] = "partial"
        state.update({"name": name, "path": str(revisions[-1])})
        models.append(state)
    return models


def _plain_models(root: Path) -> List[Dict[str, Any]]:
    models = []

    def visit(directory: Path, depth: int) -> None:
        try:
            entries = list(directory.iterdir())
        except OSError:
            return
        names = {p.name for p in entries}
        if "config.json" in names or any(n.endswith(".gguf") for n in names):
            state = _weights_state(directory)
            relative = directory.relative_to(root).as_posix()
            state.update(
                {"name": relative if relative != "." else directory.name, "path": str(directory)}
            )
            models.append(state)
            return
        if depth >= _MAX_DEPTH:
            return
        for entry in sorted(entries):
            if (
                entry.is_dir()
                and not entry.name.startswith(".")
                and not entry.name.startswith("models--")
            ):
                visit(entry, depth + 1)

    visit(root, 0)
    return models


def scan_model_dir(path: str, mounts: Iterable[Dict[str, str]]) -> Dict[str, Any]:
    """One model directory's facts: `{state, shared, fs_type, models}`."""
    root = Path(os.path.expanduser(path))
    mounts = list(mounts)
    fs_type = fs_type_of(root.resolve() if root.exists() else root, mounts)
    result: Dict[str, Any] = {
        "state": "missing",
        "shared": bool(fs_type in SHARED_FS_TYPES),
        "fs_type": fs_type,
        "models": [],
    }
    if not root.is_dir():
        return result
    try:
        entries = list(root.iterdir())
    except PermissionError:
        result["state"] = "unreadable"
        return result
    if not entries:
        result["state"] = "empty"
        return result
    models = _hub_cache_models(root) + _plain_models(root)
    result["models"] = models
    if not models:
        result["state"] = "present"
    elif any(m["state"] == "partial" for m in models):
        result["state"] = "partial"
    else:
        result["state"] = "complete"
    return result


def live_mounts() -> List[Dict[str, str]]:
    """This machine's mounts, from `/proc/self/mountinfo` (empty where there is none)."""
    try:
        with open("/proc/self/mountinfo") as handle:
            return parse_mountinfo(handle.read())
    except OSError:
        return []
