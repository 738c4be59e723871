"""`nvidia-smi topo -m`: the GPU x GPU matrix, NIC affinity and each GPU's NUMA node.

Raw output is tab separated with an ANSI-underlined header; pasted copies
turn tabs into spaces. So: strip ANSI codes, split on whitespace, take the
leading `GPU<n>`/`NIC<n>` header tokens as matrix columns, and read what is
left of a GPU row as `CPU Affinity`, `NUMA Affinity`, `GPU NUMA ID`. NIC
columns are named by the `NIC Legend:` block; older drivers put `mlx5_0`
straight into the header.
"""

from __future__ import annotations

import re

from llmgw_agent.discover.fields import ascii_int, whole

TYPE_CHECKING = False  # `typing` costs ms of every agent start; annotations are strings here
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional

_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_COLUMN = re.compile(r"^(GPU[0-9]{1,16}|NIC[0-9]+|mlx[0-9]+_\w+)$", re.ASCII)
_LEGEND_NIC = re.compile(r"^\s*(NIC[0-9]+):\s*(\S+)\s*$")

# How close a NIC is to a GPU, closest first (NV# never links a GPU to a NIC).
_CLOSENESS = ("PIX", "PXB", "PHB", "NODE", "SYS")


def parse_topo(text: str) -> Dict[str, Any]:
    """`topo -m` -> `{gpus, nics, matrix, affinity}`.

    `matrix[row][column]` holds the cell kind (`NV18`, `PIX`, `SYS` ...) by
    header names, NIC columns already renamed to their devices (`mlx5_0`);
    `affinity[gpu] = {cpus, numa_node, gpu_numa_id}`.
    """
    lines = [_ANSI.sub("", line).rstrip("\n") for line in text.splitlines()]
    header: List[str] = []
    header_at = -1
    for at, line in enumerate(lines):
        # The header is the first line that starts blank and whose first word is a column.
        tokens = line.split()
        if not tokens or line[:1].strip() or not _COLUMN.match(tokens[0]):
            continue
        for token in tokens:
            if not _COLUMN.match(token):
                break  # `CPU Affinity` and the other multi-word columns follow
            header.append(token)
        header_at = at
        break
    if not header:
        return {"gpus": [], "nics": [], "matrix": {}, "affinity": {}}
    legend: Dict[str, str] = {}
    for line in lines[header_at + 1 :]:
        match = _LEGEND_NIC.match(line)
        if match:
            legend[match.group(1)] = match.group(2)

    def rename(column: str) -> str:
        return legend.get(column, column)

    matrix: Dict[str, Dict[str, str]] = {}
    affinity: Dict[str, Dict[str, Any]] = {}
    for line in lines[header_at + 1 :]:
        if not line[:1].strip():
            continue  # legend lines and blank lines start with spaces
        if line.startswith(("Legend", "NIC Legend")):
            break
        cells = line.split("\t") if "\t" in line else None
        tokens = line.split()
        row = tokens[0]
        if not _COLUMN.match(row):
            continue
        values = tokens[1 : 1 + len(header)]
        # A cell the tool never prints (`NV²`) is left out: the matrix is then not
        # whole, and the capture is named damaged instead of read as "no NVLink".
        matrix[rename(row)] = {
            rename(col): val for col, val in zip(header, values) if val.isascii()
        }
        if row.startswith("GPU"):
            tail = _affinity_tail(cells, tokens, len(header))
            affinity[row] = tail
    gpus = [c for c in header if c.startswith("GPU")]
    nics = [rename(c) for c in header if not c.startswith("GPU")]
    return {"gpus": gpus, "nics": nics, "matrix": matrix, "affinity": affinity}


def _affinity_tail(cells: Optional[List[str]], tokens: List[str], columns: int) -> Dict[str, Any]:
    if cells is not None:
        # Tab separated: fields keep their places even when one is empty.
        tail = [c.strip() for c in cells[1 + columns :]]
    else:
        tail = tokens[1 + columns :]
    while len(tail) < 3:
        tail.append("")
    return {
        "cpus": tail[0] or None,
        "numa_node": whole(tail[1]),
        "gpu_numa_id": whole(tail[2]),
    }


def nvlink_matrix(topo: Dict[str, Any]) -> Dict[str, Dict[str, str]]:
    """The GPU x GPU cells over GPU indices: `{"0": {"1": "NV18", ...}, ...}`, no diagonal."""
    result: Dict[str, Dict[str, str]] = {}
    for row in topo["gpus"]:
        cells = topo["matrix"].get(row, {})
        result[row[3:]] = {
            col[3:]: cells[col] for col in topo["gpus"] if col != row and col in cells
        }
    return result


def nic_affinity(topo: Dict[str, Any]) -> Dict[str, Dict[str, str]]:
    """Each NIC's cell towards each GPU: `{"mlx5_0": {"0": "PIX", ...}}`."""
    result: Dict[str, Dict[str, str]] = {}
    for nic in topo["nics"]:
        result[nic] = {}
        for gpu in topo["gpus"]:
            cell = topo["matrix"].get(gpu, {}).get(nic)
            if cell is not None:
                result[nic][gpu[3:]] = cell
    return result


def nearest_nics(topo: Dict[str, Any]) -> Dict[int, Optional[str]]:
    """Each GPU index's nearest NIC (PIX before PXB, PHB, NODE), None when all are SYS.

    Where several GPUs tie on the same NICs (two GPUs behind one switch with
    two NICs), they are spread over them in order rather than all given the first.
    """
    result: Dict[int, Optional[str]] = {}
    taken: Dict[tuple, int] = {}
    for gpu in topo["gpus"]:
        cells = topo["matrix"].get(gpu, {})
        best_rank = len(_CLOSENESS) - 1  # SYS is never "near"
        best: List[str] = []
        for nic in topo["nics"]:
            cell = cells.get(nic)
            if cell not in _CLOSENESS[:-1]:
                continue
            rank = _CLOSENESS.index(cell)
            if rank < best_rank or not best:
                best_rank, best = rank, [nic]
            elif rank == best_rank:
                best.append(nic)
        index = ascii_int(gpu[3:])  # `GPU` and at most 16 ASCII digits (`_COLUMN`)
        if index is None:
            continue
        if not best:
            result[index] = None
            continue
        key = tuple(best)
        turn = taken.get(key, 0)
        taken[key] = turn + 1
        result[index] = best[turn % len(best)]
    return result


def is_whole(parsed: Optional[Dict[str, Any]]) -> bool:
    """True when every GPU of the header has a row with a cell for every column, and every row a column.

    A cut or garbled capture otherwise reads as "no NVLink" between cards
    that have it, and the planner would split a model across PCIe.
    """
    if not parsed or not parsed.get("gpus"):
        return False
    names = set(parsed["gpus"]) | set(parsed.get("nics") or [])
    matrix = parsed.get("matrix") or {}
    if not set(matrix) <= names:  # rows the (cut) header does not name
        return False
    return all(len(matrix.get(gpu) or {}) == len(names) for gpu in parsed["gpus"])
