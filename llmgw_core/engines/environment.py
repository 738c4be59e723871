"""The environment every shard's processes are given (pure; SPEC §4).

This is where multi-node runs go wrong, quietly: a missing or loose NCCL
variable gives a replica that starts, passes its health check and then
hangs on its first all-reduce. Each rule says which failure it prevents.

The operator's allowed `--env` variables go on top (they are the escape
hatch for per-cluster tuning); the cards placement claimed are never
overridden. Secrets are not here: they travel as the shard's `secret_env`
(`ShardLaunch.secret_env`), which the agent keeps off the node's disk.
"""

from __future__ import annotations

from llmgw_core.engines.allowlist import PLACEMENT_KEYS, checked_env
from llmgw_core.engines.spec import LaunchNode, LaunchRequest

NCCL_ENGINES = ("vllm", "sglang", "sim")
"""The engines whose cards talk through NCCL (llama.cpp splits layers without it)."""

RUNTIME_LORA_VARIABLE = "VLLM_ALLOW_RUNTIME_LORA_UPDATING"
"""vLLM registers its adapter load and unload endpoints only with this set."""

CPU_KV_VARIABLE = "VLLM_CPU_KVCACHE_SPACE"
"""vLLM's CPU backend: its KV cache, whole GiB (read with `int()`; unset, it sizes the
cache from what its process happens to hold resident)."""


def visible_devices(node: LaunchNode) -> str:
    """`CUDA_VISIBLE_DEVICES` for a node's devices.

    Whole cards by index (with `CUDA_DEVICE_ORDER=PCI_BUS_ID`, so CUDA counts
    them as nvidia-smi does, not fastest first); a MIG instance by its
    `MIG-<uuid>`, the only way CUDA names one. No devices: an empty value,
    so an engine on a CPU node never touches a card it was not given.
    """
    if len(node.gpus) == 1 and node.gpus[0].is_mig:
        uuid = node.gpus[0].uuid or ""
        return uuid if uuid.startswith("MIG-") else f"MIG-{uuid}"
    return ",".join(str(gpu.card_index) for gpu in node.gpus)


def hca_list(node: LaunchNode) -> str:
    """`NCCL_IB_HCA`: exactly the chosen fabric's adapters, `=`-prefixed.

    Without `=`, NCCL reads each name as a prefix and `mlx5_1` also takes
    `mlx5_10`…`mlx5_19`, which may sit on another fabric where the peer is
    unreachable. A port other than 1 is named (`mlx5_4:2`).
    """
    names = [
        adapter.name if adapter.port == 1 else f"{adapter.name}:{adapter.port}"
        for adapter in node.adapters
    ]
    return "=" + ",".join(names)


def gid_index(node: LaunchNode) -> int | None:
    """The RoCE v2 GID index of the node's fabric adapters, None on InfiniBand or unknown.

    The agent reads it per adapter; `validate` refuses adapters of one
    fabric that disagree, so the first known one stands for all.
    """
    for adapter in node.adapters:
        if adapter.is_roce and adapter.gid_index is not None:
            return adapter.gid_index
    return None


def fabric_env(request: LaunchRequest, node: LaunchNode) -> dict[str, str]:
    """The NCCL and Gloo variables of one node (no cards, no operator variables)."""
    env: dict[str, str] = {}
    if node.adapters:
        # Only this fabric's adapters: left to itself NCCL takes every HCA
        # it finds, including another fabric's, and the job hangs there.
        env["NCCL_IB_HCA"] = hca_list(node)
        env["NCCL_IB_DISABLE"] = "0"
        roce_gid = gid_index(node)
        if roce_gid is not None:
            # RoCE: the routable v2 entry; a v1 link-local one hangs the job.
            env["NCCL_IB_GID_INDEX"] = str(roce_gid)
    else:
        # No fabric: NCCL stops looking for one instead of timing out on it.
        env["NCCL_IB_DISABLE"] = "1"
    if node.interface:
        # Bootstrap on the management network: NCCL otherwise probes every
        # interface, IPoIB addresses that do not route between fabrics included.
        env["NCCL_SOCKET_IFNAME"] = f"={node.interface}"
        env["GLOO_SOCKET_IFNAME"] = node.interface
    if request.engine in NCCL_ENGINES and request.tensor_parallel * request.pipeline_parallel > 1:
        # The transport proof (`fabric.paths`): NCCL names each rank pair's path
        # only at INFO. INIT alone carries every line the proof reads (the
        # channels, `Using network`, the adapters, `comm … nNodes`) and not
        # ENV's echo of the environment or BOOTSTRAP's chatter. The operator's
        # own `NCCL_DEBUG` (say `WARN`) goes on top and turns it off.
        env["NCCL_DEBUG"] = "INFO"
        env["NCCL_DEBUG_SUBSYS"] = "INIT"
    if request.multi_node and node.nvlink_domain:
        # Inside one NVLink domain NCCL carries collectives over NVLink
        # between nodes only when told to, and needs CUDA's cuMem for it.
        env["NCCL_MNNVL_ENABLE"] = "1"
        env["NCCL_CUMEM_ENABLE"] = "1"
    return env


def shard_env(request: LaunchRequest, node: LaunchNode) -> dict[str, str]:
    """Every variable a node's engine processes are given, in the order they win.

    The launcher's (cards, fabric), then the operator's allowed `--env`; the
    cards are set again last so nothing moves them. No secret: those go in
    the shard's `secret_env`.

    Raises:
        BadInput: an operator variable the allowlist refuses.
    """
    cards = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID", "CUDA_VISIBLE_DEVICES": visible_devices(node)}
    env = {**cards, **fabric_env(request, node)}
    if request.cpu_kv_cache_gib is not None and request.engine in ("vllm", "sim"):
        # The KV cache the plan sized; the operator's own value goes on top.
        env[CPU_KV_VARIABLE] = str(request.cpu_kv_cache_gib)
        if request.cpu_bind:
            # Cores no other vLLM replica on the node binds (`engines.cpu_bind`).
            env["VLLM_CPU_OMP_THREADS_BIND"] = request.cpu_bind
    if request.engine in ("vllm", "sim") and request.lora is not None:
        # Its /v1/load_lora_adapter and /v1/unload_lora_adapter, for `apply` of a changed list.
        env[RUNTIME_LORA_VARIABLE] = "True"
    if request.engine in ("vllm", "sim") and request.multi_node:
        # vLLM and Ray pick the address a node is reached at from this; on a
        # multi-homed node their guess may be an address the others cannot reach.
        env["VLLM_HOST_IP"] = node.address
    env.update(checked_env(request.extra_env))
    env.update({key: cards[key] for key in PLACEMENT_KEYS})
    return env
