"""Console tests run over the demo fleet's facts built offline (`llmgw_tui.offline_demo`)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from llmgw_core.fleet.state import FleetState
from llmgw_tui.app import LlmgwApp
from llmgw_tui.feed import StaticFeed
from llmgw_tui.offline_demo import demo_loads, demo_replica, offline_demo_state


@pytest.fixture(scope="session")
def demo_state(tmp_path_factory: pytest.TempPathFactory) -> tuple[FleetState, dict]:
    """The demo fleet as a snapshot, built once per test session."""
    return offline_demo_state(tmp_path_factory.mktemp("demo-captures"))


@pytest.fixture(autouse=True)
def _no_bug_hidden_by_the_guard(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch):
    """The console's guard keeps a bug from ending the console; in a test it must not keep
    the bug from failing the test. Tests that raise one on purpose say `guard_faults`."""
    from llmgw_core.errors import LlmgwError
    from llmgw_tui.guard import ConsoleGuard

    faults: list[str] = []
    catch = ConsoleGuard.catch

    def recording(guard: ConsoleGuard, error: BaseException, where: str) -> None:
        if not isinstance(error, LlmgwError):
            faults.append(f"{where}: {error!r}")
        catch(guard, error, where)

    monkeypatch.setattr(ConsoleGuard, "catch", recording)
    yield
    if request.node.get_closest_marker("guard_faults") is None:
        assert not faults, f"the console's guard caught a bug: {faults[0]}"


@pytest.fixture(autouse=True)
def _deterministic_terminal(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """NO_COLOR would grey out every snapshot; animation stays off."""
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("LLMGW_ANIMATION", "none")
    yield


@pytest.fixture
def make_app(demo_state):
    """A factory of consoles over the demo snapshot; pass a changed FleetState to vary it."""

    def factory(state: FleetState | None = None) -> LlmgwApp:
        fleet_state, fabrics = demo_state
        return LlmgwApp(StaticFeed(state or fleet_state, fabrics), animation="none")

    return factory


SOCKET_LOG = "nccl-debug-info_all_reduce_perf_a100-sxm4-80gb_2gpu_container_socket-fallback.txt"
"""A real NCCL run that fell back to NET/Socket (read in place from the shared fixtures)."""


@pytest.fixture
def replica_app(demo_state, hardware_dir):
    """A console over the demo snapshot running one replica whose log is a real NCCL run."""
    fleet_state, fabrics = demo_state
    view = demo_replica(fleet_state)
    log_lines = (hardware_dir / SOCKET_LOG).read_text().splitlines()
    logs = {shard.shard_id: log_lines[:60] for shard in view.shards}

    loads = {view.name: demo_loads(view.name)}  # a recorded minute of the sim engine

    def factory() -> LlmgwApp:
        feed = StaticFeed(fleet_state, fabrics, replicas=[view], logs=logs, loads=loads)
        return LlmgwApp(feed, animation="none")

    return factory


@pytest.fixture(scope="session")
def h100_fabric_run() -> tuple[dict, str | None]:
    """A real `fabric-test` of the demo's two H100 nodes (headless, over its SSH), recorded.

    The simulated rails are deterministic: seven at 97 % and the demo's
    degraded rail at 60 %, so the screen drawn from it is too.
    """
    import json
    import subprocess
    import sys

    script = "steps:\n  - fabric-test: {nodes: [h100-a-01, h100-a-02]}\n"
    done = subprocess.run(
        [sys.executable, "-m", "llmgw_tui.cli", "--demo", "--run", "-", "--json"],
        input=script,
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    lines = done.stdout.strip().splitlines()
    assert lines, (
        f"the demo's fabric-test said nothing (exit {done.returncode}): {done.stderr[-3000:]}"
    )
    line = json.loads(lines[-1])
    assert line["step"] == "fabric-test" and line.get("result"), done.stderr
    return line["result"], None if line["ok"] else line["error"]


@pytest.fixture
def fabric_app(demo_state, h100_fabric_run):
    """A console over the demo snapshot that knows one recorded fabric test."""
    fleet_state, fabrics = demo_state

    def factory() -> LlmgwApp:
        recorded = {("h100-a-01", "h100-a-02"): h100_fabric_run}
        return LlmgwApp(StaticFeed(fleet_state, fabrics, fabric_results=recorded), animation="none")

    return factory
