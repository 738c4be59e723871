"""Which rails a replica uses, after what the fabric tests found (pure).

A fabric test that finds a rail failing between two nodes is only useful if
the next replica across those nodes stops using it: NCCL spreads its
traffic over every adapter in `NCCL_IB_HCA`, so one rail at 60 % holds the
whole all-reduce to its pace. The rules, each in one function:

* what a test leaves on each node (`verdicts_to_record`): every rail judged
  by `ib_write_bw` (pass, warn or fail) on both of its ends, against the
  node at the other end; TCP rows and pairs that never ran say nothing
  about a rail and are not kept;
* which adapters a replica leaves out (`choose_rails`): on each node, an
  adapter whose newest verdict against another node of the replica is
  `fail`; an adapter never tested is used as before, and a later pass
  brings it back (the newer verdict replaces the older one on the node).
  `rails: all` uses every adapter anyway, with a warning; a node whose every
  rail failed keeps them all (NCCL would otherwise fall back to TCP), with
  a warning too.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from llmgw_core.fabric.verdicts import RailResult

if TYPE_CHECKING:  # the console's first frame draws through here before pydantic is needed
    from llmgw_core.facts import RailVerdict


def verdicts_to_record(results: Sequence[RailResult], measured_at: float) -> dict[str, list[dict]]:
    """Per node, the verdicts a fabric test leaves there (`fabric.record`'s `rails`)."""
    rows: dict[str, list[dict[str, Any]]] = {}
    for result in results:
        if result.method != "ib_write_bw" or result.verdict not in ("pass", "warn", "fail"):
            continue
        for node, adapter, peer in (
            (result.node_a, result.adapter_a, result.node_b),
            (result.node_b, result.adapter_b, result.node_a),
        ):
            if not adapter:
                continue
            rows.setdefault(node, []).append(
                {
                    "peer": peer,
                    "adapter": adapter,
                    "rail": result.rail,
                    "verdict": result.verdict,
                    "ratio": result.ratio,
                    "measured_gbps": result.measured_gbps,
                    "rated_gbps": result.rated_gbps,
                    "measured_at": measured_at,
                }
            )
    return rows


def when(measured_at: float) -> str:
    """A verdict's time for people: `2026-12-01 18:59 UTC`."""
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(measured_at))


@dataclass(frozen=True)
class RailLeftOut:
    """One adapter a replica does not use, and the test that put it out.

    Attributes:
        node: the node the adapter is on.
        adapter: the adapter (`mlx5_5`).
        peer: the node at the other end of the failed test.
        ratio: measured ÷ rated (None when nothing was measured: down, unreachable).
        measured_at: when that test ran (seconds since the epoch).
    """

    node: str
    adapter: str
    peer: str
    ratio: float | None
    measured_at: float

    def finding(self) -> str:
        """What the test found: `60 % of its rate with h100-a-02 at 2026-12-01 18:59 UTC`."""
        found = f"{self.ratio:.0%} of its rate" if self.ratio is not None else "failing"
        return f"{found} with {self.peer} at {when(self.measured_at)}"

    def sentence(self) -> str:
        """The warning: the rail, why, and when it was measured."""
        return (
            f"{self.adapter} on {self.node} is left out of NCCL_IB_HCA: "
            f"its fabric test measured {self.finding()}"
        )

    def as_dict(self) -> dict[str, Any]:
        """The rail as `--json` gives it."""
        return {
            "node": self.node,
            "adapter": self.adapter,
            "peer": self.peer,
            "ratio": None if self.ratio is None else round(self.ratio, 3),
            "measured_at": self.measured_at,
        }


@dataclass(frozen=True)
class RailChoice:
    """The adapters each node of a replica leaves out, and the warnings to show.

    Attributes:
        left_out: every adapter left out, with its reason.
        warnings: one sentence per rail left out, or used despite a failed test.
    """

    left_out: tuple[RailLeftOut, ...] = ()
    warnings: tuple[str, ...] = field(default_factory=tuple)

    def adapters_left_out(self, node: str) -> frozenset[str]:
        """The adapter names `node` leaves out of `NCCL_IB_HCA`."""
        return frozenset(rail.adapter for rail in self.left_out if rail.node == node)


def _adapter_name(hca: str) -> str:
    return hca.partition(":")[0]


def failed_rails(
    node: str, peers: Sequence[str], verdicts: Sequence[RailVerdict]
) -> dict[str, RailLeftOut]:
    """`node`'s adapters whose newest verdict against any of `peers` is a failure, by adapter."""
    newest: dict[tuple[str, str], RailVerdict] = {}
    wanted = set(peers) - {node}
    for verdict in verdicts:
        if verdict.peer not in wanted:
            continue
        key = (verdict.peer, _adapter_name(verdict.adapter))
        if key not in newest or verdict.measured_at >= newest[key].measured_at:
            newest[key] = verdict
    failed: dict[str, RailLeftOut] = {}
    for (peer, adapter), verdict in sorted(newest.items()):
        if verdict.verdict != "fail":
            continue
        seen = failed.get(adapter)
        if seen is None or verdict.measured_at > seen.measured_at:
            failed[adapter] = RailLeftOut(
                node=node,
                adapter=adapter,
                peer=peer,
                ratio=verdict.ratio,
                measured_at=verdict.measured_at,
            )
    return failed


def failed_adapters(verdicts: Sequence[Any]) -> dict[str, str]:
    """Each adapter whose newest verdict against some node is a failure, with what was found.

    For the node page: `{"mlx5_5": "60% of its rate with h100-a-02 at 2026-12-01 18:40 UTC"}`.
    `verdicts` are a node's kept verdicts (models or the raw dicts; unreadable ones are skipped).
    """
    from llmgw_core.facts import RailVerdict

    readable: list[RailVerdict] = []
    for raw in verdicts:
        try:
            readable.append(RailVerdict.model_validate(raw))
        except ValueError:
            continue
    peers = sorted({verdict.peer for verdict in readable})
    failed = failed_rails("", peers, readable)
    return {adapter: rail.finding() for adapter, rail in sorted(failed.items())}


def choose_rails(
    nodes: Sequence[str],
    hcas: Mapping[str, Sequence[str]],
    verdicts: Mapping[str, Sequence[RailVerdict]],
    *,
    all_rails: bool = False,
) -> RailChoice:
    """The adapters a replica across `nodes` leaves out of `NCCL_IB_HCA`, and why.

    Args:
        nodes: the replica's nodes (one node: nothing crosses a rail, nothing is left out).
        hcas: each node's adapters on the replica's fabric, as the inventory names them.
        verdicts: each node's kept fabric verdicts (its facts' `rail_verdicts`).
        all_rails: `rails: all`: use every adapter, warning about the failed ones.
    """
    if len(nodes) < 2:
        return RailChoice()
    left_out: list[RailLeftOut] = []
    warnings: list[str] = []
    for node in nodes:
        on_fabric = [_adapter_name(hca) for hca in hcas.get(node, ())]
        failed = failed_rails(node, nodes, verdicts.get(node, ()))
        failed = {name: rail for name, rail in failed.items() if name in on_fabric}
        if not failed:
            continue
        if all_rails:
            warnings += [
                f"{rail.adapter} on {node} is used (rails: all) although its fabric test "
                f"measured {rail.finding()}"
                for rail in failed.values()
            ]
        elif len(failed) == len(on_fabric):
            warnings.append(
                f"every rail of {node} failed its last fabric test "
                f"({', '.join(r.adapter + ': ' + r.finding() for r in failed.values())}); "
                "all are used, since without them NCCL falls back to TCP"
            )
        else:
            left_out += failed.values()
            warnings += [rail.sentence() for rail in failed.values()]
    return RailChoice(left_out=tuple(left_out), warnings=tuple(warnings))
