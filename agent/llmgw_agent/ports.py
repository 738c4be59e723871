"""Free TCP ports on this node: nothing listens on them and a bind succeeds.

The console picks each engine's HTTP and rendezvous ports. Avoiding the
ports of its own shards is not enough on a shared node: a notebook, another
team's server or a forgotten engine may hold 8000. A port is free here when
no socket in `/proc/net/tcp` or `/proc/net/tcp6` listens on it (any
address, any owner — even one this user cannot see as a process) and a
bind on every IPv4 address succeeds.
"""

from __future__ import annotations

import contextlib
import socket

from llmgw_agent.op_args import REQUIRED, Arg
from llmgw_agent.ops import Op, operation

TYPE_CHECKING = False  # `typing` costs ms of every agent start; annotations are strings here
if TYPE_CHECKING:
    from typing import Any, Iterable, List, Set

_LISTEN = "0A"
"""The state column of a listening socket in /proc/net/tcp."""

MAX_SCANNED = 4096
"""How many ports from `start` are looked at before giving up."""


def listening_ports(tables: Iterable[str] = ("/proc/net/tcp", "/proc/net/tcp6")) -> Set[int]:
    """Every local port a TCP socket listens on, from the kernel's tables."""
    found: Set[int] = set()
    for table in tables:
        try:
            with open(table) as handle:
                rows = handle.read().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            columns = row.split()
            if len(columns) < 4 or columns[3] != _LISTEN:
                continue
            _address, _, port_hex = columns[1].rpartition(":")
            with contextlib.suppress(ValueError):
                found.add(int(port_hex, 16))
    return found


def bindable(port: int) -> bool:
    """True when a listening socket could take `port` on every IPv4 address now."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        # As servers bind: a port in TIME_WAIT after an engine ended is free to them.
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind(("0.0.0.0", port))
        return True
    except OSError:
        return False
    finally:
        probe.close()


def free_ports(start: int, count: int, avoid: Iterable[int] = ()) -> dict:
    """The first `count` ports from `start` that are free here and not in `avoid`.

    Returns:
        `{"ports": [...], "listening": [ports seen listening in the range looked at]}`;
        fewer ports than asked when the range ran out.
    """
    skipped = set(avoid)
    listening = listening_ports()
    ports: List[int] = []
    seen_listening: List[int] = []
    port = start
    while len(ports) < count and port <= 65535 and port - start < MAX_SCANNED:
        if port in listening:
            seen_listening.append(port)
        elif port not in skipped and bindable(port):
            ports.append(port)
        port += 1
    return {"ports": ports, "listening": seen_listening}


@operation(
    Op.PORT_FREE,
    args={
        "start": Arg((int,), REQUIRED, 1, 65535),
        "count": Arg((int,), 1, 1, 64),
        "avoid": Arg((list,), [], items=(int,)),
    },
)
def port_free(given: dict, _call: Any) -> dict:
    """`port.free` `{start, count?=1, avoid?=[]}` → `{ports, listening}`: the first ports from
    `start` nothing listens on here and a bind takes."""
    return free_ports(given["start"], given["count"], given["avoid"])
