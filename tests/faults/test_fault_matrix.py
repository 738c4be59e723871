"""The fault matrix: each fault, what the operator sees, and the invariants.

After every fault a fresh console reads every node (claims, shards) and
/proc (engine processes): no card in two shards, no claim without a live
shard, no engine without its claims, nothing left running for a replica
given up or replaced.

Every fault runs on the demo fleet (the real agent behind asyncssh); the ones
marked `@over_both_transports` run again on OpenSSH's sshd, the server
operators really run (`openssh_bench.py`; skipped where sshd is absent).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import matrix
import pytest
import races
from bench import Bench
from openssh_bench import OpenSshBench

pytestmark = pytest.mark.slow

over_both_transports = pytest.mark.parametrize(
    "bench",
    [
        pytest.param("demo", id="demo-fleet"),
        pytest.param("openssh", id="openssh", marks=pytest.mark.sshd),
    ],
    indirect=True,
)
"""A fault run on the demo fleet, then on three OpenSSH nodes."""


@pytest.fixture(scope="module")
def demo_bench(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bench]:
    running = Bench(Path(tmp_path_factory.mktemp("fault-matrix")))
    try:
        yield running
    finally:
        running.close()


@pytest.fixture(scope="module")
def openssh_bench(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bench]:
    running = OpenSshBench(Path(tmp_path_factory.mktemp("fault-matrix-openssh")))
    try:
        yield running
    finally:
        running.close()


@pytest.fixture
def bench(request: pytest.FixtureRequest) -> Bench:
    """The demo fleet's bench; OpenSSH's where `over_both_transports` says `openssh`."""
    transport = getattr(request, "param", "demo")
    return request.getfixturevalue(f"{transport}_bench")


def test_an_ssh_cut_while_a_replica_starts_fails_it_with_the_reason_and_leaves_nothing(
    bench: Bench,
):
    outcome = matrix.run_fault(bench, matrix.ssh_cut_mid_serve)
    print(outcome.row())
    assert outcome.invariants is not None and outcome.invariants.held, outcome.row()
    # Either the cut came after every start (ready) or it lost a start's answer.
    if outcome.saw != "serve: ready":
        assert "got no answer" in outcome.saw and "stopped answering" in outcome.saw
        assert outcome.ended == "gone: no shard of it is left on any node"
    else:
        assert outcome.ended.startswith("ready on ")


@over_both_transports
def test_a_killed_agent_comes_back_and_its_replica_still_answers(bench: Bench):
    outcome = matrix.run_fault(bench, matrix.agent_killed)
    print(outcome.row())
    assert outcome.invariants is not None and outcome.invariants.held, outcome.row()
    assert outcome.saw.endswith("ask after: answered")
    assert outcome.ended == "ready on h100-a-01"


@over_both_transports
def test_a_killed_engine_fails_its_replica_with_the_exit_code_and_it_is_healed(bench: Bench):
    outcome = matrix.run_fault(bench, matrix.engine_killed)
    print(outcome.row())
    assert outcome.invariants is not None and outcome.invariants.held, outcome.row()
    assert outcome.saw == (
        "failed: rank 0 on h100-a-01 failed: the engine exited with code -9; heal: ready"
    )
    assert outcome.ended.startswith("ready on ")


@over_both_transports
def test_a_node_lost_under_two_nodes_is_placed_again_and_its_old_shard_stopped_on_return(
    bench: Bench,
):
    outcome = matrix.run_fault(bench, matrix.node_lost)
    print(outcome.row())
    assert outcome.invariants is not None and outcome.invariants.held, outcome.row()
    assert outcome.saw == "heal: ready (placed again)"
    assert outcome.ended == "ready on h100-a-01, h100-a-03"


def test_a_console_killed_while_its_replica_loads_leaves_it_to_the_next_console_ready(
    bench: Bench,
):
    outcome = matrix.run_fault(bench, matrix.console_killed)
    print(outcome.row())
    assert outcome.invariants is not None and outcome.invariants.held, outcome.row()
    assert outcome.saw == "runner running when killed; a new console listed f-kill as ready"
    assert outcome.ended == "ready on h100-a-01, h100-a-02"


def test_a_full_state_disk_refuses_a_start_in_a_sentence_and_an_engine_dying_on_it_is_healed(
    bench: Bench,
):
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    outcome = matrix.run_fault(bench, matrix.disk_full)
    print(outcome.row())
    assert outcome.invariants is not None and outcome.invariants.held, outcome.row()
    assert "shard.start failed: the agent cannot write its state directory" in outcome.saw
    assert "No space left on device; ask while full: answered" in outcome.saw
    assert outcome.saw.endswith(
        "failed: rank 0 on h100-a-01 failed: the engine exited with code -9"
    )
    assert outcome.ended == "ready on h100-a-01"


def test_an_agent_whose_clock_jumped_two_hours_ahead_does_not_fail_a_start_it_judges(
    bench: Bench,
):
    if not Path(matrix.LIBFAKETIME).exists():
        pytest.skip("libfaketime is not installed (apt-get install faketime)")
    outcome = matrix.run_fault(bench, matrix.clock_jump)
    print(outcome.row())
    assert outcome.invariants is not None and outcome.invariants.held, outcome.row()
    assert outcome.saw.startswith("its clock +7200 s off; it judged the shards ")
    assert outcome.saw.endswith("serve: ready")
    assert outcome.ended == "ready on h100-a-01, h100-a-02"


def test_two_consoles_racing_for_the_same_cards_twenty_times_never_double_book(bench: Bench):
    figures = races.race(bench, 20)
    print(figures.summary())
    assert figures.failures == []
    assert figures.rounds == 20 and figures.serves_ok == 40
    assert figures.double_bookings == 0
    assert figures.lost_races >= 1  # they did race
