"""Cards through NVML (`pynvml` / nvidia-ml-py) when it is importable.

Produces the same card record as the nvidia-smi parsers. Every NVML call
goes through `_call`, which turns "not supported" and friends into None, so
one missing feature on an old driver never hides the rest of a card.
"""

from __future__ import annotations

from llmgw_agent.discover.records import Record, card_record, mig_record

TYPE_CHECKING = False  # `typing` costs ms of every agent start; annotations are strings here
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, List, Optional, Tuple

FABRIC_STATES = {0: None, 1: "Not Started", 2: "In Progress", 3: "Completed"}
"""nvmlGpuFabricState_t -> the words nvidia-smi prints (0 = not supported: no fabric)."""

HEALTH_SUMMARIES = {0: None, 1: "Healthy", 2: "Unhealthy", 3: "Limited Capacity"}

# nvmlReturn_t values a fabric status can carry, in nvidia-smi's words.
FABRIC_STATUS = {
    0: "Success",
    1: "Uninitialized",
    2: "Invalid Argument",
    3: "Not Supported",
    4: "No Permission",
    6: "Not Found",
    7: "Insufficient Size",
    8: "Insufficient Power",
    12: "Timeout",
    15: "GPU is lost",
    23: "Insufficient Resources",
    999: "Unknown Error",
}

# Health mask fields: (name, shift, width mask); 1 = true, 2 = false, 0 = not supported.
_HEALTH_BITS = (
    ("bandwidth", 0, 0x3),
    ("route_recovery_in_progress", 2, 0x3),
    ("route_unhealthy", 4, 0x3),
    ("access_timeout_recovery", 6, 0x3),
)
_INCORRECT_CONFIGURATION = {
    0: None,
    1: None,
    2: "Incorrect SysGuid",
    3: "Incorrect Chassis Serial Number",
    4: "No Partition",
    5: "Insufficient NVLinks",
}


def health_from_mask(mask: Optional[int], summary: Optional[int]) -> Dict[str, Any]:
    """The fabric health dict (as the XML path gives it) from NVML's mask and summary."""
    health: Dict[str, Any] = {
        "summary": HEALTH_SUMMARIES.get(summary) if summary is not None else None,
        "bandwidth": None,
        "route_recovery_in_progress": None,
        "route_unhealthy": None,
        "access_timeout_recovery": None,
        "incorrect_configuration": None,
        "partition_assigned": None,
    }
    if mask is None:
        return health
    for name, shift, width in _HEALTH_BITS:
        value = (mask >> shift) & width
        if name == "bandwidth":
            health[name] = {1: "Degraded", 2: "Full"}.get(value)
        else:
            health[name] = {1: True, 2: False}.get(value)
    health["incorrect_configuration"] = _INCORRECT_CONFIGURATION.get((mask >> 8) & 0xF)
    return health


def fabric_from_nvml(
    state: Optional[int],
    status: Optional[int],
    clique_id: Optional[int],
    cluster_uuid: Optional[bytes],
    mask: Optional[int],
    summary: Optional[int],
) -> Optional[Record]:
    """A card record's fabric from NVML's fabric info values (None: no fabric)."""
    words = FABRIC_STATES.get(state) if state is not None else None
    if words is None:
        return None
    return {
        "state": words,
        "status": FABRIC_STATUS.get(status, "Error {}".format(status))
        if status is not None
        else None,
        "clique_id": clique_id,
        "cluster_uuid": uuid_text(cluster_uuid) if cluster_uuid is not None else None,
        "health": health_from_mask(mask, summary),
    }


def uuid_text(raw: Any) -> str:
    """16 raw bytes (or a list of ints) -> `xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx`."""
    if isinstance(raw, str):
        return raw
    uuid_bytes = bytes(bytearray(int(b) & 0xFF for b in raw))[:16]
    hexed = uuid_bytes.hex().ljust(32, "0")
    return "-".join((hexed[:8], hexed[8:12], hexed[12:16], hexed[16:20], hexed[20:32]))


def cuda_version_text(version: Optional[int]) -> Optional[str]:
    """NVML's CUDA driver version integer (12020) -> `12.2`."""
    if not version:
        return None
    return "{}.{}".format(version // 1000, (version % 1000) // 10)


def _text(value: Any) -> Any:
    return value.decode() if isinstance(value, bytes) else value


def _call(fn: Callable[..., Any], *args: Any) -> Any:
    """One NVML call; None when the driver says the feature is missing or the call fails."""
    try:
        return fn(*args)
    except Exception as exc:  # NVMLError and its many subclasses are the only ones expected
        if type(exc).__name__.startswith("NVMLError") or isinstance(
            exc, (AttributeError, TypeError)
        ):
            return None
        raise


def _card(nvml: Any, index: int) -> Record:
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    memory = _call(nvml.nvmlDeviceGetMemoryInfo, handle)
    utilization = _call(nvml.nvmlDeviceGetUtilizationRates, handle)
    pci = _call(nvml.nvmlDeviceGetPciInfo, handle)
    capability = _call(nvml.nvmlDeviceGetCudaComputeCapability, handle)
    mig = _call(nvml.nvmlDeviceGetMigMode, handle)
    power_mw = _call(nvml.nvmlDeviceGetPowerUsage, handle)
    temperature = _call(
        nvml.nvmlDeviceGetTemperature, handle, getattr(nvml, "NVML_TEMPERATURE_GPU", 0)
    )
    mig_enabled = bool(mig and mig[0] == getattr(nvml, "NVML_DEVICE_MIG_ENABLE", 1))
    return card_record(
        index,
        _text(_call(nvml.nvmlDeviceGetName, handle)) or "unknown GPU",
        uuid=_text(_call(nvml.nvmlDeviceGetUUID, handle)),
        pci_bus_id=_text(getattr(pci, "busId", None)) if pci is not None else None,
        memory_mib=int(memory.total // (1024 * 1024)) if memory is not None else None,
        memory_used_mib=int(memory.used // (1024 * 1024)) if memory is not None else None,
        utilization_pct=None if mig_enabled or utilization is None else int(utilization.gpu),
        temperature_c=float(temperature) if temperature is not None else None,
        power_w=power_mw / 1000.0 if power_mw is not None else None,
        compute_capability="{}.{}".format(*capability) if capability else None,
        mig_mode=None if mig is None else ("enabled" if mig_enabled else "disabled"),
        mig_pending=None
        if mig is None
        else ("enabled" if mig[1] == getattr(nvml, "NVML_DEVICE_MIG_ENABLE", 1) else "disabled"),
        migs=_migs(nvml, handle) if mig_enabled else [],
        fabric=_fabric(nvml, handle),
        processes=_processes(nvml, handle),
    )


def _migs(nvml: Any, handle: Any) -> List[Record]:
    migs = []
    count = _call(nvml.nvmlDeviceGetMaxMigDeviceCount, handle) or 0
    for slot in range(count):
        mig = _call(nvml.nvmlDeviceGetMigDeviceHandleByIndex, handle, slot)
        if mig is None:
            continue
        attributes = _call(nvml.nvmlDeviceGetAttributes, mig)
        memory = _call(nvml.nvmlDeviceGetMemoryInfo, mig)
        migs.append(
            mig_record(
                index=len(migs),
                gpu_instance_id=_call(nvml.nvmlDeviceGetGpuInstanceId, mig),
                compute_instance_id=_call(nvml.nvmlDeviceGetComputeInstanceId, mig),
                sm_count=getattr(attributes, "multiprocessorCount", None),
                memory_mib=int(memory.total // (1024 * 1024)) if memory is not None else None,
                memory_used_mib=int(memory.used // (1024 * 1024)) if memory is not None else None,
                uuid=_text(_call(nvml.nvmlDeviceGetUUID, mig)),
            )
        )
    return migs


def _fabric(nvml: Any, handle: Any) -> Optional[Record]:
    getter = getattr(nvml, "nvmlDeviceGetGpuFabricInfoV", None)
    fabric = _call(getter, handle) if getter is not None else None
    if fabric is None and hasattr(nvml, "nvmlDeviceGetGpuFabricInfo"):
        fabric = _call(nvml.nvmlDeviceGetGpuFabricInfo, handle)
    if fabric is None:
        return None
    return fabric_from_nvml(
        getattr(fabric, "state", None),
        getattr(fabric, "status", None),
        getattr(fabric, "cliqueId", None),
        getattr(fabric, "clusterUuid", None),
        getattr(fabric, "healthMask", None),
        getattr(fabric, "healthSummary", None),
    )


def _processes(nvml: Any, handle: Any) -> List[Record]:
    running = _call(nvml.nvmlDeviceGetComputeRunningProcesses, handle) or []
    processes = []
    for proc in running:
        used = getattr(proc, "usedGpuMemory", None)
        processes.append(
            {
                "pid": getattr(proc, "pid", None),
                "name": process_name(getattr(proc, "pid", None)),
                "used_mib": int(used // (1024 * 1024)) if isinstance(used, int) else 0,
                "gpu_instance_id": getattr(proc, "gpuInstanceId", None),
                "compute_instance_id": getattr(proc, "computeInstanceId", None),
            }
        )
    return processes


def process_name(pid: Optional[int]) -> str:
    """A process's command name from /proc (NVML gives only the pid), "" when gone."""
    if not pid:
        return ""
    try:
        with open("/proc/{}/comm".format(pid)) as handle:
            return handle.read().strip()
    except OSError:
        return ""


def read_cards() -> Tuple[Optional[Record], Optional[str]]:
    """`(smi-shaped record, None)` through NVML, or `(None, sentence)` when NVML is not usable."""
    try:
        import pynvml  # optional: nvidia-ml-py
    except ImportError:
        return None, "pynvml is not installed"
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, _DriverNotLoaded ...
        return None, "NVML could not start: {}".format(exc)
    try:
        count = pynvml.nvmlDeviceGetCount()
        cards = [_card(pynvml, index) for index in range(count)]
        return (
            {
                "driver_version": _text(_call(pynvml.nvmlSystemGetDriverVersion)),
                "cuda_version": cuda_version_text(_call(pynvml.nvmlSystemGetCudaDriverVersion_v2)),
                "cards": cards,
            },
            None,
        )
    finally:
        _call(pynvml.nvmlShutdown)
