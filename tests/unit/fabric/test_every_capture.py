"""Every fabric capture in ../shared/fixtures/hardware is read: none is skipped by name.

A capture added later is picked up by its prefix and must read too.
"""

from __future__ import annotations

from pathlib import Path

from llmgw_core.fabric.nccl import parse_all_reduce_perf, parse_nccl_transport
from llmgw_core.fabric.perftest import parse_ib_write_bw


def captures(hardware_dir: Path, prefix: str) -> list[Path]:
    found = sorted(hardware_dir.glob(prefix + "*"))
    assert found, f"no {prefix}* capture in {hardware_dir}"
    return found


def test_every_ib_write_bw_capture_gives_a_figure(hardware_dir: Path) -> None:
    for path in captures(hardware_dir, "ib_write_bw"):
        run = parse_ib_write_bw(path.read_text())
        assert run.failure is None, path.name
        assert run.average_gbps and run.average_gbps > 0, path.name
        assert run.device, path.name


def test_every_all_reduce_capture_has_rows_a_footer_and_hosts(hardware_dir: Path) -> None:
    paths = captures(hardware_dir, "all_reduce_perf") + captures(hardware_dir, "nccl-debug-info")
    for path in paths:
        run = parse_all_reduce_perf(path.read_text())
        assert run.rows, path.name
        assert run.avg_busbw_gbs is not None, path.name
        assert run.hosts and run.rank_count >= len(run.hosts), path.name


def test_every_nccl_debug_capture_names_its_network(hardware_dir: Path) -> None:
    for path in captures(hardware_dir, "nccl-debug-info"):
        transport = parse_nccl_transport(path.read_text().splitlines())
        assert transport.version, path.name
        assert transport.network_kind in ("ib", "socket"), path.name
