"""Weights an operator has on this machine, put on the nodes that will serve them (SFTP).

A model given as a local GGUF file is served from the same absolute path on
every node of its replica: a node that already holds a file of the same size
there is left alone, the others get a copy over SFTP (written beside it, then
renamed into place, so a half-copied file is never mistaken for weights).
"""

from __future__ import annotations

import posixpath
from pathlib import Path

import asyncssh

from llmgw_core.errors import LlmgwError
from llmgw_core.replica_http import EngineReach


async def _remote_size(sftp: asyncssh.SFTPClient, path: str) -> int | None:
    try:
        attributes = await sftp.stat(path)
    except (asyncssh.SFTPError, OSError):
        return None
    return attributes.size


async def copy_to_node(reach: EngineReach, node: str, local_path: str) -> str:
    """Make `local_path` present on `node` at the same path; says what it did.

    Returns:
        "present" when the node already held it, "copied" otherwise.

    Raises:
        LlmgwError: the copy failed (naming the node and the reason).
    """
    size = Path(local_path).stat().st_size
    connection = await reach.connection(node)
    try:
        async with connection.start_sftp_client() as sftp:
            if await _remote_size(sftp, local_path) == size:
                return "present"
            await sftp.makedirs(posixpath.dirname(local_path), exist_ok=True)
            partial = local_path + ".llmgw-partial"
            await sftp.put(local_path, partial)
            await sftp.posix_rename(partial, local_path)
    except (asyncssh.Error, OSError) as exc:
        raise LlmgwError(
            f"copying {local_path} to {node} failed: {exc}",
            "check the node's disk and that its user may write that folder",
        ) from None
    return "copied"
