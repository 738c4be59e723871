"""Weights an operator has on this machine, put on the nodes that will serve them (SFTP).

A model given as a local GGUF file or model directory is served from the
same absolute path on every node of its replica. A node that already holds
it there — every file at the same size — is left alone; the others get a
copy over SFTP, written beside the target and renamed into place, so a
half-copied model is never mistaken for weights.
"""

from __future__ import annotations

import posixpath
from pathlib import Path

import asyncssh

from llmgw_core.errors import LlmgwError
from llmgw_core.serve.http import EngineReach


def local_files(path: Path) -> dict[str, int]:
    """Every file of a model (a file, or a directory's tree): relative path → size."""
    if path.is_file():
        return {"": path.stat().st_size}
    return {
        str(file.relative_to(path)): file.stat().st_size
        for file in sorted(path.rglob("*"))
        if file.is_file()
    }


async def _remote_size(sftp: asyncssh.SFTPClient, path: str) -> int | None:
    try:
        attributes = await sftp.stat(path)
    except (asyncssh.SFTPError, OSError):
        return None
    return attributes.size


async def _holds(sftp: asyncssh.SFTPClient, target: str, files: dict[str, int]) -> bool:
    for relative, size in files.items():
        where = posixpath.join(target, relative) if relative else target
        if await _remote_size(sftp, where) != size:
            return False
    return True


async def copy_to_node(reach: EngineReach, node: str, local_path: str) -> str:
    """Make `local_path` (a file or a directory) present on `node` at the same path.

    Returns:
        "present" when the node already held it, "copied" otherwise.

    Raises:
        LlmgwError: the copy failed (naming the node and the reason).
    """
    source = Path(local_path)
    files = local_files(source)
    connection = await reach.connection(node)
    try:
        async with connection.start_sftp_client() as sftp:
            if await _holds(sftp, local_path, files):
                return "present"
            await sftp.makedirs(posixpath.dirname(local_path.rstrip("/")), exist_ok=True)
            partial = local_path.rstrip("/") + ".llmgw-partial"
            if await sftp.exists(partial):
                await sftp.rmtree(partial) if await sftp.isdir(partial) else await sftp.remove(
                    partial
                )
            await sftp.put(local_path, partial, recurse=source.is_dir())
            if await sftp.exists(local_path):
                await sftp.rmtree(local_path) if source.is_dir() else await sftp.remove(local_path)
            await sftp.posix_rename(partial, local_path)
    except (asyncssh.Error, OSError) as exc:
        raise LlmgwError(
            f"copying {local_path} to {node} failed: {exc}",
            "check the node's disk and that its user may write that folder",
        ) from None
    return "copied"
