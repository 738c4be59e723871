"""The zipapp's `__main__.py`: run the agent from a folder beside the zip, so bytecode is cached.

zipimport never writes bytecode, so an agent run from `agent-<sha12>.pyz`
would compile every module it imports at every start. Instead, the first
start on a node unpacks the zip into `agent-<sha12>/` beside it (mode 0700,
written under a temporary name and renamed, so a half-written folder is
never used; two agents starting at once each write their own and the first
rename wins). Every start puts that folder first on `sys.path`, so Python
writes `__pycache__` there for the node's own Python and reads it after.

The folder holds `FOLDER_MARKER`: the zip's size, then the size of every
file. A folder that does not match (a file missing or cut short) is set
aside and unpacked again; anything that fails (a read-only or full cache)
leaves the zip alone on the path, and the agent runs from it as before,
only slower. Where Python may not write bytecode (`PYTHONDONTWRITEBYTECODE`)
nothing is unpacked, since the folder would gain nothing.

The same file is `llmgw_agent/zip_main.py` inside the zip (build_bundle puts
it at the top as `__main__.py` too), stdlib only, Python 3.8+; it is compiled
at every start, so the usual path imports nothing and stats a few files.
"""

import os
import sys

FOLDER_MARKER = ".llmgw-unpacked"
"""The file a complete folder holds: `zip <bytes>`, then `<bytes> <path>` per file."""

STALE_AFTER_S = 600.0
"""A temporary or set-aside folder older than this belongs to no start still running."""


def _wanted(zip_path):
    """The folder's lines for this zip: its size first (the files come from the zip)."""
    return "zip {}".format(os.stat(zip_path).st_size)


def folder_matches(zip_path, folder):
    """Whether `folder` is this zip's, whole: the marker names the zip's size and every file is there at its size."""
    try:
        with open(os.path.join(folder, FOLDER_MARKER)) as handle:
            lines = handle.read().splitlines()
        if not lines or lines[0] != _wanted(zip_path):
            return False
        for line in lines[1:]:
            size, name = line.split(" ", 1)
            if os.stat(os.path.join(folder, name)).st_size != int(size):
                return False
    except (OSError, ValueError):
        return False
    return len(lines) > 1


def _remove(path):
    import shutil

    shutil.rmtree(path, ignore_errors=True)


def _prune(cache):
    """Remove folders of agents whose zip is gone, and old temporary ones."""
    import time

    now = time.time()
    try:
        names = os.listdir(cache)
    except OSError:
        return
    for name in names:
        path = os.path.join(cache, name)
        if not name.startswith("agent-") or not os.path.isdir(path):
            continue
        if ".tmp-" in name or ".stale-" in name:
            try:
                if now - os.stat(path).st_mtime > STALE_AFTER_S:
                    _remove(path)
            except OSError:
                pass
        elif not os.path.exists(path + ".pyz"):
            _remove(path)


def _unpack(zip_path, folder):
    """Write the zip's files into `folder` (temporary name, marker last, then rename)."""
    import zipfile

    suffix = "{}-{}".format(os.getpid(), os.urandom(4).hex())
    temporary = "{}.tmp-{}".format(folder, suffix)
    os.mkdir(temporary, 0o700)
    try:
        lines = [_wanted(zip_path)]
        with zipfile.ZipFile(zip_path) as archive:
            for info in archive.infolist():
                parts = info.filename.split("/")
                if info.is_dir() or info.filename.startswith("/") or ".." in parts:
                    continue
                archive.extract(info, temporary)
                lines.append("{} {}".format(info.file_size, info.filename))
        with open(os.path.join(temporary, FOLDER_MARKER), "w") as handle:
            handle.write("\n".join(lines) + "\n")
        damaged = None
        if os.path.isdir(folder) and not folder_matches(zip_path, folder):
            damaged = "{}.stale-{}".format(folder, suffix)
            os.rename(folder, damaged)
        try:
            os.rename(temporary, folder)
        except OSError:
            if not folder_matches(zip_path, folder):
                raise  # not a rival start's folder: give up on the cache
            _remove(temporary)  # a rival start renamed its own first
    except BaseException:
        _remove(temporary)
        raise
    if damaged:
        _remove(damaged)


def agent_root(zip_path):
    """Where to import the agent from: its folder beside the zip when usable, else the zip."""
    if not zip_path.endswith(".pyz") or not os.path.isfile(zip_path):
        return zip_path
    folder = zip_path[: -len(".pyz")]
    if folder_matches(zip_path, folder):
        return folder
    if sys.dont_write_bytecode:
        return zip_path
    try:
        _unpack(zip_path, folder)
    except Exception:  # a read-only or full cache: the zip still runs
        return zip_path
    _prune(os.path.dirname(folder))  # a new agent is the moment old ones go
    return folder if folder_matches(zip_path, folder) else zip_path


def boot():
    """Run the agent's `main` from the best place; returns its exit code."""
    zip_path = os.path.abspath(sys.argv[0])
    root = agent_root(zip_path)
    if root != zip_path:
        sys.path.insert(0, root)
    import llmgw_agent  # from the folder when it was put first
    from llmgw_agent.__main__ import main

    llmgw_agent.RUNS_FROM = "zip" if root == zip_path else "cache"
    return main()


if __name__ == "__main__":
    sys.exit(boot())
