"""The fault matrix: each fault one function, the same invariant check after each.

A fault function takes the bench, does what an operator would do (serve,
then the fault, then `replicas` with heal, as the console does on its own)
and returns what the operator saw and how the replica ended. `run_fault`
then reads every node through a fresh console and checks the invariants of
`invariants.py`; the fault's replicas are stopped afterwards, so each fault
starts on an empty fleet.
"""

from __future__ import annotations

import asyncio
import errno
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent_process import AgentClient, agent_env
from bench import LLAMA, NODES, Bench, FleetContext, step
from invariants import Invariants, check

from llmgw_core.serve.replicas import stop_replica


@dataclass
class FaultOutcome:
    """One row of the matrix."""

    fault: str
    saw: str
    """What the operator saw, in the console's own words."""
    ended: str
    """How the replica ended: `ready on …` or `failed: <reason>`."""
    invariants: Invariants | None = None
    seconds: float = 0.0
    cleanup: Callable[[], None] | None = None
    """Run after the check and the clearing (to undo the fault itself, e.g. unmount)."""

    def row(self) -> str:
        held = self.invariants.summary() if self.invariants else "not checked"
        return (
            f"{self.fault}\n    saw:        {self.saw}\n    ended:      {self.ended}\n"
            f"    invariants: {held}\n    took:       {self.seconds:.1f} s"
        )


def serve(bench: Bench, ctx: FleetContext, name: str, *, nodes: int = 1) -> dict[str, Any]:
    """Serve the 70B model as `name` on 8 cards per node; the step's result."""
    outcome = bench.step(
        ctx,
        "serve",
        model=LLAMA,
        context=32768,
        gpu_class="h100-80g",
        gpus=8,
        nodes=nodes,
        name=name,
    )
    assert outcome.ok, outcome.error
    return outcome.result


def replica(bench: Bench, ctx: FleetContext, name: str, *, heal: bool = True) -> dict[str, Any]:
    """`replicas` (heal on, no grace) for one replica, as the console runs it on a refresh."""
    outcome = bench.step(ctx, "replicas", name=name, grace=0, heal=heal)
    row = next(iter(outcome.result["replicas"]), None)
    healed = [h for h in outcome.result.get("healed", []) if h["name"] == name]
    return {"row": row, "healed": healed}


def ended(row: dict[str, Any] | None) -> str:
    """How a replica row ended, in one line."""
    if row is None:
        return "gone: no shard of it is left on any node"
    nodes = sorted({s["node"] for s in row["shards"] if s["phase"] not in ("stopped", "failed")})
    if row["phase"] == "ready":
        return f"ready on {', '.join(nodes)}"
    return f"{row['phase']}: {row['reason']}"


def shards_of(bench: Bench, ctx: FleetContext, node: str, name: str) -> list[dict[str, Any]]:
    """`node`'s shards of replica `name`, as its agent lists them."""

    async def read() -> list[dict[str, Any]]:
        fleet = await ctx.live_fleet()
        answer = await fleet.request(node, "shard.list")
        return [s for s in answer["shards"] if s["replica"] == name]

    return bench.run(read())


def wait_served(bench: Bench, ctx: FleetContext, node: str, name: str) -> dict[str, Any]:
    """Rank's shard on `node` once its supervisor has seen the engine's health answer."""

    async def served(fleet: Any) -> dict[str, Any] | None:
        answer = await fleet.request(node, "shard.list")
        return next((s for s in answer["shards"] if s["replica"] == name and s["served"]), None)

    return bench.wait_until(ctx, served)


def agent_pid(bench: Bench, node: str) -> int:
    """The pid of `node`'s agent (the protocol process, not a supervisor)."""
    state = str(bench.state_dir(node))
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            environ = Path(f"/proc/{entry}/environ").read_bytes().split(b"\0")
        except OSError:
            continue
        ours = f"LLMGW_AGENT_STATE={state}".encode() in environ
        if ours and b"serve" in cmdline and b"python" in cmdline[0]:
            return int(entry)
    raise LookupError(f"no agent runs for {node}")


async def _answers(fleet: Any, node: str) -> bool:
    """Whether `node`'s agent answers this console now (its channel is to the new agent)."""
    try:
        await fleet.request(node, "ping", timeout_s=5)
    except Exception:  # a lost channel: the console is still reconnecting
        return False
    return True


def _agent_pid_or_none(bench: Bench, node: str) -> int | None:
    try:
        return agent_pid(bench, node)
    except LookupError:
        return None


# --- the faults ---------------------------------------------------------------------------


def engine_killed(bench: Bench, ctx: FleetContext) -> FaultOutcome:
    """SIGKILL the engine of a serving replica: it fails, frees its cards and is placed again."""
    served = serve(bench, ctx, "f-engine")
    node = served["placement"]["nodes"][0]["node"]
    shard = wait_served(bench, ctx, node, "f-engine")
    os.kill(int(shard["main_pid"]), signal.SIGKILL)
    first = replica(bench, ctx, "f-engine", heal=False)["row"]
    deadline = time.monotonic() + 30
    while first["phase"] != "failed" and time.monotonic() < deadline:
        time.sleep(0.1)
        first = replica(bench, ctx, "f-engine", heal=False)["row"]
    after = replica(bench, ctx, "f-engine")
    healed = after["healed"][0]["outcome"] if after["healed"] else "not healed"
    return FaultOutcome(
        "engine process killed (SIGKILL)",
        f"{first['phase']}: {first['reason']}; heal: {healed}",
        ended(after["row"]),
    )


def agent_killed(bench: Bench, ctx: FleetContext) -> FaultOutcome:
    """SIGKILL a node's agent under a serving replica: the node comes back, the replica runs on."""
    served = serve(bench, ctx, "f-agent")
    node = served["placement"]["nodes"][0]["node"]
    killed = agent_pid(bench, node)
    os.kill(killed, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while _agent_pid_or_none(bench, node) in (killed, None) and time.monotonic() < deadline:
        time.sleep(0.05)
    bench.wait_until(ctx, lambda fleet: _answers(fleet, node))
    after = replica(bench, ctx, "f-agent")
    asked = bench.step(ctx, "ask", replica="f-agent", prompt="still there?")
    return FaultOutcome(
        "agent killed (SIGKILL)",
        f"{node} reconnected; ask after: {'answered' if asked.ok else asked.error}",
        ended(after["row"]),
    )


def node_lost(bench: Bench, ctx: FleetContext) -> FaultOutcome:
    """A node of a two-node replica stops answering: failed, placed again on the nodes left."""
    served = serve(bench, ctx, "f-node", nodes=2)
    lost = served["placement"]["nodes"][1]["node"]
    wait_served(bench, ctx, served["placement"]["nodes"][0]["node"], "f-node")
    server = bench.server(lost)
    port = server.port
    bench.run(server.stop())
    bench.wait_state(ctx, lost, "unreachable")
    during = replica(bench, ctx, "f-node")
    healed = during["healed"][0] if during["healed"] else {"outcome": "not healed", "reason": ""}
    bench.run(server.start(port))
    bench.wait_state(ctx, lost, "ready")
    after = replica(bench, ctx, "f-node")  # the console's next refresh, with the node back
    return FaultOutcome(
        f"node lost under a 2-node replica ({lost})",
        f"heal: {healed['outcome']} ({healed.get('reason') or 'placed again'})",
        ended(after["row"]),
    )


def ssh_cut_mid_serve(bench: Bench, ctx: FleetContext) -> FaultOutcome:
    """Every SSH connection to rank 1's node dropped while the replica starts."""

    async def serve_and_cut() -> Any:
        fleet = await ctx.live_fleet()
        task = asyncio.ensure_future(
            step(
                ctx,
                "serve",
                model=LLAMA,
                context=32768,
                gpu_class="h100-80g",
                gpus=8,
                nodes=2,
                name="f-cut",
            )
        )
        cut = None
        while not task.done() and cut is None:
            for node in NODES:
                if any(
                    p.name.startswith("f-cut-r1")
                    for p in (bench.state_dir(node) / "shards").glob("*")
                ):
                    cut = node
            await asyncio.sleep(0.005)
        if cut is not None:
            for connection in list(bench.server(cut).connections):
                connection.close()
        outcome = await task
        await fleet.wait_for(lambda snap: all(n.state == "ready" for n in snap.nodes.values()), 60)
        return cut, outcome

    cut, outcome = bench.run(serve_and_cut())
    saw = "ready" if outcome.ok else outcome.error
    after = replica(bench, ctx, "f-cut")
    return FaultOutcome(
        f"SSH cut mid-serve ({cut or 'no shard seen'})",
        f"serve: {saw}",
        ended(after["row"]),
    )


def run_fault(bench: Bench, fault: Callable[[Bench, FleetContext], FaultOutcome]) -> FaultOutcome:
    """Run one fault on a fresh console, check the invariants, then clear its replicas."""
    began = time.monotonic()
    ctx = bench.console()
    try:
        outcome = fault(bench, ctx)
    finally:
        bench.close_console(ctx)
    checker = bench.console()
    try:
        outcome.invariants = bench.run(check_all(bench, checker))
        bench.run(clear(checker))
    finally:
        bench.close_console(checker)
        if outcome.cleanup is not None:
            outcome.cleanup()
    outcome.seconds = time.monotonic() - began
    return outcome


async def check_all(bench: Bench, ctx: FleetContext) -> Invariants:
    """The invariants over every node of the bench."""
    fleet = await ctx.live_fleet()
    return await check(fleet, {node: bench.state_dir(node) for node in bench.demo.servers})


async def clear(ctx: FleetContext) -> None:
    """Stop and forget every replica (the next fault starts on an empty fleet)."""
    from llmgw_core.serve.replicas import shard_listings

    fleet = await ctx.live_fleet()
    names = {r["replica"] for records in (await shard_listings(fleet)).values() for r in records}
    for name in sorted(names):
        await stop_replica(fleet, name)


def console_killed(bench: Bench, ctx: FleetContext) -> FaultOutcome:
    """SIGKILL the headless runner while its two-node replica loads; a later console adopts it."""
    script = bench.root / "serve-f-kill.yaml"
    script.write_text(
        "steps:\n  - serve:\n"
        f"      model: {LLAMA}\n      context: 32768\n      gpu_class: h100-80g\n"
        "      gpus: 8\n      nodes: 2\n      name: f-kill\n"
    )
    inventory = bench.demo.root / "inventory.yaml"
    runner = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "llmgw_tui.cli",
            "--inventory",
            str(inventory),
            "--run",
            str(script),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env={**os.environ, "HOME": str(bench.root / "operator-home")},
    )
    started = 0
    deadline = time.monotonic() + 120
    while started < 2 and runner.poll() is None and time.monotonic() < deadline:
        started = sum(
            1
            for node in NODES
            for path in (bench.state_dir(node) / "shards").glob("f-kill-r*")
            if (path / "supervisor.json").exists()
        )
        time.sleep(0.01)
    killed_while = "running" if runner.poll() is None else f"already exited {runner.returncode}"
    runner.kill()
    runner.wait(10)
    assert runner.stdout is not None
    runner.stdout.close()
    deadline = time.monotonic() + 60
    row = replica(bench, ctx, "f-kill")["row"]
    while (row is None or row["phase"] not in ("ready", "failed")) and time.monotonic() < deadline:
        time.sleep(0.2)
        row = replica(bench, ctx, "f-kill")["row"]
    return FaultOutcome(
        "console killed mid-serve (SIGKILL, both shards loading)",
        f"runner {killed_while} when killed; a new console listed f-kill as "
        f"{row['phase'] if row else 'nothing'}",
        ended(row),
    )


def fill(folder: Path) -> Path:
    """Fill the filesystem of `folder` to ENOSPC with one file (to the last byte); that file."""
    filler = folder / "filler"
    fd = os.open(str(filler), os.O_CREAT | os.O_WRONLY | os.O_APPEND, 0o600)
    try:
        chunk_bytes = 65536
        while chunk_bytes:
            try:
                os.write(fd, b"\0" * chunk_bytes)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
                chunk_bytes //= 2
    finally:
        os.close(fd)
    return filler


def tmpfs(folder: Path, size: str) -> Callable[[], None]:
    """Mount a tmpfs of `size` on `folder` (needs root); the function that unmounts it."""
    folder.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)], check=True)
    return lambda: subprocess.run(["umount", "-l", str(folder)], check=True)


def disk_full(bench: Bench, ctx: FleetContext) -> FaultOutcome:
    """h100-a-01's state directory on a 2 MiB tmpfs, filled: at a start, then under a running engine."""
    state = bench.state_dir("h100-a-01")
    unmount = tmpfs(state, "2m")
    try:
        filler = fill(state)
        refused = bench.step(
            ctx,
            "serve",
            model=LLAMA,
            context=32768,
            gpu_class="h100-80g",
            gpus=8,
            nodes=1,
            name="f-disk",
        )
        filler.unlink()
        served = serve(bench, ctx, "f-disk")
        node = served["placement"]["nodes"][0]["node"]
        shard = wait_served(bench, ctx, node, "f-disk")
        filler = fill(state)
        asked = bench.step(ctx, "ask", replica="f-disk", prompt="full?")
        os.kill(int(shard["main_pid"]), signal.SIGKILL)
        deadline = time.monotonic() + 30
        row = replica(bench, ctx, "f-disk", heal=False)["row"]
        while row and row["phase"] != "failed" and time.monotonic() < deadline:
            time.sleep(0.2)
            row = replica(bench, ctx, "f-disk", heal=False)["row"]
        full_row = row
        filler.unlink()
        after = replica(bench, ctx, "f-disk")
    except BaseException:
        unmount()
        raise
    return FaultOutcome(
        "disk full in the agent's state directory (tmpfs, 2 MiB, filled to ENOSPC)",
        f"serve on the full node: {refused.error if not refused.ok else 'ready'}; "
        f"ask while full: {'answered' if asked.ok else asked.error}; engine killed while full: "
        f"{ended(full_row)}",
        ended(after["row"]),
        cleanup=unmount,
    )


LIBFAKETIME = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1"
JUMPED = {"LD_PRELOAD": LIBFAKETIME, "FAKETIME": "+2h", "FAKETIME_DONT_FAKE_MONOTONIC": "1"}


def clock_jump(bench: Bench, ctx: FleetContext) -> FaultOutcome:
    """An agent on h100-a-02 whose wall clock is two hours ahead judges a two-node serve's starts.

    A second agent process runs on h100-a-02's state directory under
    libfaketime (`FAKETIME=+2h`, monotonic untouched: what a stepped clock
    is) and lists the shards in a loop while the console serves across
    h100-a-01 and h100-a-02, as a second console's agent would. (The agents
    the console itself uses stay on the true clock: libfaketime 0.9.10 makes
    Python's `time.sleep` fail with EINVAL when it leaves CLOCK_MONOTONIC
    alone.)
    """
    env = agent_env(bench.state_dir("h100-a-02"), **JUMPED)
    lister = AgentClient(env, stderr_path=bench.root / "jumped-agent.stderr")
    try:
        skew_s = lister.call("ping")["time"] - time.time()
        done = threading.Event()
        judged = [0]

        def keep_listing() -> None:
            while not done.is_set():
                lister.call("shard.list")
                judged[0] += 1

        listing = threading.Thread(target=keep_listing)
        listing.start()
        try:
            served = bench.step(
                ctx,
                "serve",
                model=LLAMA,
                context=32768,
                gpu_class="h100-80g",
                gpus=8,
                nodes=2,
                name="f-clock",
            )
        finally:
            done.set()
            listing.join(30)
    finally:
        lister.close()
    after = replica(bench, ctx, "f-clock")
    return FaultOutcome(
        "clock jump: an agent on h100-a-02 two hours ahead (libfaketime, monotonic untouched)",
        f"its clock {skew_s:+.0f} s off; it judged the shards {judged[0]} times during the serve; "
        f"serve: {'ready' if served.ok else served.error}",
        ended(after["row"]),
    )


FAULTS: list[Callable[[Bench, FleetContext], FaultOutcome]] = [
    ssh_cut_mid_serve,
    console_killed,
    agent_killed,
    engine_killed,
    node_lost,
    disk_full,
    clock_jump,
]
