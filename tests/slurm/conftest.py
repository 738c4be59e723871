"""A private Slurm cluster (tests/support/slurm_cluster.py) for the Slurm tests: one per
test process, emptied of jobs after each test; skipped where Slurm is not installed."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from slurm_cluster import SlurmCluster, slurm_missing, start_cluster


@pytest.fixture(scope="session")
def slurm_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    """The cluster itself, started once per test process (about a third of a second)."""
    missing = slurm_missing()
    if missing:
        pytest.skip(missing)
    cluster = start_cluster(tmp_path_factory.mktemp("slurm"))
    try:
        yield cluster
    finally:
        cluster.stop()


@pytest.fixture
def slurm(slurm_session: SlurmCluster) -> Iterator[SlurmCluster]:
    """The cluster, with every job a test left cancelled and gone before the next test."""
    yield slurm_session
    slurm_session.cancel_all()
