"""Ports for the suite's servers (gateways, engines, sshd, consoles), one allocator for all.

A port the kernel hands out for a port-0 bind, or to an outgoing connection, may be handed
out again before the test's own server binds it: CI saw a gateway's port taken in between,
by another worker's engine. So ports come from below the kernel's ephemeral range (32768
on), each pytest-xdist worker from a block of its own, one after the other.
"""

from __future__ import annotations

import os
import socket

PORTS_FROM = 21000
PORTS_PER_WORKER = 750
_given = [0]


def free_port() -> int:
    """A port of this worker's block that nothing listens on at 127.0.0.1 now; the block is
    walked round again once used up (the ports a finished test held are free by then)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    block = PORTS_FROM + (int(worker) if worker.isdigit() else 0) % 8 * PORTS_PER_WORKER
    for _ in range(PORTS_PER_WORKER):
        port = block + _given[0] % PORTS_PER_WORKER
        _given[0] += 1
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free port left in {block}–{block + PORTS_PER_WORKER - 1}")
