"""IMEX: `nvidia-imex-ctl -N` and the channel device a domain's jobs need.

`-N` prints a legend, a timestamp, `Node #<i> - <ip> - <STATE>` lines (with
`- Version: <v>` on newer daemons), a connectivity matrix and `Domain State:`.
Lines outside that shape (the ComputeDomain wrapper's extra `READY` lines, the
legend) are skipped.
"""

from __future__ import annotations

import re
from pathlib import Path

from llmgw_agent.discover.fields import ascii_int

TYPE_CHECKING = False  # `typing` costs ms of every agent start; annotations are strings here
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional

CHANNEL_DIR = "dev/nvidia-caps-imex-channels"
"""Where IMEX channel devices live, relative to `/` (or to a capture directory)."""

_NODE = re.compile(r"^Node\s+#([0-9]+)\s+-\s+(\S+)\s+-\s+([A-Z_]+)(?:\s+-\s+Version:\s+(\S+))?\s*$")
_ROW = re.compile(r"^\s*([0-9]+)\s+((?:(?:[A-Z]|!V!|!M!)\s*)+)$")


def parse_imex_nodes(text: str) -> Dict[str, Any]:
    """`nvidia-imex-ctl -N` -> `{state, nodes, connectivity_ok}`.

    `nodes` are `{index, address, state, version}`; `connectivity_ok` is True
    when every cell of the matrix is `C` (connected), False when one is not,
    None when no matrix was printed.
    """
    nodes: List[Dict[str, Any]] = []
    state: Optional[str] = None
    cells: List[str] = []
    in_matrix = False
    for raw in text.splitlines():
        line = raw.rstrip()
        node = _NODE.match(line.strip())
        index = ascii_int(node.group(1)) if node else None
        if node and index is not None:
            nodes.append(
                {
                    "index": index,
                    "address": node.group(2),
                    "state": node.group(3),
                    "version": node.group(4),
                }
            )
            continue
        if line.strip().startswith("Nodes From"):
            in_matrix = True
            continue
        domain = re.match(r"^\s*Domain State:\s*(\S+)", line)
        if domain:
            state = domain.group(1).upper()
            in_matrix = False
            continue
        if in_matrix:
            row = _ROW.match(line)
            if row:
                cells.extend(row.group(2).split())
    return {
        "state": state,
        "nodes": nodes,
        "connectivity_ok": (all(c == "C" for c in cells) if cells else None),
    }


def imex_channels(root: Path) -> List[str]:
    """The IMEX channel devices present under `root` (`/`, or a capture directory)."""
    directory = root / CHANNEL_DIR
    if not directory.is_dir():
        return []
    return sorted(p.name for p in directory.iterdir() if p.name.startswith("channel"))
