"""Prefill and decode apart: each engine's KV connectors, their flags and their environment (pure).

A disaggregated service runs two kinds of worker: prefill workers read the
prompt and produce its KV cache, decode workers receive it and write the
answer. What moves the KV cache between them is the engine's *connector*,
and each engine names, gates and pairs its connectors its own way:

| engine | connector | how it is told | roles | since | tensor widths |
|---|---|---|---|---|---|
| vLLM | `nixl` | `--kv-transfer-config {"kv_connector":"NixlConnector","kv_role":"kv_both"}` | both sides `kv_both` (the proxy gives each request its role) | 0.9.0 | equal, or one a multiple of the other |
| vLLM | `mooncake` | `{"kv_connector":"MooncakeConnector","kv_role":"kv_producer"|"kv_consumer"}` | producer, consumer | 0.15.0 | equal |
| vLLM | `lmcache` | `{"kv_connector":"LMCacheConnectorV1","kv_role":"kv_producer"|"kv_consumer"}` | producer, consumer | 0.9.0 | equal |
| SGLang | `mooncake` (its default), `nixl` | `--disaggregation-mode prefill|decode --disaggregation-transfer-backend B --disaggregation-bootstrap-port P --disaggregation-ib-device D` | prefill, decode | 0.5.0 | equal, or one a multiple of the other |
| llama.cpp | — | it has no prefill/decode split | | | |

Sources, read for this module (December 2026): vLLM's NixlConnector usage
guide and compatibility matrix (docs.vllm.ai v0.11.0 … v0.32.0: `kv_both`,
`UCX_NET_DEVICES`/`UCX_TLS`, `VLLM_NIXL_SIDE_CHANNEL_PORT`, heterogeneous
tensor widths supported for dense and MoE models), its MooncakeConnector
usage guide (first published with v0.15.0; v0.11.2's documentation has only
the MooncakeStore offload: `kv_producer`/`kv_consumer`,
`VLLM_MOONCAKE_BOOTSTRAP_PORT`, default 8998), its disaggregated-prefill
page (LMCacheConnectorV1 with `kv_producer`/`kv_consumer`), and SGLang's
`server_args.py` (0.5.3, the release `flags.py` was read from:
`--disaggregation-mode null|prefill|decode`,
`--disaggregation-transfer-backend mooncake|nixl|…`, default `mooncake`,
`--disaggregation-bootstrap-port`, default 8998, `--disaggregation-ib-device`).
A release older than a connector's `since` is refused, named: a connector
missing from the installed engine fails only when the first request crosses,
long after the replica looked ready.

The transfer's environment names the rails placement chose and no others,
for the same reason `NCCL_IB_HCA` does (`engines.environment`): UCX left to
itself takes every adapter it finds, another fabric's included, and falls
back to TCP without a word. So `UCX_TLS` never lists `tcp` unless the
operator allowed TCP (`allow_tcp`): a transfer that cannot use the rails
then fails loudly at start instead of running ten times slower.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from llmgw_core.engines.programs import at_least
from llmgw_core.engines.spec import FabricAdapter, LaunchNode, LaunchRequest
from llmgw_core.errors import BadInput

Role = Literal["prefill", "decode"]
Pairing = Literal["equal", "multiple"]
Transport = Literal["node", "nvlink", "infiniband", "roce", "tcp"]

CONNECTORS = ("nixl", "mooncake", "lmcache")
"""The connector names a document may give."""

PD_ENGINES = ("vllm", "sglang")
"""The engines that run prefill and decode apart."""

DEFAULT_CONNECTOR = {"vllm": "nixl", "sglang": "mooncake"}
"""The connector used when the document names none: the one each engine's own guide leads with."""

DEFAULT_BOOTSTRAP_PORT = 8998
"""SGLang's `--disaggregation-bootstrap-port` and vLLM's `VLLM_MOONCAKE_BOOTSTRAP_PORT` default."""

DEFAULT_NIXL_SIDE_CHANNEL_PORT = 5600
"""vLLM's `VLLM_NIXL_SIDE_CHANNEL_PORT` default: where a decode worker asks a prefill worker
for its KV layout before the first transfer."""


@dataclass(frozen=True)
class ConnectorRule:
    """What one engine's connector is called, from which release, and how its sides pair.

    Attributes:
        engine: `vllm` or `sglang`.
        connector: the document's name (`nixl`).
        engine_name: what the engine calls it (`NixlConnector`, or SGLang's backend `nixl`).
        since: the first release that has it.
        roles: the engine's role for the prefill side and the decode side.
        pairing: `equal`: both sides' tensor widths must match; `multiple`: one must divide
            the other (the connector splits or gathers the KV heads between them).
    """

    engine: str
    connector: str
    engine_name: str
    since: tuple[int, ...]
    roles: tuple[str, str]
    pairing: Pairing

    @property
    def since_text(self) -> str:
        """`0.15.0`."""
        return ".".join(str(part) for part in self.since)


RULES: dict[tuple[str, str], ConnectorRule] = {
    ("vllm", "nixl"): ConnectorRule(
        "vllm", "nixl", "NixlConnector", (0, 9, 0), ("kv_both", "kv_both"), "multiple"
    ),
    ("vllm", "mooncake"): ConnectorRule(
        "vllm", "mooncake", "MooncakeConnector", (0, 15, 0), ("kv_producer", "kv_consumer"), "equal"
    ),
    ("vllm", "lmcache"): ConnectorRule(
        "vllm", "lmcache", "LMCacheConnectorV1", (0, 9, 0), ("kv_producer", "kv_consumer"), "equal"
    ),
    ("sglang", "mooncake"): ConnectorRule(
        "sglang", "mooncake", "mooncake", (0, 5, 0), ("prefill", "decode"), "multiple"
    ),
    ("sglang", "nixl"): ConnectorRule(
        "sglang", "nixl", "nixl", (0, 5, 0), ("prefill", "decode"), "multiple"
    ),
}
"""Every (engine, connector) that runs; a pair not here is refused by `connector_rule`."""


def connector_rule(engine: str | None, connector: str | None) -> ConnectorRule:
    """The rule of `engine`'s `connector` (its default when None).

    Raises:
        BadInput: the engine has no prefill/decode split, or not with this connector.
    """
    if engine not in PD_ENGINES:
        said = f"engine {engine}" if engine else "no engine"
        raise BadInput(
            f"disaggregation needs vLLM or SGLang, and {said} is given"
            + (" (llama.cpp has no prefill/decode split)" if engine == "llama.cpp" else ""),
            "give engine: vllm or engine: sglang",
        )
    name = connector or DEFAULT_CONNECTOR[engine]
    rule = RULES.get((engine, name))
    if rule is None:
        offered = ", ".join(c for e, c in RULES if e == engine)
        raise BadInput(
            f"disaggregation: {engine} has no {name} connector", f"give connector: one of {offered}"
        )
    return rule


def check_version(rule: ConnectorRule, version: str | None, node: str = "") -> None:
    """Refuse a release older than the connector (an unreported version passes: the engine
    then names the connector itself).

    Raises:
        BadInput: naming the release installed, the node and the release that added it.
    """
    if at_least(version, rule.since) is False:
        where = f" on {node}" if node else ""
        raise BadInput(
            f"{rule.engine} {version}{where} has no {rule.engine_name} connector"
            f" (it came in {rule.since_text})",
            f"upgrade {rule.engine} to {rule.since_text} or later, or give another connector",
        )


def check_pairing(rule: ConnectorRule, prefill_width: int, decode_width: int) -> None:
    """Refuse tensor widths the connector cannot carry KV between.

    Raises:
        BadInput: naming both widths and what the connector accepts.
    """
    if prefill_width == decode_width:
        return
    low, high = sorted((prefill_width, decode_width))
    if rule.pairing == "multiple" and high % low == 0:
        return
    accepts = "equal widths" if rule.pairing == "equal" else "widths of which one divides the other"
    raise BadInput(
        f"disaggregation: prefill is {prefill_width} cards wide and decode {decode_width},"
        f" and {rule.engine}'s {rule.connector} connector pairs only {accepts}",
        "give both sides layouts whose gpus match"
        + ("" if rule.pairing == "equal" else " or divide one another"),
    )


def kv_transfer_config(rule: ConnectorRule, role: Role) -> str:
    """vLLM's `--kv-transfer-config` JSON for one side (compact, keys in a fixed order)."""
    if rule.engine != "vllm":
        raise ValueError(f"{rule.engine} takes no --kv-transfer-config")
    config: dict[str, object] = {
        "kv_connector": rule.engine_name,
        "kv_role": rule.roles[0 if role == "prefill" else 1],
    }
    if rule.connector == "lmcache":
        # LMCache's PD mode keeps partial chunks on both sides: a decode worker
        # that drops the prompt's last partial chunk recomputes it, and the
        # tokens it then produces differ from a service that does not split.
        config["kv_connector_extra_config"] = {"discard_partial_chunks": False}
    return json.dumps(config, separators=(",", ":"))


def role_flags(
    rule: ConnectorRule,
    role: Role,
    *,
    bootstrap_port: int = DEFAULT_BOOTSTRAP_PORT,
    ib_devices: Sequence[str] = (),
) -> list[str]:
    """The flags one side's engine is started with, beside its usual ones.

    Args:
        rule: the service's connector.
        role: which side this worker is.
        bootstrap_port: SGLang's prefill workers serve the handshake here (decode workers
            are told it per request by the router; the flag is harmless there).
        ib_devices: the rails the transfer may use (SGLang's `--disaggregation-ib-device`);
            empty on one node or inside an NVLink domain.
    """
    if rule.engine == "vllm":
        return ["--kv-transfer-config", kv_transfer_config(rule, role)]
    flags = ["--disaggregation-mode", rule.roles[0 if role == "prefill" else 1]]
    flags += ["--disaggregation-transfer-backend", rule.engine_name]
    flags += ["--disaggregation-bootstrap-port", str(bootstrap_port)]
    if ib_devices:
        flags += ["--disaggregation-ib-device", ",".join(ib_devices)]
    return flags


def ucx_devices(adapters: Sequence[FabricAdapter]) -> str:
    """`UCX_NET_DEVICES`: each rail as UCX names it, `mlx5_0:1,mlx5_1:1`."""
    return ",".join(f"{adapter.name}:{adapter.port}" for adapter in adapters)


UCX_TLS = {
    "node": "cuda_ipc,cuda_copy,sm,self",
    "nvlink": "cuda_ipc,cuda_copy,sm,self",
    "infiniband": "rc,cuda_copy,cuda_ipc,sm,self",
    "roce": "rc,cuda_copy,cuda_ipc,sm,self",
    "tcp": "tcp,cuda_copy,cuda_ipc,sm,self",
}
"""`UCX_TLS` per transport: GPU memory over NVLink (`cuda_ipc`, across trays of an NVLink
domain too), RDMA's reliable connections on the rails; `tcp` only where TCP was allowed."""


def transfer_env(
    rule: ConnectorRule,
    transport: Transport,
    adapters: Sequence[FabricAdapter],
    *,
    interface: str | None = None,
    address: str | None = None,
    bootstrap_port: int = DEFAULT_BOOTSTRAP_PORT,
    side_channel_port: int = DEFAULT_NIXL_SIDE_CHANNEL_PORT,
) -> dict[str, str]:
    """The variables one worker's KV transfer is given: its rails and its transports, no others.

    Args:
        rule: the service's connector.
        transport: what placement found between the sides (`placement_pd`).
        adapters: this node's rails of the transfer (failed ones already left out).
        interface: the management interface, for a transfer allowed over TCP.
        address: the node's management address (vLLM's NIXL side channel listens there).
        bootstrap_port: vLLM's Mooncake bootstrap port (prefill side).
        side_channel_port: vLLM's NIXL side-channel port.
    """
    env: dict[str, str] = {}
    if rule.connector == "nixl" or rule.connector == "lmcache":
        # NIXL (and LMCache's PD channel, which runs over NIXL) moves bytes with UCX:
        # the NCCL variables do not reach it.
        env["UCX_TLS"] = UCX_TLS[transport]
        # UCX names each endpoint's transports and adapters at `info` (`ep_cfg[…]: …`): the
        # proof the replica page reads (`fabric.kv_transfer`), as NCCL_DEBUG=INFO is NCCL's.
        env["UCX_LOG_LEVEL"] = "info"
        if transport in ("infiniband", "roce") and adapters:
            env["UCX_NET_DEVICES"] = ucx_devices(adapters)
        elif transport == "tcp" and interface:
            env["UCX_NET_DEVICES"] = interface
        gid = next((a.gid_index for a in adapters if a.is_roce and a.gid_index is not None), None)
        if transport == "roce" and gid is not None:
            # RoCE: the routable v2 GID, as for NCCL; UCX's own pick may be a v1 entry.
            env["UCX_IB_GID_INDEX"] = str(gid)
    if rule.connector == "mooncake":
        # Mooncake's transfer engine discovers the node's adapters itself unless filtered;
        # it moves KV by RDMA inside one node too.
        if transport != "tcp" and adapters:
            env["MC_MS_AUTO_DISC"] = "1"
            env["MC_MS_FILTERS"] = ",".join(a.name for a in adapters)
        if transport == "tcp":
            env["MC_FORCE_TCP"] = "1"
    if rule.engine == "vllm" and rule.connector == "nixl":
        env["VLLM_NIXL_SIDE_CHANNEL_PORT"] = str(side_channel_port)
        if address:
            env["VLLM_NIXL_SIDE_CHANNEL_HOST"] = address
    if rule.engine == "vllm" and rule.connector == "mooncake":
        env["VLLM_MOONCAKE_BOOTSTRAP_PORT"] = str(bootstrap_port)
    return env


def launch_flags(request: LaunchRequest, node: LaunchNode) -> list[str]:
    """A worker's role flags as `request.pd` gives them (none for a replica doing both).

    Raises:
        BadInput: the connector is newer than the release installed on `node`.
    """
    pd = request.pd
    if pd is None:
        return []
    rule = connector_rule(request.engine, pd.connector)
    check_version(rule, node.engine_version, node.name)
    rails = pd.rails.get(node.name, ())
    ib_devices = [a.name for a in rails] if pd.transport != "tcp" else []
    return role_flags(
        rule, "prefill" if pd.role == "prefill" else "decode",
        bootstrap_port=pd.bootstrap_port, ib_devices=ib_devices,
    )  # fmt: skip


def launch_env(request: LaunchRequest, node: LaunchNode) -> dict[str, str]:
    """A worker's transfer variables as `request.pd` gives them (none for a replica doing both)."""
    pd = request.pd
    if pd is None:
        return {}
    rule = connector_rule(request.engine, pd.connector)
    transport: Transport = pd.transport  # type: ignore[assignment]  # placement_pd's words
    return transfer_env(
        rule,
        transport,
        pd.rails.get(node.name, ()),
        interface=node.interface,
        address=node.address,
        bootstrap_port=pd.bootstrap_port,
        side_channel_port=pd.side_channel_port,
    )
