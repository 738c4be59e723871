"""Finding a program on PATH, without `shutil`.

`shutil.which` would be the obvious call, but importing `shutil` loads bz2,
lzma and fnmatch (3 to 4 ms of every agent start on a 2-core node), and the
agent's facts ask for a few programs at every start. This is the same search
for the agent's needs: a name with a slash is taken as given, else each PATH
folder in order; the first regular file we may execute wins.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # `typing` costs ms of every agent start; annotations are strings here
if TYPE_CHECKING:
    from typing import Optional


def _runnable(path: str) -> bool:
    return os.path.isfile(path) and os.access(path, os.X_OK)


def which(name: str) -> Optional[str]:
    """The path of program `name` as PATH finds it, or None."""
    if not name:
        return None
    if os.sep in name:
        return name if _runnable(name) else None
    for folder in os.environ.get("PATH", os.defpath).split(os.pathsep):
        path = os.path.join(folder or os.curdir, name)
        if _runnable(path):
            return path
    return None
