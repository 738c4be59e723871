"""The gateway in front of two real llama.cpp engines, over real SSH.

This machine is node `here` behind asyncssh's server on loopback; its real
agent starts two llama.cpp replicas of the tiny GGUF and the gateway's front
(the agent's own router) in front of them, each as a shard.

How the engines are fronted: the front asks each worker's `/health` every
few seconds, and llama-cpp-python's server has no `/health` route (a 404
holds a worker out of rotation). llama.cpp's own `llama-server` answers it,
but is not installed here. So the node's inventory names a test-side
launcher as its llama.cpp program (`engines: {llama.cpp: {bin: …/llama-server}}`,
see `llama_server_front`): it takes the `llama-server` flags the product
builds and runs llama-cpp-python's own FastAPI app, unchanged, in that one
process with a `/health` route in front answering as llama-server does (503
"Loading model", then 200). Not a proxy: the process the test SIGKILLs is
the one computing the tokens. The product is unchanged: it builds
llama-server's command and checks `/health`, as for the real binary.

One scenario, in the order a person would live it: both engines get traffic
(the front's own counters and each engine's own log); one engine's process
is SIGKILLed and requests through the gateway keep succeeding through the
other (every one counted, with when the front marked the dead worker
unhealthy); the front's worker list follows a `stop` and a new `serve`.
Skips, saying what to install, where llama-cpp-python's server is absent.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from llama_server_front import launcher_script
from serve_demo_harness import FleetContext, step
from test_llamacpp_real import (
    NODE,
    engine_url,
    log_lines,
    needs_llama_cpp,
    this_machine_as_a_node,
)
from tiny_gguf import REPLY, write_tiny_llama_gguf

from llmgw_core.errors import LlmgwError
from llmgw_core.fleet.fleet import Fleet
from llmgw_core.gateway.run import find_gateway, front_call
from llmgw_core.gateway.spec import HEALTH_INTERVAL_S

pytestmark = [
    pytest.mark.slow,
    needs_llama_cpp,
]

MODEL = "tiny"
"""Two replicas of one local file serve one model, named from the file: one pool."""
BENCH_REQUESTS = 20
AFTER_UNHEALTHY_S = 1.0
"""Requests go on at least this long after the front marked the dead engine unhealthy…"""
AFTER_UNHEALTHY_ANSWERED = 4
"""…and until this many requests sent after the mark were answered (a loaded machine
answers each in seconds, not milliseconds)…"""
AFTER_KILL_CAP_S = 40.0
"""…and never longer than this after the kill."""
SENDERS = 2
GATEWAY_PORT_FROM = 31000
COMPLETED = '"POST /v1/chat/completions HTTP/1.1" 200'
HEALTH_ANSWERED = '"GET /health HTTP/1.1" 200'


async def _ok(pending: Any) -> dict[str, Any]:
    """The result of a step that must succeed."""
    outcome = await pending
    assert outcome.ok, outcome.error
    return outcome.result


async def _serve(ctx: FleetContext, model_path: Path, name: str) -> dict[str, Any]:
    """Serve the tiny GGUF with llama.cpp as replica `name`; its result."""
    return await _ok(
        step(
            ctx,
            "serve",
            model=str(model_path),
            engine="llama.cpp",
            context=256,
            name=name,
            timeout=120,
        )
    )


def _shard(served: dict[str, Any]) -> dict[str, Any]:
    (shard,) = served["replica"]["shards"]
    return shard


async def _running_pid(fleet: Fleet, replica: str) -> int:
    """The agent's record of the replica's running engine process."""
    listed = await fleet.request(NODE, "shard.list")
    (shard,) = [s for s in listed["shards"] if s["replica"] == replica and s["phase"] == "running"]
    return int(shard["main_pid"])


def _listens_on(pid: int, port: int) -> bool:
    """Whether process `pid` holds the listening TCP socket of `port` (read from /proc)."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError):
            for row in Path(table).read_text().splitlines()[1:]:
                fields = row.split()
                if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == "0A":
                    inodes.add(fields[9])
    held = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        with contextlib.suppress(OSError):
            held.add(os.readlink(fd))
    return any(f"socket:[{inode}]" in held for inode in inodes)


async def _gateway_port(fleet: Fleet) -> int:
    """A port the node's agent finds free, below the kernel's ephemeral range.

    An ephemeral port free a moment ago may be taken by any outgoing
    connection (SSH tunnels, clients) before the front binds it.
    """
    answer = await fleet.request(NODE, "port.free", {"start": GATEWAY_PORT_FROM, "count": 1})
    return int(answer["ports"][0])


async def _health_answered(fleet: Fleet, shard_id: str) -> int:
    """How many `/health` asks the engine's own access log shows answered 200."""
    return sum(HEALTH_ANSWERED in line for line in await log_lines(fleet.client(NODE), shard_id))


async def _health_asked_again(fleet: Fleet, shard_id: str, since: int) -> int:
    """Wait (capped) until the engine has answered `/health` twice more than `since`."""
    deadline = time.monotonic() + 3 * HEALTH_INTERVAL_S + 10
    while True:
        grown = await _health_answered(fleet, shard_id) - since
        if grown >= 2 or time.monotonic() > deadline:
            return grown
        await asyncio.sleep(0.5)


async def _completions_served(fleet: Fleet, shard_id: str) -> int:
    """Chat completions the engine answered 200, counted from its own log."""
    return sum(COMPLETED in line for line in await log_lines(fleet.client(NODE), shard_id))


async def _router_workers(_http: httpx.AsyncClient, admin: Any) -> dict[str, bool]:
    """The gateway front's own worker list (its control socket, through the agent): URL → healthy."""
    return await admin()


async def _send_until(
    http: httpx.AsyncClient,
    base: str,
    done: asyncio.Event,
    results: list[tuple[float, float, int]],
) -> None:
    """Chat completions one after another until `done`, each added to `results` when
    answered: (sent, answered, status; 0 = no answer).

    A 200 whose text is not the tiny model's line counts as a failure (-1).
    """
    body = {"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 16}
    while not done.is_set():
        sent = time.monotonic()
        try:
            answered = await http.post(f"{base}/v1/chat/completions", json=body)
            status = answered.status_code
            if (
                status == 200
                and answered.json()["choices"][0]["message"]["content"].strip() != REPLY
            ):
                status = -1
        except httpx.HTTPError:
            status = 0
        results.append((sent, time.monotonic(), status))


async def _watch_unhealthy(
    http: httpx.AsyncClient,
    base: str,
    url: str,
    done: asyncio.Event,
    cap_at: float,
    results: list[tuple[float, float, int]],
) -> float | None:
    """When the front's worker list first showed `url` unhealthy (None: not by `cap_at`).

    Sets `done` once `AFTER_UNHEALTHY_S` have passed since and `AFTER_UNHEALTHY_ANSWERED`
    requests sent since were answered (or at `cap_at`), ending the traffic.
    """
    marked = None
    try:
        while time.monotonic() < cap_at:
            if marked is None and not (await _router_workers(http, base)).get(url, True):
                marked = time.monotonic()
            if (
                marked is not None
                and time.monotonic() >= marked + AFTER_UNHEALTHY_S
                and sum(sent >= marked for sent, _, _ in results) >= AFTER_UNHEALTHY_ANSWERED
            ):
                break
            await asyncio.sleep(0.1)
    finally:
        done.set()
    return marked


async def _kill_and_keep_asking(
    fleet: Fleet, base: str, admin: Any, dead_url: str, seen: dict[str, Any]
) -> None:
    """SIGKILL tiny-a's engine while requests go through the gateway, two at a time.

    `base` is the gateway's port (its front), `admin` reads the front's workers.

    They go on until the front has held the dead worker unhealthy for
    `AFTER_UNHEALTHY_S` and answered `AFTER_UNHEALTHY_ANSWERED` requests sent since
    (at most `AFTER_KILL_CAP_S`).
    """
    pid = await _running_pid(fleet, "tiny-a")
    seen["killed_cmdline"] = Path(f"/proc/{pid}/cmdline").read_bytes().decode()
    seen["killed_held_port"] = _listens_on(pid, seen["port_a"])
    done = asyncio.Event()
    results: list[tuple[float, float, int]] = []
    async with httpx.AsyncClient(timeout=30) as http:
        os.kill(pid, signal.SIGKILL)
        killed_at = time.monotonic()
        *_, marked = await asyncio.gather(
            *(_send_until(http, base, done, results) for _ in range(SENDERS)),
            _watch_unhealthy(http, admin, dead_url, done, killed_at + AFTER_KILL_CAP_S, results),
        )
    seen["after_kill"] = [
        (round(at - killed_at, 3), round(end - at, 3), status)
        for at, end, status in sorted(results)
    ]
    seen["unhealthy_after_s"] = None if marked is None else marked - killed_at


async def _scenario(tmp_path: Path) -> dict[str, Any]:
    model_dir = tmp_path / "models"
    model_path = write_tiny_llama_gguf(model_dir / "tiny-llama" / "tiny.gguf")
    program = launcher_script(tmp_path / "bin")
    engines = f"    engines: {{llama.cpp: {{bin: {program}}}}}\n"
    seen: dict[str, Any] = {"model_path": model_path}
    async with this_machine_as_a_node(tmp_path, model_dir, engines) as fleet:
        ctx = FleetContext(fleet, tmp_path)
        try:
            began = time.monotonic()
            served_a = await _serve(ctx, model_path, "tiny-a")
            served_b = await _serve(ctx, model_path, "tiny-b")
            seen["serve_two_s"] = time.monotonic() - began
            seen["shard_a"], seen["shard_b"] = _shard(served_a), _shard(served_b)
            seen["port_a"] = int(served_a["replica"]["endpoint"].rsplit(":", 1)[1])
            port = await _gateway_port(fleet)
            began = time.monotonic()
            gateway = await _ok(step(ctx, "gateway", name="front", node=NODE, port=port))
            seen["gateway"], seen["gateway_s"] = gateway, time.monotonic() - began
            health_at_start = await _health_answered(fleet, seen["shard_b"]["shard_id"])
            seen["bench"] = await _ok(
                step(ctx, "bench", gateway="front", requests=BENCH_REQUESTS, concurrency=2)
            )
            seen["logged"] = {
                name: await _completions_served(fleet, seen[f"shard_{name[-1]}"]["shard_id"])
                for name in ("tiny-a", "tiny-b")
            }
            urls = {w["replica"]: w["url"] for w in gateway["workers"]}
            view = await find_gateway(fleet, "front")

            async def admin() -> dict[str, bool]:
                status, text = await front_call(fleet, view, "GET", "/workers")
                assert status == 200, text
                return {w["url"]: w["is_healthy"] for w in json.loads(text)["workers"]}

            async with engine_url(fleet, NODE, port, scheme="http") as base:
                await _kill_and_keep_asking(fleet, base, admin, urls["tiny-a"], seen)
                seen["stopped"] = await _ok(step(ctx, "stop", replica="tiny-a"))
                async with httpx.AsyncClient(timeout=30) as http:
                    seen["workers_after_stop"] = await _router_workers(http, admin)
                    seen["served_c"] = await _serve(ctx, model_path, "tiny-c")
                    seen["b_health_asked"] = await _health_asked_again(
                        fleet, seen["shard_b"]["shard_id"], health_at_start
                    )
                    seen["workers_after_serve"] = await _router_workers(http, admin)
            seen["ask"] = await _ok(step(ctx, "ask", gateway="front", prompt="Who are you?"))
            seen["bench_after"] = await _ok(
                step(ctx, "bench", gateway="front", requests=10, concurrency=2)
            )
        finally:
            # Whatever happened, nothing this test started keeps running.
            with contextlib.suppress(LlmgwError):
                await step(ctx, "stop", gateway="front")
            for name in ("tiny-a", "tiny-b", "tiny-c"):
                with contextlib.suppress(LlmgwError):
                    await step(ctx, "stop", replica=name)
            await ctx.close()
        listed = await fleet.request(NODE, "shard.list")
        seen["left"] = [s for s in listed["shards"] if s["phase"] == "running"]
    return seen


def test_two_llama_cpp_engines_behind_the_gateway_share_traffic_survive_a_kill_and_follow(
    tmp_path: Path,
):
    seen = asyncio.run(_scenario(tmp_path))

    # The product ran the node's llama.cpp program with llama-server's own flags.
    argv = seen["shard_a"]["argv"]
    assert Path(argv[0]) == tmp_path / "bin" / "llama-server"
    assert argv[1:5] == ["--model", str(seen["model_path"]), "--alias", MODEL]
    gateway = seen["gateway"]
    assert gateway["node"] == NODE and gateway["adopted"] is False
    assert sorted(w["replica"] for w in gateway["workers"]) == ["tiny-a", "tiny-b"]
    assert {w["model"] for w in gateway["workers"]} == {MODEL}
    urls = {w["replica"]: w["url"] for w in gateway["workers"]}

    # Both engines got traffic: the front's counters and each engine's own log agree.
    split = seen["bench"]["split"]
    assert sum(split.values()) == BENCH_REQUESTS, split
    assert sorted(split) == sorted(urls.values()) and all(n >= 5 for n in split.values()), split
    assert seen["logged"] == {name: split[urls[name]] for name in ("tiny-a", "tiny-b")}

    # The process killed was the engine itself: the launcher, holding the engine's port.
    assert "llama_server_front.py" in seen["killed_cmdline"]
    assert seen["killed_held_port"] is True
    # Every request after the kill succeeded: the front took the dead engine out of
    # rotation at its first refused connection and sent that request to tiny-b.
    after_kill = seen["after_kill"]
    failed = [(at, status) for at, _, status in after_kill if status != 200]
    assert failed == [], failed
    caught_s = seen["unhealthy_after_s"]
    assert caught_s is not None, "the front never marked the killed engine unhealthy"
    before_caught = [at for at, _, _ in after_kill if at < caught_s]
    assert caught_s < HEALTH_INTERVAL_S + 1.0, caught_s  # not left for the health check
    after_caught = [at for at, _, _ in after_kill if at >= caught_s]
    assert len(after_caught) >= AFTER_UNHEALTHY_ANSWERED, (caught_s, after_kill[-3:])

    # The worker list follows a stop and a serve (tiny-c may take tiny-a's old port).
    (follow,) = seen["stopped"]["gateways"]
    assert follow["removed"] == [urls["tiny-a"]]
    assert [w["replica"] for w in follow["workers"]] == ["tiny-b"]
    assert seen["workers_after_stop"] == {urls["tiny-b"]: True}
    (follow,) = seen["served_c"]["gateways"]
    assert len(follow["added"]) == 1
    assert sorted(w["replica"] for w in follow["workers"]) == ["tiny-b", "tiny-c"]
    assert follow["warnings"] == []  # both answer /health, as llama-server does
    url_c = next(w["url"] for w in follow["workers"] if w["replica"] == "tiny-c")
    # tiny-b, added long before, is still healthy: /health answered the front all along.
    assert seen["workers_after_serve"] == {urls["tiny-b"]: True, url_c: True}
    # And the health check did ask it, more than once, since the gateway started.
    assert seen["b_health_asked"] >= 2, seen["b_health_asked"]
    assert seen["ask"]["text"].strip() == REPLY
    split_after = seen["bench_after"]["split"]
    assert sorted(split_after) == sorted([urls["tiny-b"], url_c]), split_after
    assert seen["left"] == []
    slowest_s = max(took for _, took, _ in after_kill)
    replica_of = {urls["tiny-b"]: "tiny-b", url_c: "tiny-c"}
    split_after = {replica_of[url]: taken for url, taken in split_after.items()}
    print(
        f"\ntwo llama.cpp replicas served in {seen['serve_two_s']:.1f} s, gateway up in "
        f"{seen['gateway_s']:.1f} s; {BENCH_REQUESTS} requests at "
        f"{seen['bench']['requests_per_s']} requests/s, split {seen['logged']} "
        "(front counters and engine logs agree)\n"
        f"after SIGKILL of tiny-a ({SENDERS} at a time): {len(after_kill) - len(failed)} of "
        f"{len(after_kill)} requests succeeded in {after_kill[-1][0]:.1f} s, "
        f"{len(before_caught)} of them before the front marked it unhealthy "
        f"({caught_s:.2f} s after the kill); first answer {after_kill[0][1]:.2f} s, "
        f"slowest {slowest_s:.2f} s\n"
        f"tiny-b's /health answered {seen['b_health_asked']} more times while it stayed healthy; "
        f"after stop tiny-a + serve tiny-c, 10 requests split {split_after}"
    )
