"""The NUMA nodes of a host, read from /sys as the kernel writes them."""

from __future__ import annotations

from pathlib import Path

from llmgw_agent.discover.host import cpu_list_ids, numa_nodes


def _node(root: Path, number: int, cpulist: str, kib: int | None) -> None:
    folder = root / f"node{number}"
    folder.mkdir(parents=True)
    (folder / "cpulist").write_text(cpulist + "\n")
    if kib is not None:
        (folder / "meminfo").write_text(
            f"Node {number} MemTotal:       {kib} kB\nNode {number} MemFree:        1 kB\n"
        )


def test_cpulists_are_read_as_the_kernel_writes_them():
    assert len(cpu_list_ids("0-31,64-95") or []) == 64
    assert cpu_list_ids("0") == [0]
    assert cpu_list_ids("") == []
    assert cpu_list_ids("3-1") is None
    assert cpu_list_ids("0-x") is None
    assert cpu_list_ids("²") is None  # digits int() reads and no kernel writes
    assert cpu_list_ids("0-99999999999") is None


def test_each_numa_node_with_cpus_and_memory_is_reported_by_number(tmp_path: Path):
    _node(tmp_path, 1, "32-63,96-127", 131_890_244)
    _node(tmp_path, 0, "0-31,64-95", 131_998_000)
    _node(tmp_path, 2, "", 67_108_864)  # CXL memory without CPUs holds no rank
    _node(tmp_path, 3, "128-131", None)  # no meminfo: not reported
    (tmp_path / "possible").write_text("0-3\n")
    assert numa_nodes(tmp_path) == [
        {"node": 0, "cpus": 64, "memory_mib": 128_904, "cpulist": "0-31,64-95"},
        {"node": 1, "cpus": 64, "memory_mib": 128_799, "cpulist": "32-63,96-127"},
    ]


def test_a_host_without_numa_nodes_in_sys_reports_none(tmp_path: Path):
    assert numa_nodes(tmp_path / "absent") is None
    assert numa_nodes(tmp_path) is None
