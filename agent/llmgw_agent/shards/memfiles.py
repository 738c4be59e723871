"""A shard's PEM secrets handed to its command as anonymous in-memory files (standard library).

Engines read their TLS certificate and key from files named on their command
line (`--ssl-keyfile PATH`). A file on the node would outlive the engine and
could be read by whoever gets at the disk; the key on the command line would
be in `/proc/<pid>/cmdline`, which every user of the node can read. So the
console sends the PEM text as the shard's `secret_env` (`LLMGW_ENGINE_TLS_KEY`,
`LLMGW_ENGINE_TLS_CERT`), and just before a command starts each one its
argv asks for is written into an anonymous memory file (`memfd_create`): the
child inherits the descriptor, the argv's placeholder becomes `/dev/fd/N`
(a path, not the secret), and the variable leaves the child's environment.
The memory goes when the last process holding it exits.

The names are `llmgw_core.engines.identity`'s, kept here in the standard
library (`tests/agent/test_memfiles.py` holds the two to the same names).
"""

from __future__ import annotations

import contextlib
import os
from typing import Dict, List, Optional, Tuple

PEM_FILES = (
    ("LLMGW_ENGINE_TLS_CERT", "@LLMGW_TLS_CERTFILE@"),
    ("LLMGW_ENGINE_TLS_KEY", "@LLMGW_TLS_KEYFILE@"),
)
"""(secret variable, argv placeholder): the PEM text of each, and where its file's path goes."""

NO_MEMFD = (
    "this node cannot hold the engine's TLS key in memory (no memfd_create: Linux 3.17 and "
    "Python 3.8 or later are needed), and the key is never written to its disk"
)


class MemfileError(OSError):
    """A command's PEM files could not be made (the sentence says why)."""


class HeldFiles:
    """A command made ready to start: its argv and environment, and the descriptors it inherits.

    Attributes:
        argv: the command with each placeholder replaced by `/dev/fd/N`.
        env: its environment without the PEM variables.
        fds: the descriptors to pass (`subprocess.Popen(pass_fds=…)`); `close` them
            once the child is started (or failed to start).
    """

    def __init__(self, argv: List[str], env: Dict[str, str], fds: Tuple[int, ...]) -> None:
        self.argv = argv
        self.env = env
        self.fds = fds

    def close(self) -> None:
        """Close this process's descriptors (the started child keeps its own)."""
        for fd in self.fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.fds = ()


def refusal(secret_env: Dict[str, str]) -> Optional[str]:
    """Why a shard carrying PEM secrets cannot be started here (None: it can)."""
    if any(name in secret_env for name, _ in PEM_FILES) and not hasattr(os, "memfd_create"):
        return NO_MEMFD
    return None


def _memory_file(name: str, text: str) -> int:
    """An anonymous memory file holding `text`, read from its start, sealed where it can be."""
    flags = os.MFD_CLOEXEC | getattr(os, "MFD_ALLOW_SEALING", 0)  # pass_fds clears CLOEXEC
    fd = os.memfd_create(name, flags)
    try:
        data = text.encode()
        while data:
            data = data[os.write(fd, data) :]
        os.lseek(fd, 0, os.SEEK_SET)
        _seal(fd)
    except OSError:
        os.close(fd)
        raise
    return fd


def _seal(fd: int) -> None:
    """No process holding the file (the engine included) may change what it says."""
    try:
        import fcntl

        seals = (
            getattr(fcntl, "F_SEAL_WRITE", 0)
            | getattr(fcntl, "F_SEAL_GROW", 0)
            | getattr(fcntl, "F_SEAL_SHRINK", 0)
            | getattr(fcntl, "F_SEAL_SEAL", 0)
        )
        if seals and hasattr(fcntl, "F_ADD_SEALS"):
            fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
    except OSError:
        pass  # a kernel without seals: the file still lives in memory only


def hold(argv: List[str], env: Dict[str, str]) -> HeldFiles:
    """`argv` and `env` made ready: the PEM files its placeholders ask for, in memory.

    Every PEM variable leaves the environment, whether the command asks for its
    file or not (a sidecar never needs the engine's key).

    Raises:
        MemfileError: the argv asks for a file whose variable was not sent, or this
            node cannot make memory files.
    """
    env = dict(env)
    pems = {name: env.pop(name) for name, _ in PEM_FILES if name in env}
    wanted = [(name, mark) for name, mark in PEM_FILES if any(mark in arg for arg in argv)]
    if not wanted:
        return HeldFiles(list(argv), env, ())
    missing = [name for name, _ in wanted if not pems.get(name)]
    if missing:
        raise MemfileError(
            "the command asks for {} but the shard was sent no {}".format(
                " and ".join(mark for name, mark in wanted if name in missing), ", ".join(missing)
            )
        )
    if not hasattr(os, "memfd_create"):
        raise MemfileError(NO_MEMFD)
    fds: List[int] = []
    argv = list(argv)
    try:
        for name, mark in wanted:
            fd = _memory_file("llmgw-" + name.lower().replace("_", "-"), pems[name])
            fds.append(fd)
            path = "/dev/fd/{}".format(fd)
            argv = [arg.replace(mark, path) for arg in argv]
    except OSError as exc:
        HeldFiles(argv, env, tuple(fds)).close()
        raise MemfileError(
            "the engine's TLS files could not be made in memory: {}".format(exc.strerror or exc)
        ) from None
    return HeldFiles(argv, env, tuple(fds))
