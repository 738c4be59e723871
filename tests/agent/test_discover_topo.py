"""`nvidia-smi topo -m` against every real capture: NVLink cells, NIC legends, affinity."""

from __future__ import annotations

import pytest

from llmgw_agent.discover.topo import nearest_nics, nic_affinity, nvlink_matrix, parse_topo

TOPO_FILES = {
    # file: (GPUs, NICs, the 0-1 cell, GPU0 NUMA node, GPU0 CPUs)
    "topo-m_h100-80gb-hbm3_8gpu_8nic-mlx5.txt": (8, 8, "NV18", 0, "0-47,96-143"),
    "topo-m_dgx-a100_8gpu_10nic_nv12.txt": (8, 10, "NV12", 3, "48-63,176-191"),
    "topo-m_l40s_4gpu_2nic_pcie-no-nvlink.txt": (4, 2, "NODE", 0, "0-95,192-287"),
    "topo-m_a100-pcie-40gb_2gpu_1nic_no-nvlink.txt": (2, 1, "SYS", 1, "24-47,72-95"),
    "topo-m_h100-1gpu-vm_ansi-escapes.txt": (1, 0, None, 0, "0-19"),
    "topo-m_gb200_4gpu_tray_PARTIAL.txt": (4, 0, "NV18", 0, "0-71"),
}


@pytest.mark.parametrize("filename", sorted(TOPO_FILES))
def test_every_topo_capture_gives_its_matrix_and_affinity(hardware_dir, filename):
    gpus, nics, cell, numa, cpus = TOPO_FILES[filename]
    topo = parse_topo((hardware_dir / filename).read_text())
    assert len(topo["gpus"]) == gpus
    assert len(topo["nics"]) == nics
    matrix = nvlink_matrix(topo)
    if cell is not None:
        assert matrix["0"]["1"] == cell
    assert topo["affinity"]["GPU0"]["numa_node"] == numa
    assert topo["affinity"]["GPU0"]["cpus"] == cpus
    for a, row in matrix.items():  # the matrix is symmetric: a cheap check of the split
        for b, value in row.items():
            assert matrix[b][a] == value
    assert "0" not in matrix.get("0", {})


def test_nic_columns_are_named_by_the_nic_legend_and_one_nic_sits_by_each_h100(hardware_dir):
    topo = parse_topo((hardware_dir / "topo-m_h100-80gb-hbm3_8gpu_8nic-mlx5.txt").read_text())
    assert topo["nics"] == [f"mlx5_{i}" for i in range(8)]
    assert nearest_nics(topo) == {i: f"mlx5_{i}" for i in range(8)}
    assert nic_affinity(topo)["mlx5_3"]["3"] == "PIX"
    assert nic_affinity(topo)["mlx5_3"]["4"] == "SYS"


def test_two_gpus_sharing_two_nics_through_a_switch_get_one_each(hardware_dir):
    topo = parse_topo((hardware_dir / "topo-m_dgx-a100_8gpu_10nic_nv12.txt").read_text())
    nearest = nearest_nics(topo)
    assert (nearest[0], nearest[1]) == ("mlx5_0", "mlx5_1")
    assert (nearest[6], nearest[7]) == ("mlx5_6", "mlx5_7")
    # The storage pair NIC8/NIC9 is SYS to every GPU: nobody's nearest.
    assert "mlx5_8" not in nearest.values()
    assert topo["affinity"]["GPU4"]["numa_node"] == 7


def test_pcie_cards_without_nvlink_have_no_nv_cell_and_far_nics_are_not_near(hardware_dir):
    topo = parse_topo((hardware_dir / "topo-m_l40s_4gpu_2nic_pcie-no-nvlink.txt").read_text())
    cells = {v for row in nvlink_matrix(topo).values() for v in row.values()}
    assert cells == {"NODE", "SYS"}
    nearest = nearest_nics(topo)
    assert (nearest[0], nearest[1]) == (None, None)
    assert (nearest[2], nearest[3]) == ("mlx5_0", "mlx5_1")
    assert topo["matrix"]["mlx5_0"]["mlx5_1"] == "PIX"


def test_ansi_codes_and_an_empty_tab_field_do_not_shift_the_columns(hardware_dir):
    raw = (hardware_dir / "topo-m_h100-1gpu-vm_ansi-escapes.txt").read_text()
    assert "\x1b[4m" in raw
    topo = parse_topo(raw)
    assert topo["gpus"] == ["GPU0"]
    assert topo["matrix"]["GPU0"]["GPU0"] == "X"
    assert nvlink_matrix(topo) == {"0": {}}


def test_the_legend_text_is_not_read_as_rows(hardware_dir):
    topo = parse_topo((hardware_dir / "topo-m_gb200_4gpu_tray_PARTIAL.txt").read_text())
    assert set(topo["matrix"]) == {"GPU0", "GPU1", "GPU2", "GPU3"}
    assert topo["affinity"]["GPU2"] == {"cpus": "72-143", "numa_node": 1, "gpu_numa_id": None}


def test_output_without_a_matrix_gives_an_empty_topology():
    assert parse_topo("NVIDIA-SMI has failed because it couldn't communicate with the driver.") == {
        "gpus": [],
        "nics": [],
        "matrix": {},
        "affinity": {},
    }


def test_older_drivers_name_the_nic_in_the_header_and_have_no_numa_columns():
    # nccl-tests issue #78 shape: `mlx5_0` straight in the header, only `CPU Affinity`.
    text = (
        "\tGPU0\tGPU1\tmlx5_0\tCPU Affinity\n"
        "GPU0\t X \tNV2\tPHB\t0-19\n"
        "GPU1\tNV2\t X \tPHB\t0-19\n"
        "mlx5_0\tPHB\tPHB\t X \t\n"
    )
    topo = parse_topo(text)
    assert topo["nics"] == ["mlx5_0"]
    assert nvlink_matrix(topo) == {"0": {"1": "NV2"}, "1": {"0": "NV2"}}
    assert nearest_nics(topo) == {0: "mlx5_0", 1: "mlx5_0"}
    assert topo["affinity"]["GPU0"] == {"cpus": "0-19", "numa_node": None, "gpu_numa_id": None}
