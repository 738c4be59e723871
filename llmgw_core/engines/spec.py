"""What a launch is asked for, and what it comes out as (pure dataclasses).

A `LaunchRequest` is a planned way made concrete: which model, which engine,
the layout, and one `LaunchNode` per node with the cards placement chose on
it, the adapters of the one fabric the replica uses, and where its engine
lives. The builders turn it into a `LaunchPlan`: one `ShardLaunch` per node,
each a list of `ShardCommand`s in start order, shaped exactly like the
agent's `shard.start` spec (`agent/llmgw_agent/shards/spec.py`).

Every argv is a list of separate strings, never a shell string: a model
path or a name typed by a person is one argument and reaches no shell.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from llmgw_core.engines.identity import EngineIdentity

Role = Literal["sidecar", "main"]

VLLM = "vllm"
SGLANG = "sglang"
LLAMA_CPP = "llama.cpp"
SIM = "sim"
ENGINES = (VLLM, SGLANG, LLAMA_CPP, SIM)
"""The engines a replica can be launched with."""

RAY = "ray"
MULTIPROCESSING = "mp"


def host_port(address: str, port: int) -> str:
    """`10.0.0.1:6379`, or `[fd00::1]:6379` for an IPv6 address."""
    if ":" in address and not address.startswith("["):
        return f"[{address}]:{port}"
    return f"{address}:{port}"


@dataclass(frozen=True)
class LaunchGpu:
    """One device a shard runs on: a whole card or one MIG instance.

    Attributes:
        id: the agent's claim id ("3", or "1102" for MIG instance 2 of card 1).
        card_index: the physical card's index as nvidia-smi numbers it.
        gpu_class: the card's class label (`h100-80g`); a tensor group is one class.
        name: the card's product name, for messages.
        uuid: the card's or the instance's UUID (`MIG-…` for an instance).
        mig_profile: the instance's profile (`3g.40gb`), None for a whole card.
        compute_capability: "9.0" and the like, None when unknown.
    """

    id: str
    card_index: int
    gpu_class: str
    name: str = ""
    uuid: str | None = None
    mig_profile: str | None = None
    compute_capability: str | None = None

    @property
    def is_mig(self) -> bool:
        """True for a MIG instance."""
        return self.mig_profile is not None


@dataclass(frozen=True)
class FabricAdapter:
    """One adapter port of the fabric the replica uses.

    Attributes:
        name: the HCA (`mlx5_0`).
        port: its port (1 on most adapters).
        link_layer: "InfiniBand" or "Ethernet" (RoCE); None when the node did not say.
        gid_index: the RoCE v2 GID index the node found, None on InfiniBand or unknown.
    """

    name: str
    port: int = 1
    link_layer: str | None = None
    gid_index: int | None = None

    @property
    def is_roce(self) -> bool:
        """True when the port runs RDMA over Ethernet."""
        return (self.link_layer or "").lower() == "ethernet"


@dataclass(frozen=True)
class LoraLaunch:
    """The LoRA adapters an engine loads at start, and the room it keeps for them.

    Attributes:
        adapters: (name, path on the nodes) of each, in the order the engine numbers them.
        max_loras: adapters one batch may use: the slots each card keeps.
        max_lora_rank: the rank each slot is made for.
        max_cpu_loras: vLLM: adapters kept in host RAM; None for `max_loras`.
    """

    adapters: tuple[tuple[str, str], ...]
    max_loras: int
    max_lora_rank: int
    max_cpu_loras: int | None = None

    def recorded(self, engine: str) -> list[dict[str, Any]]:
        """Each adapter as the replica's spec records it for the gateway: `{name, lora_id}`,
        the id llama-server numbers it by (None where the engine takes it by name)."""
        by_id = engine == LLAMA_CPP
        return [
            {"name": name, "lora_id": index if by_id else None}
            for index, (name, _path) in enumerate(self.adapters)
        ]


@dataclass(frozen=True)
class PdLaunch:
    """A worker of a disaggregated service: which side, which connector, over what.

    Attributes:
        role: `prefill` or `decode`.
        connector: the document's connector (`nixl`, `mooncake`, `lmcache`).
        transport: what placement found between the sides: `node`, `nvlink`,
            `infiniband`, `roce` or `tcp` (`placement_pd`).
        rails: per node, the adapters the transfer may use (failed rails left out).
        bootstrap_port: SGLang's and vLLM-Mooncake's handshake port on prefill workers.
        side_channel_port: vLLM-NIXL's side channel.
    """

    role: str
    connector: str
    transport: str
    rails: Mapping[str, tuple[FabricAdapter, ...]] = field(default_factory=dict)
    bootstrap_port: int = 8998
    side_channel_port: int = 5600

    def recorded(self) -> dict[str, Any]:
        """The worker's part as its replica's spec records it, so `replicas`, a heal and the
        gateway know its side (and a heal builds the same flags again)."""
        return {
            "role": self.role,
            "connector": self.connector,
            "transport": self.transport,
            "rails": {node: [asdict(a) for a in adapters] for node, adapters in self.rails.items()},
            "bootstrap_port": self.bootstrap_port,
            "side_channel_port": self.side_channel_port,
        }

    @classmethod
    def of_record(cls, found: Mapping[str, Any]) -> PdLaunch:
        """The worker's part again from `recorded()` (what its shards carry)."""
        return cls(
            role=str(found["role"]),
            connector=str(found["connector"]),
            transport=str(found["transport"]),
            rails={
                str(node): tuple(FabricAdapter(**a) for a in adapters)
                for node, adapters in (found.get("rails") or {}).items()
            },
            bootstrap_port=int(found.get("bootstrap_port") or 8998),
            side_channel_port=int(found.get("side_channel_port") or 5600),
        )


@dataclass(frozen=True)
class LaunchNode:
    """One node of a replica, as placement chose it.

    Attributes:
        name: the node's inventory name.
        rank: 0 serves HTTP and is the rendezvous; 1… join it.
        address: the management address the other nodes reach it at.
        interface: the management interface (`eno1`), None when unknown.
        gpus: the devices it runs on; empty on a CPU node.
        adapters: the adapters of the replica's one fabric on this node, and no others.
        fabric: that fabric's name, None when the replica uses none.
        nvlink_domain: the multi-node NVLink domain (cluster UUID) the replica
            is placed inside, None when it is not.
        http_port: the port its engine listens on.
        engine_version: the engine's version installed here (`0.12.0`, `b6500`).
        ray_version: Ray's version installed here (`2.52.0`), None when the node did not
            report one; a replica joined through Ray needs token authentication (2.52 on).
        program: how the engine is run here (`("vllm",)`, or
            `("/opt/py/bin/python3", "-m", "sglang.launch_server")`); see
            `programs.engine_program`. Empty: the engine's default.
        replayed: the node is a replayed one (its agent reads a capture, not hardware).
        simulated: its agent runs the sim engine in this engine's place: a replayed node
            whose inventory entry does not name where the engine lives.
        bind: the address its engine listens on for HTTP: the management
            address (not every address of a shared node), the inventory's
            `engine_bind`, or `0.0.0.0` when the address is not known.
    """

    name: str
    rank: int
    address: str
    gpus: tuple[LaunchGpu, ...] = ()
    interface: str | None = None
    adapters: tuple[FabricAdapter, ...] = ()
    fabric: str | None = None
    nvlink_domain: str | None = None
    http_port: int = 8000
    engine_version: str | None = None
    ray_version: str | None = None
    program: tuple[str, ...] = ()
    replayed: bool = False
    simulated: bool = False
    bind: str = "0.0.0.0"

    @property
    def reached_at(self) -> str:
        """The address a client on the node itself reaches the engine at."""
        return "127.0.0.1" if self.bind in ANY_ADDRESS else self.bind


ANY_ADDRESS = ("0.0.0.0", "::", "")
"""Bind addresses that mean every address of the node."""


@dataclass(frozen=True)
class LaunchRequest:
    """A planned way, placed: everything the command builders need.

    Attributes:
        engine: "vllm" | "sglang" | "llama.cpp" | "sim".
        source: a Hub repository id or a path on the nodes (a GGUF file for llama.cpp).
        served_name: the name clients ask for.
        nodes: one per node, rank 0 first or not (the builders sort by rank).
        context: tokens of context a sequence may hold.
        planned_context: the context the plan sized the cards for; None: not checked.
        tensor_parallel: cards a layer is cut across.
        pipeline_parallel: stages (nodes for vLLM/SGLang; cards by layer for llama.cpp).
        expert_parallel: a mixture of experts' experts spread over the cards.
        quantization_flag: the engine's `--quantization` value, when it must be told.
        quantization: the precision's name for messages (`fp8`, `awq`).
        min_compute_capability: the oldest card the quantisation loads on
            (`Quantization.min_compute_capability`), None when any card will do.
        dtype_flag: `--dtype` when the card cannot run the model's own dtype (`half`).
        gpu_memory_utilization: the share of each card the engine may take.
        concurrency: sequences of `context` served at once.
        extra_env: the operator's `--env KEY=VALUE`s, checked against the allowlist.
        secret_env: secrets the launcher adds from the operator's token store
            (`HF_TOKEN`) and the engine's key: each shard's `secret_env`, never
            a command's `env`, argv or anything shown.
        api_key: the key clients must present (`engines.keys` gives it to each
            engine off its command line); None: the engine takes any request.
        rendezvous_port: the Ray head's, vLLM's master or SGLang's dist-init port
            on rank 0; None: the engine's usual one.
        executor: vLLM across nodes: "ray" or "mp"; None: by the installed version.
        engine_args: the operator's own flags, checked (`engines.flags`), written after ours.
        tls: the replica's certificate and key (`engines.identity`): the engine that serves
            HTTP speaks HTTPS with them and its callers pin the certificate; None: plain HTTP.
        cpu_kv_cache_gib: vLLM on a CPU node: the KV cache the plan sized, whole GiB
            (`VLLM_CPU_KVCACHE_SPACE`); None elsewhere.
        cpu_bind: vLLM on a CPU node beside other replicas: the cores of each rank
            (`VLLM_CPU_OMP_THREADS_BIND`, ranks apart by `|`); None: vLLM's own choice.
        lora: the LoRA adapters the engine loads at start, None for none.
        pd: a prefill or decode worker of a disaggregated service; None: it does both.
    """

    engine: str
    source: str
    served_name: str
    nodes: tuple[LaunchNode, ...]
    context: int
    planned_context: int | None = None
    tensor_parallel: int = 1
    pipeline_parallel: int = 1
    expert_parallel: bool = False
    quantization_flag: str | None = None
    quantization: str | None = None
    min_compute_capability: float | None = None
    dtype_flag: str | None = None
    gpu_memory_utilization: float | None = None
    concurrency: int = 1
    extra_env: Mapping[str, str] = field(default_factory=dict)
    secret_env: Mapping[str, str] = field(default_factory=dict, repr=False)
    api_key: str | None = field(default=None, repr=False)
    rendezvous_port: int | None = None
    executor: str | None = None
    engine_args: Mapping[str, str | bool] = field(default_factory=dict)
    tls: EngineIdentity | None = field(default=None, repr=False)
    cpu_kv_cache_gib: int | None = None
    cpu_bind: str | None = None
    lora: LoraLaunch | None = None
    pd: PdLaunch | None = None

    @property
    def ranked_nodes(self) -> tuple[LaunchNode, ...]:
        """The nodes in rank order."""
        return tuple(sorted(self.nodes, key=lambda node: node.rank))

    @property
    def head(self) -> LaunchNode:
        """Rank 0: the node that serves HTTP and that the others join."""
        return self.ranked_nodes[0]

    @property
    def multi_node(self) -> bool:
        """True when the replica spans more than one node."""
        return len(self.nodes) > 1


@dataclass(frozen=True)
class ShardCommand:
    """One process of a shard, as the agent's `shard.start` takes it.

    Attributes:
        name: names the process in logs (`ray-head`, `vllm`).
        argv: the program and its arguments, one string each.
        env: the variables added to the node's environment for it.
        role: "sidecar" runs beside the engine for the shard's life; "main" is the engine.
        wait_for_port: hold the next command until this local port accepts.
    """

    name: str
    argv: tuple[str, ...]
    env: Mapping[str, str]
    role: Role = "main"
    wait_for_port: int | None = None

    def shell_text(self) -> str:
        """The argv quoted for a POSIX shell: for showing and copying by hand, never for running."""
        return shlex.join(self.argv)

    def to_wire(self) -> dict[str, Any]:
        """The command as `shard.start` takes it."""
        wire: dict[str, Any] = {
            "name": self.name,
            "argv": list(self.argv),
            "env": dict(self.env),
            "role": self.role,
        }
        if self.wait_for_port is not None:
            wire["wait_for_port"] = self.wait_for_port
        return wire


@dataclass(frozen=True)
class ShardLaunch:
    """One node's shard: its cards, its processes in start order, its health URL.

    Attributes:
        node: the node's inventory name.
        rank: the node's rank in the replica.
        gpus: the claim ids of its devices.
        commands: sidecars first, the engine last.
        serves_http: True on the rank that answers the OpenAI API.
        health_url: what the agent polls on the node (rank 0 only), else None.
        http_port: the port the engine listens on (meaningful where it serves HTTP).
        http_host: the address it is reached at from the node itself (its bind
            address, or the loopback when it binds every address).
        secret_env: variables for every command that must never reach a disk
            (the Hub token, the engine's key): sent apart as `secret_env`, kept
            by the agent in the processes' environment only.
        health_cert: the engine's certificate the agent's health probe pins (the shard
            that serves HTTPS), else None.
        real: on a replayed node, the agent runs these commands as written, not the sim
            engine in their place.
    """

    node: str
    rank: int
    gpus: tuple[str, ...]
    commands: tuple[ShardCommand, ...]
    serves_http: bool
    health_url: str | None
    http_port: int
    secret_env: Mapping[str, str] = field(default_factory=dict, repr=False)
    http_host: str = "127.0.0.1"
    health_cert: str | None = None
    real: bool = False

    @property
    def main(self) -> ShardCommand:
        """The engine's own command (the last)."""
        return self.commands[-1]

    def start_args(
        self, replica: str, shard_id: str | None = None, spec: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """The `shard.start` request arguments for this shard.

        Args:
            replica: the replica's id.
            shard_id: the shard's id; None lets the agent choose one.
            spec: the whole replica spec, kept with the shard for adoption.
        """
        args: dict[str, Any] = {
            "replica": replica,
            "rank": self.rank,
            "gpus": list(self.gpus),
            "commands": [command.to_wire() for command in self.commands],
            "spec": dict(spec or {}),
        }
        if shard_id is not None:
            args["shard_id"] = shard_id
        if self.health_url is not None:
            args["health_url"] = self.health_url
        if self.health_cert is not None:
            args["health_cert"] = self.health_cert
        if self.secret_env:
            args["secret_env"] = dict(self.secret_env)
        if self.real:
            args["real"] = True
        return args


@dataclass(frozen=True)
class LaunchPlan:
    """A replica's shards, ready to hand to the agents.

    Attributes:
        engine: the engine the request named.
        executor: how the nodes join: "single", "ray", "mp" (vLLM), "sglang", "llama.cpp".
        shards: one per node, in the order to start them (rank 0 first:
            a Ray head must listen before its workers join).
        health_path: the path the engine answers health on.
        start_after_head: start the other shards only once rank 0's shard is
            running (Ray: its head's port accepted, so workers have a cluster to join).
        tls_cert: the certificate rank 0's engine serves HTTPS with (every caller pins
            it), None when it speaks plain HTTP.
    """

    engine: str
    executor: str
    shards: tuple[ShardLaunch, ...]
    health_path: str
    start_after_head: bool = False
    tls_cert: str | None = None
    adapters: tuple[dict[str, Any], ...] = ()
    """The LoRA adapters rank 0's engine serves, as the gateway routes them (`{name, lora_id}`)."""
    adapter_only: bool = False
    """The engine applies its one adapter to every request: the model is not served bare."""

    @property
    def head(self) -> ShardLaunch:
        """The shard that serves HTTP."""
        return next(shard for shard in self.shards if shard.serves_http)
