"""Hub weights put on the nodes of a replica before its engines start.

For each node of the placement, in this order:

* **present** — the node's model directories hold the repository complete
  (facts `model_dirs`): used as it is;
* **copied** — another node on one of its fabrics holds it complete: the
  files are streamed node → console → node over SFTP. The simplest honest
  version: the bytes cross the operator's machine, so it pays where the
  console sits close to the nodes; a node-to-node copy is not done here;
* **downloaded** — the node fetches it itself with `huggingface_hub`'s
  `snapshot_download`, run by the node's own Python (the one its engines
  use), as a supervised shard-like process (no cards claimed). The token is
  `HF_TOKEN` in its environment only — never argv, never a log line. Bytes
  and rate come from the agent's `download.watch`; the timeout counts from
  the last time bytes moved.

Where the weights go: the path a node already holds them at, else
`<first absolute model dir of rank 0>/<org>/<name>` (what discovery names
`org/name`), else the node's Hub cache (the engines then load the repo id
from it). Every node of the replica uses the same path.

`snapshot_download` is called rather than the CLI: its module moved between
huggingface_hub versions (`commands.huggingface_cli` → `cli.hf`, the `hf`
command in 1.x and 2.x); the function has kept its name and arguments.
"""

from __future__ import annotations

import asyncio
import posixpath
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import asyncssh

from llmgw_agent.ops import Op
from llmgw_core.engines import ShardCommand
from llmgw_core.errors import LlmgwError
from llmgw_core.facts import NodeFacts, StoredModel
from llmgw_core.fleet.client import AgentLost
from llmgw_core.inventory import NodeSpec, PythonEngine
from llmgw_core.serve.http import EngineReach
from llmgw_core.serve.progress import StartProgress, Trace, hub_cache_dir, watch_download

FETCH_SPEC_KIND = "llmgw-fetch"
"""The `spec.kind` of a fetch process: not a replica's shard, so `replicas` leaves it out."""

DOWNLOAD_SCRIPT = (
    "import os, sys\n"
    "from huggingface_hub import snapshot_download\n"
    "repo, revision, local_dir, pattern = sys.argv[1:5]\n"
    "if local_dir:\n"
    "    local_dir = os.path.join(os.path.expanduser('~'), os.path.expanduser(local_dir))\n"
    "print(snapshot_download(repo_id=repo, revision=revision or None,\n"
    "    local_dir=local_dir or None, allow_patterns=[pattern] if pattern else None))\n"
)
"""What a node runs to download a repository (argv: repo, revision, local dir, one pattern).

A relative local dir is taken from the node's home, as the agent's own paths are."""

POLL_S = 0.5
COPY_CHUNK_BYTES = 4 * 1024 * 1024


class FetchFailed(LlmgwError):
    """A node could not get the weights (the reason names the node)."""


@dataclass(frozen=True)
class WeightsPlan:
    """Where a replica's weights come from on each node.

    Attributes:
        path: where every node's engines load them; None: the Hub cache (by repo id).
        present: nodes that hold them complete there already.
        copy_from: a node lacking them → a node of the same fabric that has them.
        download: nodes that download them from the Hub.
        pattern: the one file to fetch (a GGUF), None for the whole repository.
    """

    path: str | None
    present: tuple[str, ...] = ()
    copy_from: Mapping[str, str] = field(default_factory=dict)
    download: tuple[str, ...] = ()
    pattern: str | None = None


def stored_model(facts: NodeFacts | None, repo: str) -> StoredModel | None:
    """The complete copy of `repo` a node's model directories hold, if any."""
    if facts is None:
        return None
    for directory in facts.model_dirs.values():
        for model in directory.models:
            if model.state == "complete" and model.name.rstrip("/") == repo:
                return model
    return None


def _fabrics(spec: NodeSpec) -> set[str]:
    return {fabric.name for fabric in spec.fabrics}


def weights_plan(
    repo: str,
    nodes: Sequence[str],
    specs: Mapping[str, NodeSpec],
    facts: Mapping[str, NodeFacts | None],
    *,
    gguf_file: str | None = None,
) -> WeightsPlan:
    """Which nodes hold `repo`, which copy it from a neighbour, which download it (pure).

    Args:
        repo: the Hub repository.
        nodes: the replica's nodes, rank 0 first.
        specs: every node's inventory entry.
        facts: every ready node's facts (holders outside the replica may lend a copy).
        gguf_file: for a GGUF way, the path on the nodes of the one file served.
    """
    if gguf_file is not None:
        return WeightsPlan(
            path=posixpath.dirname(gguf_file),
            download=tuple(nodes),
            pattern=posixpath.basename(gguf_file),
        )
    held = {name: stored_model(f, repo) for name, f in facts.items()}
    path = next((held[n].path for n in nodes if held.get(n) is not None), None)
    if path is None:
        held_anywhere = next((m.path for m in held.values() if m is not None), None)
        # Only an absolute folder: the engines run in their shard's folder, not the home.
        dirs = [d for d in (specs[nodes[0]].model_dirs if nodes else ()) if d.startswith("/")]
        path = held_anywhere or (posixpath.join(dirs[0], repo) if dirs else None)
    if path is None:
        return WeightsPlan(path=None, download=tuple(nodes))
    holders = [n for n, m in held.items() if m is not None and m.path == path]
    present = tuple(n for n in nodes if n in holders)
    copy_from: dict[str, str] = {}
    download: list[str] = []
    for node in nodes:
        if node in present:
            continue
        near = next((h for h in holders if _fabrics(specs[h]) & _fabrics(specs[node])), None)
        if near is not None:
            copy_from[node] = near
        else:
            download.append(node)
    return WeightsPlan(path=path, present=present, copy_from=copy_from, download=tuple(download))


def home_relative(path: str) -> str:
    """`~/models/x` → `models/x`: the agent resolves a relative path from the node's home."""
    return path[2:] if path.startswith("~/") else path


def node_python(spec: NodeSpec) -> str:
    """The Python a node's engines run with (its venv's), else `python3` on its PATH."""
    for engine in (spec.engines.sglang, spec.engines.llama_cpp):
        if isinstance(engine, PythonEngine):
            return engine.python
    vllm = spec.engines.vllm
    if vllm is not None and "/" in vllm.bin:
        return posixpath.join(posixpath.dirname(vllm.bin), "python3")
    return "python3"


def download_command(
    python: str,
    repo: str,
    revision: str | None,
    local_dir: str | None,
    pattern: str | None = None,
) -> ShardCommand:
    """The node's download of `repo`; the token goes apart (`run_fetch`'s `secret_env`)."""
    return ShardCommand(
        name="fetch",
        argv=(python, "-c", DOWNLOAD_SCRIPT, repo, revision or "", local_dir or "", pattern or ""),
        env={},
    )


def last_error(lines: Sequence[str]) -> str:
    """The line that says what went wrong: a traceback's last line, not the agent's own."""
    for line in reversed(lines):
        text = line.strip()
        if text and not text.startswith("[llmgw]") and not line.startswith((" ", "\t")):
            return text
    return "it printed nothing"


async def run_fetch(
    fleet: Any,
    node: str,
    command: ShardCommand,
    watch_path: str,
    timeout_s: float,
    trace: Trace,
    *,
    replica: str,
    secret_env: Mapping[str, str] | None = None,
) -> str:
    """Run one fetch process on `node` until it ends; the timeout counts from the last byte.

    `secret_env` (the Hub token) reaches the process's environment only: the
    agent keeps it off the node's disk, as it does an engine's.

    Returns:
        what the watch saw: `12.3 GB at 410 MB/s`.

    Raises:
        FetchFailed: it exited with an error (its last lines in the reason),
            stalled for `timeout_s`, or the node stopped answering.
    """
    from llmgw_core.serve.replicas import shard_lines, stop_shard

    args = {
        "replica": f"{replica}-fetch",
        "rank": 0,
        "gpus": [],
        "commands": [command.to_wire()],
        "spec": {"kind": FETCH_SPEC_KIND, "replica": replica, "path": watch_path},
    }
    if secret_env:
        args["secret_env"] = dict(secret_env)
    try:
        started = await fleet.request(node, Op.SHARD_START, args)
    except (LlmgwError, AgentLost) as exc:
        raise FetchFailed(f"{node} could not start its download: {exc}") from None
    shard_id = str(started["shard_id"])
    progress = StartProgress()
    watcher = asyncio.ensure_future(watch_download(fleet, node, watch_path, progress, trace))
    try:
        while True:
            answer = await fleet.request(node, Op.SHARD_LIST)
            record = next(
                (s for s in answer.get("shards", []) if s.get("shard_id") == shard_id), {}
            )
            phase = record.get("phase")
            if phase in ("exited", "failed", "stopped"):
                if record.get("exit_code") == 0:
                    break
                lines = await shard_lines(fleet, node, shard_id, 40)
                why = record.get("reason") or f"exit code {record.get('exit_code')}"
                await stop_shard(fleet, node, shard_id, forget=True)
                raise FetchFailed(f"the download on {node} {phase} ({why}): {last_error(lines)}")
            if time.monotonic() - progress.last_moved > timeout_s:
                await stop_shard(fleet, node, shard_id, forget=True)
                raise FetchFailed(f"the download on {node} moved no byte for {timeout_s:g} s")
            await asyncio.sleep(POLL_S)
    except (LlmgwError, AgentLost) as exc:
        if isinstance(exc, FetchFailed):
            raise
        raise FetchFailed(f"{node} stopped answering during its download: {exc}") from None
    finally:
        watcher.cancel()
        await asyncio.gather(watcher, return_exceptions=True)
    await stop_shard(fleet, node, shard_id, forget=True)
    summary = progress.fetch_summary(node)
    trace.add("fetch ended", node, summary)
    return summary


async def _remote_files(sftp: asyncssh.SFTPClient, root: str) -> dict[str, int]:
    found: dict[str, int] = {}
    for entry in await sftp.readdir(root):
        if entry.filename in (".", ".."):
            continue
        where = posixpath.join(root, entry.filename)
        if await sftp.isdir(where):
            for inner, size in (await _remote_files(sftp, where)).items():
                found[posixpath.join(entry.filename, inner)] = size
        else:
            found[entry.filename] = int(entry.attrs.size or 0)
    return found


async def copy_between(reach: EngineReach, source: str, target: str, path: str) -> int:
    """Stream the model directory at `path` from node `source` to node `target` (same path).

    Written beside the target and renamed into place, so a half copy is never
    taken for weights. Returns the bytes copied.

    Raises:
        FetchFailed: either side failed (naming both nodes).
    """
    partial = path.rstrip("/") + ".llmgw-partial"
    copied = 0
    try:
        source_conn = await reach.connection(source)
        target_conn = await reach.connection(target)
        async with (
            source_conn.start_sftp_client() as src,
            target_conn.start_sftp_client() as dst,
        ):
            files = await _remote_files(src, path)
            if await dst.exists(partial):
                await dst.rmtree(partial)
            for relative in sorted(files):
                await dst.makedirs(
                    posixpath.dirname(posixpath.join(partial, relative)), exist_ok=True
                )
                async with (
                    src.open(posixpath.join(path, relative), "rb") as reader,
                    dst.open(posixpath.join(partial, relative), "wb") as writer,
                ):
                    while chunk := await reader.read(COPY_CHUNK_BYTES):
                        await writer.write(chunk)
                        copied += len(chunk)
            if await dst.exists(path):
                await dst.rmtree(path)
            await dst.posix_rename(partial, path)
    except (asyncssh.Error, OSError) as exc:
        raise FetchFailed(
            f"copying {path} from {source} to {target} failed: {exc}",
            "check the target's disk and that its user may write that folder",
        ) from None
    return copied


async def fetch_weights(
    fleet: Any,
    reach: EngineReach,
    plan: WeightsPlan,
    *,
    repo: str,
    revision: str | None,
    token_env: Mapping[str, str],
    timeout_s: float,
    trace: Trace,
    replica: str,
) -> None:
    """Put the weights on every node of `plan`: copies, then downloads, all at once.

    Raises:
        FetchFailed: the first node that could not get them.
    """
    specs = {s.name: s for s in fleet.inventory.node_specs()}
    for node in plan.present:
        trace.add("weights present", node, plan.path)

    async def copy(node: str, source: str) -> None:
        assert plan.path is not None
        trace.add("copy began", node, f"{plan.path} from {source}")
        copied = await copy_between(reach, source, node, plan.path)
        trace.add("copy ended", node, f"{copied / 1024**3:.1f} GB from {source}")

    async def download(node: str) -> None:
        command = download_command(
            node_python(specs[node]), repo, revision, plan.path, plan.pattern
        )
        watch = home_relative(plan.path) if plan.path else hub_cache_dir(repo)
        await run_fetch(
            fleet, node, command, watch, timeout_s, trace, replica=replica, secret_env=token_env
        )

    jobs = [copy(n, s) for n, s in plan.copy_from.items()] + [download(n) for n in plan.download]
    results = await asyncio.gather(*jobs, return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
