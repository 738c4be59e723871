"""Which paths a request may name: the agent's own folders and the model directories.

A request that names a path (`download.watch`, a shard's `cwd`) is answered
only when the path, once `~`, `..` and symbolic links are resolved, lies
under one of:

* the agent's state directory (`paths.state_dir()`);
* the Hugging Face cache where downloads land (`$HF_HUB_CACHE`, `$HF_HOME`,
  else `~/.cache/huggingface`);
* a model directory: one the console named in a `facts` or `doctor`
  request of this agent process, or one listed in `LLMGW_AGENT_MODEL_DIRS`
  (separated by `:`).

Everything else (`/etc`, `~/.ssh`, `/`) is refused with one sentence, so a
console bug or a hostile peer cannot make the agent walk or run anywhere.
Relative paths are taken from the agent's working directory (the SSH home).
"""

from __future__ import annotations

import os
import threading

from llmgw_agent import paths

TYPE_CHECKING = False  # `typing` costs ms of every agent start; annotations are strings here
if TYPE_CHECKING:
    from typing import Iterable, List, Optional

MODEL_DIRS_ENV = "LLMGW_AGENT_MODEL_DIRS"

_lock = threading.Lock()
_session_model_dirs: List[str] = []


def _control(text: str) -> bool:
    return any(ord(char) < 32 or ord(char) == 127 for char in text)


def _resolved(path: str) -> str:
    return os.path.realpath(os.path.expanduser(path))


def model_dir_refusal(path: str) -> Optional[str]:
    """Why `path` cannot be a model directory, or None: absolute (or `~`), no `..`, no control characters."""
    if not path or _control(path):
        return "{!r} is not a directory path".format(path)
    if not (path.startswith("/") or path.startswith("~")):
        return "{!r} is not an absolute path".format(path)
    if ".." in path.replace("\\", "/").split("/"):
        return "{!r} climbs out with '..'".format(path)
    return None


def add_model_dirs(model_dirs: Iterable[str]) -> None:
    """Remember the model directories the console named (checked with `model_dir_refusal`)."""
    with _lock:
        for path in model_dirs:
            if path not in _session_model_dirs:
                _session_model_dirs.append(path)


def allowed_roots() -> List[str]:
    """Every folder a request's path may lie under, resolved."""
    hf_home = os.environ.get("HF_HOME") or os.path.join("~", ".cache", "huggingface")
    roots = [str(paths.state_dir()), hf_home]
    if os.environ.get("HF_HUB_CACHE"):
        roots.append(os.environ["HF_HUB_CACHE"])
    roots += [p for p in os.environ.get(MODEL_DIRS_ENV, "").split(":") if p]
    with _lock:
        roots += _session_model_dirs
    return [_resolved(root) for root in roots]


def refusal(path: str) -> Optional[str]:
    """Why a request may not name `path`, or None when it lies under an allowed root."""
    if not path or _control(path):
        return "{!r} is not a usable path".format(path)
    resolved = _resolved(path)
    for root in allowed_roots():
        if resolved == root or resolved.startswith(root.rstrip("/") + "/"):
            return None
    return (
        "{!r} is outside this agent's folders and the model directories; "
        "name the folder in the inventory's model_dirs".format(path)
    )
