"""Shipping the agent to a node: one zipapp, named by its content, uploaded once.

The zipapp's bytes depend only on the agent's source (entries sorted, fixed
timestamps and modes), so its name `agent-<sha12>.pyz` changes exactly when
the agent does: a node that already has the file is not sent it again, and
two consoles of the same version agree on the name. An upload goes to a
temporary name and is renamed into place, so a node never runs half a file.
Where a site turned SFTP off, the same is done with `cat` on an exec channel.
The zipapp's `__main__.py` is the agent's `zip_main.py`: on a node it unpacks
the zip once into `agent-<sha12>/` beside it and runs from there, so Python
caches the agent's bytecode (zipimport never does); the folder of an agent
whose zip is gone is removed by the next agent that unpacks.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import io
import json
import os
import shlex
import zipfile
from dataclasses import dataclass
from pathlib import Path

import asyncssh

from llmgw_core.errors import LlmgwError

MIN_PYTHON = (3, 8)
REMOTE_CACHE = ".cache/llmgw"
LAUNCHER = ".local/bin/llmgw"
_FIXED_TIME = (1980, 1, 1, 0, 0, 0)
_BUNDLE_LAYOUT = b"llmgw agent zipapp: shebang, deflate, 1980-01-01, 0644\n"
"""Hashed before the entries: a change to how the zip is laid out gives a new name too."""
ZIP_MAIN_SOURCE = "zip_main.py"
"""The agent's file that is also the zipapp's `__main__.py` (it runs the agent from a cached folder)."""

# One round trip answers: which Python, where home is, and what is already there.
_PROBE = (
    "import json, os, sys\n"
    "home = os.path.expanduser('~')\n"
    "agent = os.path.join(home, sys.argv[1])\n"
    "launcher = os.path.join(home, sys.argv[2])\n"
    "try:\n"
    "    launcher_text = open(launcher).read()\n"
    "except (IOError, OSError):\n"
    "    launcher_text = ''\n"
    "print(json.dumps({'python': list(sys.version_info[:3]), 'home': home,\n"
    "    'present': os.path.isfile(agent), 'launcher': sys.argv[1] in launcher_text}))\n"
)


class NodeUnfit(LlmgwError):
    """The node cannot run the agent (no Python, or one too old)."""


@dataclass(frozen=True)
class AgentBundle:
    """The agent zipapp: the files it holds, the name their content gives it, its bytes.

    The name is a hash of the entries (names and contents, in order) and of the
    zip's layout, so it changes exactly when the zip's bytes would; the zip
    itself is built only when an upload needs it. Every headless run needs the
    name, few need the bytes, and compressing them is a share of a start.
    """

    entries: tuple[tuple[str, bytes], ...]
    sha12: str

    @functools.cached_property
    def payload(self) -> bytes:
        """The zipapp's bytes: a shebang line, then the entries with fixed times and modes."""
        buffer = io.BytesIO()
        buffer.write(b"#!/usr/bin/env python3\n")
        with zipfile.ZipFile(buffer, "w") as archive:
            for name, content in self.entries:
                member = zipfile.ZipInfo(name, date_time=_FIXED_TIME)
                member.compress_type = zipfile.ZIP_DEFLATED
                member.external_attr = 0o100644 << 16
                member.create_system = 3
                archive.writestr(member, content)
        return buffer.getvalue()

    @property
    def file_name(self) -> str:
        """`agent-<sha12>.pyz`."""
        return f"agent-{self.sha12}.pyz"


@dataclass(frozen=True)
class Deployment:
    """Where the agent is on a node and what it took to put it there."""

    agent_path: str
    home: str
    python_version: str
    uploaded: bool


def agent_source_dir() -> Path:
    """The `llmgw_agent` package folder, found without importing it."""
    spec = importlib.util.find_spec("llmgw_agent")
    if spec is None or not spec.submodule_search_locations:
        raise LlmgwError("the llmgw_agent package is not installed beside llmgw_core")
    return Path(next(iter(spec.submodule_search_locations)))


def build_bundle(source: Path) -> AgentBundle:
    """A reproducible zipapp of the agent package at `source`.

    Entries are sorted, timestamps and modes fixed, and caches left out, so the
    same source always gives the same bytes and the same name.
    """
    files = sorted(
        path
        for path in source.rglob("*")
        if path.is_file()
        and "__pycache__" not in path.parts
        and path.suffix not in {".pyc", ".pyo"}
    )
    entries = [("__main__.py", (source / ZIP_MAIN_SOURCE).read_bytes())]
    entries += [
        (f"{source.name}/{path.relative_to(source).as_posix()}", path.read_bytes())
        for path in files
    ]
    entries.sort()
    digest = hashlib.sha256(_BUNDLE_LAYOUT)
    for name, content in entries:
        digest.update(b"%s\0%d\0" % (name.encode(), len(content)))
        digest.update(content)
    return AgentBundle(entries=tuple(entries), sha12=digest.hexdigest()[:12])


@functools.lru_cache(maxsize=1)
def agent_bundle() -> AgentBundle:
    """The agent this console ships, built once per process."""
    return build_bundle(agent_source_dir())


def launcher_text(agent_file_name: str) -> str:
    """The `~/.local/bin/llmgw` script: `llmgw doctor` on the node runs this agent."""
    return f'#!/bin/sh\nexec python3 "$HOME/{REMOTE_CACHE}/{agent_file_name}" "$@"\n'


async def ensure_agent(
    connection: asyncssh.SSHClientConnection, node: str, bundle: AgentBundle | None = None
) -> Deployment:
    """Make sure the node has this agent (and its launcher); upload only what is missing.

    Raises:
        NodeUnfit: no `python3` on the node, or one older than 3.8.
        LlmgwError: the probe or the upload failed, in one sentence.
    """
    bundle = bundle or agent_bundle()
    remote_agent = f"{REMOTE_CACHE}/{bundle.file_name}"
    probe = await connection.run(
        " ".join(["python3", "-c", shlex.quote(_PROBE), remote_agent, LAUNCHER]), check=False
    )
    found = _read_probe(node, probe)
    version = tuple(found["python"])
    shown_version = ".".join(str(part) for part in version)
    if version < MIN_PYTHON:
        raise NodeUnfit(
            f"{node} has Python {shown_version}; the agent needs 3.8 or newer",
            "install python3.8+ on the node (it needs nothing else)",
        )
    home = str(found["home"])
    agent_path = f"{home}/{remote_agent}"
    files: list[tuple[str, bytes, int]] = []
    if not found["present"]:
        files.append((agent_path, bundle.payload, 0o644))
    if files or not found["launcher"]:
        files.append((f"{home}/{LAUNCHER}", launcher_text(bundle.file_name).encode(), 0o755))
    try:
        await _put_files(connection, files)
    except (OSError, asyncssh.Error) as exc:
        raise LlmgwError(
            f"uploading the agent to {node} failed: {exc}",
            "check that the user's home on the node is writable and not full",
        ) from None
    uploaded = not found["present"]
    return Deployment(
        agent_path=agent_path, home=home, python_version=shown_version, uploaded=uploaded
    )


def _read_probe(node: str, probe: asyncssh.SSHCompletedProcess) -> dict[str, object]:
    if probe.exit_status == 127:
        raise NodeUnfit(
            f"{node} has no python3 on its PATH; the agent needs Python 3.8 or newer",
            "install python3 on the node (it needs nothing else)",
        )
    stdout = probe.stdout if isinstance(probe.stdout, str) else ""
    try:
        found = json.loads(stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        stderr = probe.stderr if isinstance(probe.stderr, str) else ""
        detail = (stderr.strip().splitlines() or ["no output"])[-1]
        raise LlmgwError(
            f"checking Python on {node} failed (exit {probe.exit_status}): {detail}"
        ) from None
    if not isinstance(found, dict) or not {"python", "home", "present", "launcher"} <= set(found):
        raise LlmgwError(f"checking Python on {node} gave an answer we cannot read: {stdout!r}")
    return found


async def _put_files(
    connection: asyncssh.SSHClientConnection, files: list[tuple[str, bytes, int]]
) -> None:
    """Write each (path, content, mode) atomically: over SFTP, or `cat` where SFTP is off."""
    if not files:
        return
    try:
        sftp_client = await connection.start_sftp_client()
    except asyncssh.ChannelOpenError:
        # Some sites remove sshd's `Subsystem sftp`: the exec channel still works.
        for path, content, mode in files:
            await _put_by_exec(connection, path, content, mode)
        return
    async with sftp_client as sftp:
        for path, content, mode in files:
            await _put_atomically(sftp, path, content, mode)


async def _put_by_exec(
    connection: asyncssh.SSHClientConnection, path: str, content: bytes, mode: int
) -> None:
    script = (
        'set -e; mkdir -p "$(dirname "$1")"; t="$1.tmp-$$"; '
        f'cat > "$t"; chmod {mode:o} "$t"; mv -f "$t" "$1"'
    )
    done = await connection.run(
        f"/bin/sh -c {shlex.quote(script)} put {shlex.quote(path)}",
        input=content,
        encoding=None,
        check=False,
    )
    if done.exit_status != 0:
        said = (done.stderr or b"").decode(errors="replace").strip().splitlines()
        raise OSError(f"writing {path} failed: {said[-1] if said else done.exit_status}")


async def _put_atomically(sftp: asyncssh.SFTPClient, path: str, content: bytes, mode: int) -> None:
    """Write under a temporary name, then rename over the final one."""
    folder = path.rsplit("/", 1)[0]
    await sftp.makedirs(folder, exist_ok=True)
    temporary = f"{path}.tmp-{os.getpid()}-{os.urandom(4).hex()}"
    async with sftp.open(temporary, "wb") as handle:
        await handle.write(content)
    await sftp.chmod(temporary, mode)
    try:
        await sftp.posix_rename(temporary, path)
    except asyncssh.SFTPOpUnsupported:
        await sftp.rename(temporary, path)


ABSENT_LINE = '{"absent": true}'
"""What the serve command prints instead of a hello when the node lacks this agent."""


def serve_command(
    bundle: AgentBundle | None = None,
    *,
    agent_path: str | None = None,
    replay: str | None = None,
    state_dir: str | None = None,
) -> str:
    """The command that starts the agent's protocol on the channel, if the node has it.

    Without `agent_path` it looks for this bundle in the node's cache: the
    usual case (agent already there) then costs one Python start, not two. When
    the file is missing it prints `ABSENT_LINE` instead of a hello.

    Replay and state dir travel as environment, so the shards the agent
    starts (and the sim engine) see the same ones. The script runs under
    `sh` whatever the user's login shell is.
    """
    bundle = bundle or agent_bundle()
    path = shlex.quote(agent_path) if agent_path else f'"$HOME/{REMOTE_CACHE}/{bundle.file_name}"'
    env = []
    if replay:
        env.append(f"LLMGW_AGENT_REPLAY={shlex.quote(replay)}")
    if state_dir:
        env.append(f"LLMGW_AGENT_STATE={shlex.quote(state_dir)}")
    prefix = f"env {' '.join(env)} " if env else ""
    script = (
        f"a={path}; "
        f'if [ ! -f "$a" ]; then echo {shlex.quote(ABSENT_LINE)}; exit 0; fi; '
        f'exec {prefix}python3 "$a" serve'
    )
    return f"/bin/sh -c {shlex.quote(script)}"


def agent_command(
    deployment: Deployment, *, replay: str | None = None, state_dir: str | None = None
) -> str:
    """The serve command for an agent just deployed (see `serve_command`)."""
    return serve_command(agent_path=deployment.agent_path, replay=replay, state_dir=state_dir)
