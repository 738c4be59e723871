"""The NVML path: its mapping of NVML values to the facts the nvidia-smi path gives.

pynvml is not installed here (and must not be); the mapping functions take
the plain values NVML returns and are checked against what the XML path reads
from the same kind of card.
"""

from __future__ import annotations

from llmgw_agent.discover import nvml
from llmgw_agent.discover.fabric import fabric_verdict
from llmgw_agent.discover.smi import parse_smi_xml

# bandwidth FALSE(2) | recovery FALSE(2)<<2 | unhealthy FALSE(2)<<4 | timeout FALSE(2)<<6 | config NONE(1)<<8
HEALTHY_MASK = 2 | (2 << 2) | (2 << 4) | (2 << 6) | (1 << 8)


def test_a_healthy_gb200_reads_the_same_through_nvml_as_through_the_xml(hardware_dir):
    xml = parse_smi_xml((hardware_dir / "nvidia-smi-q-x_gb200_4gpu_nvl72-tray.xml").read_text())
    from_xml = xml["cards"][0]["fabric"]
    raw_uuid = bytes.fromhex("00000001000000000000000000000001")
    from_nvml = nvml.fabric_from_nvml(3, 0, 2, raw_uuid, HEALTHY_MASK, 1)
    for key in ("state", "status", "clique_id", "cluster_uuid"):
        assert from_nvml[key] == from_xml[key]
    for key in (
        "summary",
        "bandwidth",
        "route_recovery_in_progress",
        "route_unhealthy",
        "access_timeout_recovery",
        "incorrect_configuration",
    ):
        assert from_nvml["health"][key] == from_xml["health"][key], key
    assert fabric_verdict(from_nvml) == "joined"


def test_insufficient_resources_from_nvml_is_not_joined():
    fabric = nvml.fabric_from_nvml(3, 23, 0, [0] * 16, None, None)
    assert fabric["status"] == "Insufficient Resources"
    assert fabric["cluster_uuid"] == "00000000-0000-0000-0000-000000000000"
    assert fabric_verdict(fabric) == "not-joined"


def test_degraded_bandwidth_and_an_unsupported_fabric():
    mask = 1 | (2 << 2) | (2 << 4) | (2 << 6)
    health = nvml.health_from_mask(mask, 3)
    assert (health["summary"], health["bandwidth"]) == ("Limited Capacity", "Degraded")
    assert nvml.fabric_from_nvml(0, 0, 0, None, None, None) is None
    assert (
        nvml.health_from_mask((5 << 8), None)["incorrect_configuration"] == "Insufficient NVLinks"
    )


def test_cuda_versions_and_uuids_print_as_nvidia_smi_prints_them():
    assert nvml.cuda_version_text(12020) == "12.2"
    assert nvml.cuda_version_text(13000) == "13.0"
    assert nvml.cuda_version_text(0) is None
    assert nvml.uuid_text(bytes(range(16))) == "00010203-0405-0607-0809-0a0b0c0d0e0f"


def test_without_pynvml_the_nvml_path_says_so_and_yields_nothing():
    record, reason = nvml.read_cards()
    assert record is None
    assert "pynvml" in reason or "NVML" in reason


def test_a_process_name_is_read_from_proc_and_a_gone_one_is_empty():
    import os

    assert nvml.process_name(os.getpid()) != ""
    assert nvml.process_name(None) == ""


class _NVMLError(Exception):
    """What pynvml raises; its subclasses are named NVMLError_<Reason>."""


class NVMLError_NotSupported(_NVMLError):
    pass


class _Struct:
    def __init__(self, **fields):
        self.__dict__.update(fields)


def _stand_in_pynvml(cards):
    """A stand-in for the third-party pynvml, answering with a real capture's values."""
    import types

    mib = 1024 * 1024
    module = types.ModuleType("pynvml")
    module.NVML_TEMPERATURE_GPU = 0
    module.NVML_DEVICE_MIG_ENABLE = 1
    module.nvmlInit = lambda: None
    module.nvmlShutdown = lambda: None
    module.nvmlSystemGetDriverVersion = lambda: "580.173.02"
    module.nvmlSystemGetCudaDriverVersion_v2 = lambda: 13000
    module.nvmlDeviceGetCount = lambda: len(cards)
    module.nvmlDeviceGetHandleByIndex = lambda i: cards[i]
    module.nvmlDeviceGetName = lambda h: h["name"].encode()
    module.nvmlDeviceGetUUID = lambda h: h["uuid"]
    module.nvmlDeviceGetMemoryInfo = lambda h: _Struct(
        total=h["memory_mib"] * mib, used=h["memory_used_mib"] * mib
    )
    module.nvmlDeviceGetUtilizationRates = lambda h: _Struct(gpu=h["utilization_pct"])
    module.nvmlDeviceGetPciInfo = lambda h: _Struct(busId=h["pci_bus_id"].encode())
    module.nvmlDeviceGetCudaComputeCapability = lambda h: (10, 0)
    module.nvmlDeviceGetMigMode = lambda h: (0, 0)
    module.nvmlDeviceGetPowerUsage = lambda h: int(h["power_w"] * 1000)
    module.nvmlDeviceGetTemperature = lambda h, sensor: h["temperature_c"]
    module.nvmlDeviceGetComputeRunningProcesses = lambda h: []

    def fabric(h):
        raw = bytes.fromhex(h["fabric"]["cluster_uuid"].replace("-", ""))
        healthy = 2 | (2 << 2) | (2 << 4) | (2 << 6) | (1 << 8)
        return _Struct(
            state=3,
            status=0,
            cliqueId=h["fabric"]["clique_id"],
            clusterUuid=raw,
            healthMask=healthy,
            healthSummary=1,
        )

    module.nvmlDeviceGetGpuFabricInfoV = fabric

    def unsupported(*_args):
        raise NVMLError_NotSupported("Not Supported")

    module.nvmlDeviceGetMaxMigDeviceCount = unsupported
    return module


def test_the_nvml_path_gives_the_facts_the_xml_path_gives(hardware_dir, monkeypatch):
    import sys

    from llmgw_agent.discover.assemble import build_facts

    xml = parse_smi_xml((hardware_dir / "nvidia-smi-q-x_gb200_4gpu_nvl72-tray.xml").read_text())
    monkeypatch.setitem(sys.modules, "pynvml", _stand_in_pynvml(xml["cards"]))
    record, reason = nvml.read_cards()
    assert reason is None
    assert record["cuda_version"] == xml["cuda_version"]

    def facts(smi):
        return build_facts(smi, [], None, [], None, [], {}, {}, {}, "test", "0", [])

    from_nvml, from_xml = facts(record), facts(xml)
    for key in (
        "index",
        "name",
        "uuid",
        "pci_bus_id",
        "memory_mib",
        "memory_used_mib",
        "class",
        "compute_capability",
        "mig_mode",
        "utilization_pct",
        "temperature_c",
        "power_w",
    ):
        assert [c[key] for c in from_nvml["cards"]] == [c[key] for c in from_xml["cards"]], key
    for key in ("state", "status", "clique_id", "cluster_uuid", "verdict"):
        assert [c["fabric"][key] for c in from_nvml["cards"]] == [
            c["fabric"][key] for c in from_xml["cards"]
        ]
    assert from_nvml["nvlink_domain"] == from_xml["nvlink_domain"]
    assert from_nvml["gpus"] == from_xml["gpus"]
