"""No secret on a node's disk or command line, with everything that carries one running.

A Hub token, an engine key and the replica's TLS private key, planted with
values found nowhere else, are carried the way the product carries them: a real download from a stand-in
Hub whose repository is gated behind the token (so the download succeeding
proves the token reached it), a replica whose engines demand the key and
are given the token too, and a gateway given the key. While all of it runs,
a watcher reads every file under the nodes' homes and state folders and
every `/proc/*/cmdline` on this machine, over and over: none of them may
appear, and the engine's own `/proc/<pid>/environ` holds no TLS key (it
reads it from an in-memory file). Then the key is proven to be there: asked
with it, the replica answers; asked without it, it refuses.

On the demo fleet (asyncssh servers) and on OpenSSH's sshd.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from bench import Bench
from hub_server import FakeRepo, LocalHub
from kept_demo import free_port

from llmgw_core.engines.identity import EngineIdentity
from llmgw_core.serve.choice import Overrides
from llmgw_core.serve.fetch import download_command, run_fetch
from llmgw_core.serve.http import EngineReach
from llmgw_core.serve.progress import Trace
from llmgw_core.serve.start import ServeRequest, serve

TOKEN = f"hf_planted{secrets.token_hex(12)}"
KEY = f"sk-planted-{secrets.token_hex(12)}"
CANARY = f"canary-{secrets.token_hex(12)}"
"""Planted on purpose in one node file and one command line: the watch must find exactly those."""
KEY_ENV = "LLMGW_WATCHED_KEY"
REPO = "planted-org/tiny-gated"
MODEL = "catalog:meta-llama/Llama-3.1-8B-Instruct"


class Watch:
    """Reads files under `roots` and every process's cmdline until stopped; keeps each hit."""

    def __init__(self, roots: list[Path], planted: dict[str, bytes]) -> None:
        self.roots = roots
        self.planted = planted
        self.hits: set[str] = set()
        self.rounds = 0
        self.files_read = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _look(self, where: str, data: bytes) -> None:
        for name, value in self.planted.items():
            if value in data:
                self.hits.add(f"{name} in {where}")

    def _round(self) -> None:
        for root in self.roots:
            # os.walk passes over a folder that goes while it is walked (a shard's, stopped);
            # Path.rglob raises, which ended the watch early.
            for folder, _dirs, names in os.walk(root):
                for name in names:
                    path = Path(folder, name)
                    try:
                        if path.is_file() and not path.is_symlink():
                            self._look(str(path), path.read_bytes())
                            self.files_read += 1
                    except OSError:
                        continue  # gone between listing and reading
        for proc in Path("/proc").iterdir():
            if proc.name.isdigit():
                try:
                    self._look(f"/proc/{proc.name}/cmdline", (proc / "cmdline").read_bytes())
                except OSError:
                    continue
        self.rounds += 1

    def _run(self) -> None:
        while not self._stop.is_set():
            self._round()

    def __enter__(self) -> Watch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(60)
        self._round()  # and once more over what was left behind


TLS = EngineIdentity.make("watched")
TLS_KEY_LINE = max(TLS.key_pem.splitlines(), key=len)
"""The key's longest base64 line: found in any file that holds the key, JSON-escaped or not."""


def _engine_environ(bench: Bench, fleet: object, replica: str) -> bytes:
    """The environment of the replica's running engine (rank 0's main process)."""
    for node in fleet.snapshot().ready():  # type: ignore[attr-defined]
        for shard in bench.run(fleet.request(node.name, "shard.list"))["shards"]:  # type: ignore[attr-defined]
            if shard["replica"] == replica and shard["phase"] == "running" and shard["main_pid"]:
                return Path(f"/proc/{shard['main_pid']}/environ").read_bytes()
    raise AssertionError(f"no running engine of {replica}")


def _carry_secrets(bench: Bench, node_homes: list[Path], state_dirs: list[Path]) -> Watch:
    """Fetch, serve and front with the planted secrets while a watch runs; fail on any hit."""
    from unittest import mock

    ctx = bench.console()
    fleet = bench.run(ctx.live_fleet())
    repo = FakeRepo(
        files={"config.json": b'{"model_type": "llama"}', "model.safetensors": b"\0" * 4096},
        gated_token=TOKEN,
    )
    planted = {
        "the Hub token": TOKEN,
        "the engine key": KEY,
        "the TLS key": TLS_KEY_LINE,
        "the canary": CANARY,
    }
    (node_homes[0] / "canary.txt").write_text(CANARY)
    canary = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)", CANARY])
    watched = {name: value.encode() for name, value in planted.items()}
    with LocalHub() as hub, Watch([*node_homes, *state_dirs], watched) as watch:
        hub.repos[REPO] = repo
        node = fleet.snapshot().ready()[0].name
        command = download_command(sys.executable, REPO, None, "models/planted/tiny")
        done = bench.run(
            run_fetch(
                fleet,
                node,
                command,
                "models/planted/tiny",
                60.0,
                Trace(),
                replica="watched",
                secret_env={"HF_TOKEN": TOKEN, "HF_ENDPOINT": hub.endpoint},
            )
        )
        assert done.endswith("MB/s")
        fetched = [path for _m, path, _r, sent in hub.log.requests if "/resolve/" in path and sent]
        assert fetched, "the gated files were never served: the token did not reach the download"
        request = ServeRequest(
            model=MODEL,
            name="watched",
            context=8192,
            overrides=Overrides(gpus=1),
            secret_env={"HF_TOKEN": TOKEN},
            api_key=KEY,
            api_key_env=KEY_ENV,
        )
        from llmgw_core.script.steps.plan import step_model

        reach = EngineReach(fleet)
        try:
            # The replica's identity is the planted one (serve makes a new one per launch).
            with mock.patch.object(EngineIdentity, "make", return_value=TLS):
                outcome = bench.run(serve(fleet, reach, request, step_model(MODEL, ctx)))
        finally:
            bench.run(reach.close())
        assert outcome.phase == "ready", outcome.reason
        environ = _engine_environ(bench, fleet, "watched")
        assert TLS_KEY_LINE.encode() not in environ and b"LLMGW_ENGINE_TLS" not in environ
        gateway = bench.step(
            ctx, "gateway", name="watched-front", api_key_env=KEY_ENV, port=free_port()
        )
        assert gateway.ok, gateway.error
        asked = bench.step(ctx, "ask", replica="watched", prompt="hello?")
        assert asked.ok and asked.result["text"], asked.error
        refused = bench.step(
            ctx, "ask", replica="watched", prompt="hello?", api_key_env="none", expect="refused"
        )
        assert refused.ok and refused.result["refused"], refused.result
        through = bench.step(ctx, "ask", gateway="watched-front", prompt="hello?")
        assert through.ok and through.result["text"], through.error
        for shown in (outcome.as_dict(), gateway.result, asked.result, refused.result):
            assert TOKEN not in str(shown) and KEY not in str(shown)
            assert TLS_KEY_LINE not in str(shown)
        assert bench.step(ctx, "stop", gateway="watched-front").ok
        assert bench.step(ctx, "stop", replica="watched").ok
    canary.kill()
    canary.wait()
    print(f"watched {watch.rounds} rounds, {watch.files_read} file reads: {sorted(watch.hits)}")
    assert watch.rounds >= 2
    # The watch saw what was planted on purpose, and nothing else.
    assert watch.hits == {
        f"the canary in {node_homes[0] / 'canary.txt'}",
        f"the canary in /proc/{canary.pid}/cmdline",
    }
    return watch


@pytest.fixture
def key_in_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, KEY)


@pytest.fixture(scope="module")
def demo_bench(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bench]:
    from bench import bench_nodes

    from llmgw_core.fleet.sim.nodes import SimNode

    # A CPU node for the gateway: the demo names the router installed beside llmgw there.
    nodes = [*bench_nodes(), SimNode("cpu-01", "cpu")]
    running = Bench(Path(tmp_path_factory.mktemp("no-secret-demo")), nodes=nodes)
    try:
        yield running
    finally:
        running.close()


def test_on_the_demo_no_secret_reaches_a_nodes_disk_or_a_command_line(
    demo_bench: Bench, key_in_environment: None
):
    servers = demo_bench.demo.servers
    homes = [server.home for server in servers.values()]
    states = [Path(server.env["LLMGW_AGENT_STATE"]) for server in servers.values()]
    _carry_secrets(demo_bench, homes, states)


@pytest.mark.sshd
def test_on_openssh_no_secret_reaches_a_nodes_disk_or_a_command_line(
    tmp_path: Path, key_in_environment: None
):
    from openssh_bench import OpenSshBench

    from llmgw_core.fleet.sim.demo import demo_router

    bench = OpenSshBench(tmp_path, router=demo_router())
    try:
        nodes = bench.demo.servers.values()
        homes = [node.sshd.home for node in nodes]
        states = [Path(node.env["LLMGW_AGENT_STATE"]) for node in nodes]
        _carry_secrets(bench, homes, states)
    finally:
        bench.close()
