"""A disaggregated worker's KV path, read from its own start-up line (pure).

The prefill and decode workers of a disaggregated service move each
prompt's KV cache between them; like NCCL's network (`fabric.nccl`), the
path they took is read from what they print, never assumed from what they
were told. Today that is the simulated engine's line
(`llmgw_agent.sim.engine.transfer`: `KV transfer: NixlConnector kv_both over
InfiniBand on mlx5_0:1,mlx5_1:1`); the real libraries' lines are not read yet.

`label` gives the replica page's words (`KV over mlx5_0..3 (IB)`); a worker
whose KV crosses TCP gets a warning, shown red, as a NCCL Socket fallback is.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

_LINE = re.compile(
    r"KV transfer: (?P<connector>\S+) (?P<role>\S+) over (?P<kind>InfiniBand|RoCE|NVLink|RDMA|TCP)"
    r"(?: on (?P<devices>\S+))?"
)
_SHORT = {"InfiniBand": "IB", "RoCE": "RoCE", "RDMA": "RDMA", "NVLink": "NVLink", "TCP": "TCP"}
_NUMBERED = re.compile(r"^(?P<stem>.*?)(?P<number>\d+)$")


@dataclass(frozen=True)
class KvTransport:
    """What one worker said of its KV's path.

    Attributes:
        connector: the engine's name for its connector (`NixlConnector`, `mooncake`).
        role: `prefill`, `decode`, or `either` (vLLM's NIXL workers take both).
        kind: `InfiniBand`, `RoCE`, `RDMA` (Mooncake does not say which), `NVLink` or `TCP`.
        devices: the adapters (or the interface, over TCP) it named, port suffixes dropped.
    """

    connector: str
    role: str
    kind: str
    devices: tuple[str, ...] = ()

    @property
    def over_tcp(self) -> bool:
        """True when the KV crosses the management network."""
        return self.kind == "TCP"


def read_kv_transport(lines: Iterable[str]) -> KvTransport | None:
    """The last transfer line of a worker's log, None when it printed none."""
    found = None
    for line in lines:
        match = _LINE.search(line)
        if match:
            devices = tuple(d.partition(":")[0] for d in (match["devices"] or "").split(",") if d)
            found = KvTransport(match["connector"], match["role"], match["kind"], devices)
    return found


def device_span(devices: Sequence[str]) -> str:
    """`mlx5_0..3` for a run of one stem's numbers, else the names joined: `mlx5_0, mlx5_4`."""
    parts = [_NUMBERED.match(d) for d in devices]
    if len(devices) > 2 and all(parts):
        stems = {p["stem"] for p in parts if p}
        numbers = [int(p["number"]) for p in parts if p]
        if len(stems) == 1 and numbers == list(range(numbers[0], numbers[0] + len(numbers))):
            return f"{stems.pop()}{numbers[0]}..{numbers[-1]}"
    return ", ".join(devices)


def label(transport: KvTransport) -> str:
    """`KV over mlx5_0..3 (IB)`, `KV over NVLink`, `KV over TCP (eno1)`."""
    short = _SHORT[transport.kind]
    if transport.kind == "NVLink" or not transport.devices:
        return f"KV over {short}"
    if transport.over_tcp:
        return f"KV over TCP ({device_span(transport.devices)})"
    return f"KV over {device_span(transport.devices)} ({short})"


def kv_warning(replica: str, node: str, transport: KvTransport) -> str | None:
    """The red line for a worker whose KV crosses TCP; None otherwise."""
    if not transport.over_tcp:
        return None
    return (
        f"{replica} on {node}: the KV cache crosses TCP ({device_span(transport.devices)}),"
        f" not the fabric's rails: every prompt waits for it (check UCX_NET_DEVICES, the"
        f" rails' fabric test, or allow_tcp)"
    )
