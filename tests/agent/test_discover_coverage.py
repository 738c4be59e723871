"""Every hardware capture that discovery reads is read by some test, by name."""

from __future__ import annotations

from pathlib import Path

# Performance logs belong to the fabric test, not to discovery.
NOT_DISCOVERY_INPUT = ("ib_write_bw_", "all_reduce_perf_", "nccl-debug-info_", "SOURCES.md")


def test_every_discovery_capture_is_named_in_a_discovery_test(hardware_dir):
    sources = "".join(p.read_text() for p in Path(__file__).parent.glob("test_discover_*.py"))
    sources += "".join(p.read_text() for p in Path(__file__).parent.glob("test_doctor*.py"))
    inputs = [p.name for p in hardware_dir.iterdir() if not p.name.startswith(NOT_DISCOVERY_INPUT)]
    assert len(inputs) >= 30
    unread = [name for name in inputs if name not in sources and name.split(".")[0] not in sources]
    assert unread == []
