"""Two consoles racing for the same cards, round after round, over real SSH.

Each round both consoles serve an 8-card replica at the same moment; with
the same view of the fleet both place it on the same node, and the agent's
O_EXCL claim files decide who wins. The loser is told `busy` and places
again. After each round the cards both replicas run on are compared and
every node's claims are read back: a card given twice is a double-booking.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any

from bench import LLAMA, Bench, FleetContext, step

from llmgw_core.serve.replicas import stop_replica


@dataclass
class RaceFigures:
    """What the races came to."""

    rounds: int = 0
    serves_ok: int = 0
    lost_races: int = 0
    """How many times a console was told `busy` and placed again."""
    double_bookings: int = 0
    failures: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def summary(self) -> str:
        return (
            f"{self.rounds} rounds, {self.serves_ok} of {2 * self.rounds} serves ready, "
            f"{self.lost_races} lost races placed again, {self.double_bookings} double-bookings, "
            f"{self.seconds:.1f} s ({self.seconds / max(1, self.rounds):.2f} s a round)"
        )


async def _claimed(ctx: FleetContext) -> dict[tuple[str, str], str]:
    fleet = await ctx.live_fleet()
    found = {}
    for node in fleet.snapshot().ready():
        for claim in (await fleet.request(node.name, "claims"))["claims"]:
            found[(node.name, str(claim["gpu"]))] = str(claim["shard_id"])
    return found


async def _round(one: FleetContext, two: FleetContext, number: int, figures: RaceFigures) -> None:
    names = (f"race-a-{number}", f"race-b-{number}")
    outcomes: list[Any] = await asyncio.gather(
        *(
            step(
                ctx,
                "serve",
                model=LLAMA,
                context=32768,
                gpu_class="h100-80g",
                gpus=8,
                nodes=1,
                name=name,
                wait="started",
            )
            for ctx, name in ((one, names[0]), (two, names[1]))
        )
    )
    taken: list[tuple[str, str]] = []
    for outcome in outcomes:
        if not outcome.ok:
            figures.failures.append(f"round {number}: {outcome.error}")
            continue
        figures.serves_ok += 1
        figures.lost_races += sum(
            1 for e in outcome.result["trace"] if e["step"] == "lost a race for cards"
        )
        taken += [
            (node["node"], str(gpu))
            for node in outcome.result["placement"]["nodes"]
            for gpu in node["gpus"]
        ]
    claimed = await _claimed(one)
    doubled = len(taken) - len(set(taken))
    unclaimed = [card for card in taken if card not in claimed]
    figures.double_bookings += doubled + len(unclaimed)
    fleet = await one.live_fleet()
    for name in names:
        await stop_replica(fleet, name)
    left = await _claimed(one)
    if left:
        figures.failures.append(f"round {number}: claims left after stopping: {sorted(left)}")


def race(bench: Bench, rounds: int) -> RaceFigures:
    """`rounds` rounds of two consoles (in this process, each its own SSH connections)."""
    one, two = bench.console(), bench.console()
    figures = RaceFigures()
    began = time.monotonic()
    try:
        for number in range(rounds):
            bench.run(_round(one, two, number, figures))
            figures.rounds += 1
    finally:
        figures.seconds = time.monotonic() - began
        bench.close_console(one)
        bench.close_console(two)
    return figures
