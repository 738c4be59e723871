"""What a gateway is and what it should be doing (pure: values in, values out).

A gateway is one process on its node: the front (`llmgw front`, the agent's
own), which takes the network port, checks client keys and routes each
request by its `model` to one of that model's workers (the ready replicas'
engines), with the policy asked for. Its workers are added and removed on
its control socket while it runs — a Unix socket in the shard's 0700 folder,
reached through the agent — so following the replicas never drops a
connection, and no other user of the node can change them (docs/gateway.md
says why the front routes rather than vllm-router, with the figures).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from llmgw_core.engines.spec import host_port
from llmgw_core.errors import BadInput
from llmgw_core.serve.keys import ENV_NAME
from llmgw_core.serve.view import worker_role

GATEWAY_KIND = "llmgw-gateway"
"""The `kind` of a gateway shard's spec (a replica's is `llmgw-replica`)."""
FRONT_CONFIG_VARIABLE = "LLMGW_FRONT_CONFIG"
"""Where the front's keys wait in its environment (they arrive as the shard's `secret_env`)."""
DEFAULT_PORT = 30000
HEALTH_INTERVAL_S = 2
"""How often the front checks its workers' health (`front/routing.py` says the same)."""
Policy = Literal["round_robin", "cache_aware", "power_of_two"]
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


class TlsFiles(BaseModel):
    """The operator's certificate (with its chain) and key for the gateway's port, as PEM files."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    cert: str = Field(min_length=1)
    key: str = Field(min_length=1)


class FairShares(BaseModel):
    """Fair shares between the client keys while the engines are saturated (the front's
    `fair.py` says how): an engine is full once it queues `waiting` requests; then at most
    `queue` requests wait at the front, each at most `queue_timeout_s`, and `reserve`
    sequences per engine are kept for the keys served least lately."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    waiting: int = Field(1, ge=1, le=100_000)
    queue: int = Field(256, ge=1, le=100_000)
    queue_timeout_s: float = Field(30.0, gt=0, le=3600, allow_inf_nan=False)
    reserve: int = Field(1, ge=0, le=100_000)


class GatewayArgs(BaseModel):
    """A gateway as the operator asks for it (`gateway:` step, console screen)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)
    node: str | None = None
    """Where the front runs; None: the first node without GPUs, else the first node."""
    port: int = Field(default=DEFAULT_PORT, ge=1, le=65535)
    policy: Policy = "round_robin"
    api_key_env: str | None = None
    """The operator's variable holding the key clients must present (key id: the variable's name)."""
    keys_file: str | None = None
    """A file on the operator's machine of more client keys, each maybe limited to some models."""
    tls: TlsFiles | None = None
    """HTTPS on the gateway's port with the operator's certificate and key (sent as secrets)."""
    health_path: str = "/health"
    """The engines' health route the front probes on every worker."""
    fair: FairShares | None = None
    """Fair shares between the client keys under contention (None: first come, first sent)."""

    @field_validator("name")
    @classmethod
    def _name_is_a_token(cls, name: str) -> str:
        if not _NAME.match(name):
            raise ValueError("must start with a letter or digit and hold letters, digits, . _ -")
        return name

    @field_validator("api_key_env")
    @classmethod
    def _env_name(cls, name: str | None) -> str | None:
        if name is not None and not re.match(ENV_NAME, name):
            raise ValueError("must be an environment variable's name")
        return name

    @field_validator("health_path")
    @classmethod
    def _path(cls, path: str) -> str:
        if not path.startswith("/") or any(c.isspace() for c in path):
            raise ValueError("must be a URL path starting with /")
        return path


def front_argv(args: GatewayArgs) -> list[str]:
    """The front's subcommand of the agent (`llmgw front …`): the network port and the policy
    (its control socket is in its shard's folder, found from the shard id)."""
    return [
        "front",
        *("--listen", f"0.0.0.0:{args.port}"),
        *("--policy", args.policy),
        *("--health-path", args.health_path),
    ]


def shard_args(
    args: GatewayArgs,
    *,
    node: str,
    created_at: float,
    upstream_key_envs: Mapping[str, str],
) -> dict[str, Any]:
    """The agent's `shard.start` arguments for a gateway (no GPUs; the keys go apart).

    One process, the front; its liveness is asked on its control socket.

    Args:
        upstream_key_envs: served model → the variable holding its engines' key.
    """
    spec = {
        "kind": GATEWAY_KIND,
        "gateway": {
            "name": args.name,
            "node": node,
            "port": args.port,
            "policy": args.policy,
            "api_key_env": args.api_key_env,
            "keys_file": args.keys_file,
            "tls": args.tls is not None,
            "upstream_key_envs": dict(upstream_key_envs),
            "health_path": args.health_path,
            "fair": args.fair.model_dump() if args.fair is not None else None,
            "created_at": created_at,
        },
    }
    return {
        "replica": f"gateway-{args.name}",
        "rank": 0,
        "gpus": [],
        "commands": [
            {"name": "front", "argv": front_argv(args), "agent": True, "role": "main"},
        ],
        "stop_timeout_s": 10,
        "spec": spec,
    }


@dataclass(frozen=True)
class GatewayView:
    """A gateway as its node reports it.

    Attributes:
        name: the gateway's name.
        node: where its front runs.
        port: the front's port (every model, one address).
        phase: the shard's phase (starting, running, exited, failed, stopped).
        healthy: whether its liveness answered at the agent's last look (None: not asked).
    """

    name: str
    node: str
    port: int
    policy: str
    phase: str
    shard_id: str
    healthy: bool | None = None
    reason: str | None = None
    api_key_env: str | None = None
    health_path: str = "/health"
    created_at: float = 0.0
    keys_file: str | None = None
    upstream_key_envs: Mapping[str, str] = field(default_factory=dict)
    tls: bool = False
    fair: bool = False
    """Whether its front keeps fair shares (and so may hold requests in its own queue)."""

    @property
    def live(self) -> bool:
        """True while its front runs (or is starting)."""
        return self.phase in ("starting", "running")

    def as_dict(self) -> dict[str, Any]:
        """The gateway as the steps and the console give it."""
        return {
            "name": self.name,
            "node": self.node,
            "address": f"{self.node}:{self.port}",
            "url": f"{'https' if self.tls else 'http'}://{self.node}:{self.port}/v1",
            "port": self.port,
            "policy": self.policy,
            "phase": self.phase,
            "healthy": self.healthy,
            "reason": self.reason,
            "api_key_env": self.api_key_env,
            "keys_file": self.keys_file,
            "tls": self.tls,
            "fair": self.fair,
            "shard_id": self.shard_id,
        }


def gateway_views(listings: Mapping[str, Sequence[Mapping[str, Any]]]) -> tuple[GatewayView, ...]:
    """Every gateway the nodes' `shard.list` records hold, newest start of a name first."""
    found: list[GatewayView] = []
    for node, records in listings.items():
        for record in records:
            spec = record.get("spec") or {}
            if spec.get("kind") != GATEWAY_KIND:
                continue
            gateway = spec.get("gateway") or {}
            found.append(
                GatewayView(
                    name=str(gateway.get("name")),
                    node=node,
                    port=_recorded_port(gateway.get("port")),
                    policy=str(gateway.get("policy")),
                    phase=str(record.get("phase") or "starting"),
                    shard_id=str(record.get("shard_id")),
                    healthy=record.get("healthy"),
                    reason=record.get("reason"),
                    api_key_env=gateway.get("api_key_env"),
                    health_path=str(gateway.get("health_path") or "/health"),
                    created_at=_recorded_time(gateway.get("created_at")),
                    keys_file=gateway.get("keys_file")
                    if isinstance(gateway.get("keys_file"), str)
                    else None,
                    upstream_key_envs=_recorded_names(gateway.get("upstream_key_envs")),
                    tls=gateway.get("tls") is True,
                    fair=isinstance(gateway.get("fair"), dict),
                )
            )
    found.sort(key=lambda view: (not view.live, -view.created_at))
    return tuple(found)


def _recorded_port(value: Any) -> int:
    """A port as a shard recorded it; 0 for anything that is not one (an agent's word is data)."""
    return value if isinstance(value, int) and 0 < value < 65536 else 0


def _recorded_names(value: Any) -> dict[str, str]:
    """A recorded map of names to names; empty for anything else."""
    if not isinstance(value, dict):
        return {}
    return {str(k): v for k, v in value.items() if isinstance(v, str)}


def _recorded_time(value: Any) -> float:
    """A time as a shard recorded it; 0 for anything that is not a number."""
    return float(value) if isinstance(value, int | float) else 0.0


def live_gateway(views: Sequence[GatewayView], name: str) -> GatewayView | None:
    """The running gateway called `name`, if one runs."""
    return next((view for view in views if view.name == name and view.live), None)


@dataclass(frozen=True)
class Worker:
    """One engine behind a gateway: the URL the front reaches, the model it serves, and the
    engine's certificate the front pins (None: the engine speaks plain HTTP)."""

    url: str
    model: str
    replica: str = ""
    cert: str | None = None
    adapters: tuple[tuple[str, int | None], ...] = ()
    """The LoRA adapters its engine holds: (name, llama-server's id or None)."""
    base: bool = True
    """False where the engine applies its one adapter to every request (llama-cpp-python)."""
    role: str | None = None
    """`prefill` or `decode` for a worker of a disaggregated service (the front then sends a
    request to a prefill worker first, its answer to a decode worker); None: it does both."""

    bootstrap_port: int | None = None
    """SGLang's handshake port of a prefill worker: the front then sends its split's requests
    the way sglang-router does (to both sides at once, with a bootstrap room); None for vLLM's
    workers and every decode worker."""

    @property
    def serves(self) -> str:
        """What it serves as one comparable text: the model, the adapters, bare or not, its side
        (and a prefill worker's bootstrap port)."""
        return served_text(
            self.model, dict(self.adapters), self.base, self.role, self.bootstrap_port
        )


def served_text(
    model: str,
    adapters: Mapping[str, int | None],
    base: bool,
    role: str | None = None,
    bootstrap_port: int | None = None,
) -> str:
    """A worker's model, adapters, bareness and side as one text (the front's listing gives the
    same); a worker doing both keeps the text it had before sides existed, and a vLLM worker
    the text it had before bootstrap ports."""
    served = [model, sorted([n, i] for n, i in adapters.items()), base or not adapters]
    if bootstrap_port is not None:
        return json.dumps([*served, role, bootstrap_port])
    return json.dumps([*served, role] if role else served)


def sglang_bootstrap_port(spec: Mapping[str, Any]) -> int | None:
    """The bootstrap port the front gives an SGLang prefill worker's split (`PdLaunch.recorded`);
    None for any other worker."""
    pd = spec.get("pd")
    if spec.get("engine") != "sglang" or not isinstance(pd, Mapping) or pd.get("role") != "prefill":
        return None
    port = pd.get("bootstrap_port")
    return port if isinstance(port, int) and not isinstance(port, bool) else None


def wanted_workers(
    replicas: Sequence[Any], router_node: str, hosts: Mapping[str, str]
) -> tuple[Worker, ...]:
    """Every ready replica's rank-0 engine, as the front on `router_node` reaches it
    (a replica a roll is draining is left out: it finishes what it holds and takes nothing new).

    Args:
        replicas: `ReplicaView`s (only the ready ones count).
        hosts: each node's address in the inventory (an engine on the front's
            own node is reached on its loopback); an engine bound to one address
            (its node's management address) is reached there.
    """
    workers = []
    for replica in replicas:
        if replica.phase != "ready" or replica.draining:
            continue
        head, port = replica.spec.get("head"), replica.spec.get("http_port")
        if not head or not isinstance(port, int):
            continue
        bound = replica.spec.get("http_host")
        if isinstance(bound, str) and bound and not bound.startswith("127."):
            host = bound  # the engine listens on that address only
        else:
            host = "127.0.0.1" if head == router_node else hosts.get(str(head), str(head))
        model = str(replica.spec.get("served_name") or replica.name)
        cert = replica.spec.get("tls_cert")
        cert = cert if isinstance(cert, str) and cert else None
        url = f"{'https' if cert else 'http'}://{host_port(host, port)}"
        workers.append(
            Worker(
                url=url,
                model=model,
                replica=replica.name,
                cert=cert,
                adapters=tuple((a["name"], a["lora_id"]) for a in replica.adapters),
                base=replica.spec.get("adapter_only") is not True,
                role=worker_role(replica.spec),
                bootstrap_port=sglang_bootstrap_port(replica.spec),
            )
        )
    return tuple(sorted(workers, key=lambda w: (w.model, w.url)))


def keyed_for(
    replicas: Sequence[Any], gateway: GatewayView
) -> tuple[tuple[Any, ...], tuple[str, ...]]:
    """The replicas `gateway` can front, and a sentence for each left out.

    Its front presents each model's engines the key it was given at start; a
    replica whose engines take their key from another variable (served later
    with another `api_key_env`) would refuse every request sent on.
    """
    fronted, left_out = [], []
    for replica in replicas:
        variable = replica.api_key_env
        model = str(replica.spec.get("served_name") or replica.name)
        if variable is not None and gateway.upstream_key_envs.get(model) != variable:
            left_out.append(
                f"{replica.name} is not fronted by gateway {gateway.name}: its engines take their "
                f"key from {variable}, which the gateway was not given when it started "
                "(stop and start the gateway to front it)"
            )
            continue
        fronted.append(replica)
    return tuple(fronted), tuple(left_out)


def unchecked_workers(replicas: Sequence[Any], probed: str = "/health") -> tuple[str, ...]:
    """A warning for each ready replica whose engine answers its health on another path than the
    one the gateway's front probes on every worker (`probed`, its `health_path`).

    Such an engine (llama-cpp-python's own server: `/openapi.json`, behind a
    gateway probing `/health`) is out of rotation at its first check.
    """
    return tuple(
        f"replica {replica.name} answers its health on {path}, not {probed}: "
        f"the gateway probes {probed} and will hold it unhealthy within seconds "
        f"(serve it with llama-server, vLLM or SGLang, or give the gateway health_path: {path})"
        for replica in replicas
        if replica.phase == "ready"
        and (path := str(replica.spec.get("health_path") or "/health")) != probed
    )


def worker_changes(
    wanted: Sequence[Worker], present: Mapping[str, str]
) -> tuple[tuple[Worker, ...], tuple[str, ...]]:
    """What to add and what to remove so the front holds exactly `wanted`.

    Args:
        present: the front's workers now, URL → what each serves (`Worker.serves`).

    Returns:
        (workers to add, URLs to remove); a URL serving something else now is both.
    """
    wanted_by_url = {worker.url: worker for worker in wanted}
    remove = tuple(
        sorted(
            url
            for url, serves in present.items()
            if url not in wanted_by_url or wanted_by_url[url].serves != serves
        )
    )
    add = tuple(
        worker
        for worker in wanted
        if worker.url not in present or present[worker.url] != worker.serves
    )
    return add, remove


def load_split(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, int]:
    """Requests each worker took between two reads of the front's per-worker counter."""
    return {
        url: int(after[url] - before.get(url, 0.0))
        for url in sorted(after)
        if after[url] - before.get(url, 0.0) > 0
    }


WORKER_REQUESTS = "llmgw_gateway_worker_requests_total"
"""The front's count of requests sent to each worker (`front/routing.py`)."""
_PROCESSED = re.compile(r"^" + WORKER_REQUESTS + r'\{[^}]*worker="([^"]+)"[^}]*\}\s+(\S+)')


_QUEUED = re.compile(r'^llmgw_gateway_queued\{model="((?:[^"\\]|\\.)*)"\}\s+(\S+)')


def queued_requests(metrics_text: str) -> dict[str, float]:
    """Per model, the requests waiting at a front with fair shares for their turn (its
    Prometheus text; label escapes undone)."""
    found: dict[str, float] = {}
    for line in metrics_text.splitlines():
        match = _QUEUED.match(line)
        if match is None:
            continue
        model = re.sub(r"\\(.)", lambda m: "\n" if m.group(1) == "n" else m.group(1), match[1])
        try:
            value = float(match.group(2))
        except ValueError:
            continue
        if value >= 0:
            found[model] = found.get(model, 0.0) + value
    return found


def processed_requests(metrics_text: str) -> dict[str, float]:
    """Per worker URL, the requests the front has sent it (its Prometheus text)."""
    found: dict[str, float] = {}
    for line in metrics_text.splitlines():
        match = _PROCESSED.match(line)
        if match:
            try:
                found[match.group(1)] = found.get(match.group(1), 0.0) + float(match.group(2))
            except ValueError:
                continue
    return found


def gateway_line(gateway: Mapping[str, Any]) -> str:
    """One line for a gateway as the console lists it: address, policy, phase, workers by model.

    Args:
        gateway: `GatewayView.as_dict()` with `workers` (the front's: url → `{model, healthy}`).
    """
    workers = gateway.get("workers") or {}
    by_model: dict[str, int] = {}
    for worker in workers.values():
        by_model[str(worker.get("model"))] = by_model.get(str(worker.get("model")), 0) + 1
    models = ", ".join(f"{model} ×{count}" for model, count in sorted(by_model.items()))
    healthy = sum(1 for worker in workers.values() if worker.get("healthy"))
    line = (
        f"gateway {gateway.get('name')} at {gateway.get('address')} ({gateway.get('policy')}, "
        f"{gateway.get('phase')}): {healthy}/{len(workers)} workers healthy"
    )
    if models:
        line += f" — {models}"
    if gateway.get("error"):
        line += f" — {gateway['error']}"
    return line


_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def plain_line(line: str) -> str:
    """A gateway log line without colours (a router of older gateways coloured them)."""
    return _ANSI.sub("", line)


def choose_model(models: Sequence[str], asked: str | None, gateway: str) -> str:
    """The model a question through a gateway names: the one asked, or the only one served.

    Raises:
        BadInput: the model is not behind the gateway, or several are and none was named.
    """
    served = sorted(set(models))
    if not served:
        raise BadInput(f"gateway {gateway} has no ready worker", "serve a replica first")
    if asked is None:
        if len(served) > 1:
            raise BadInput(
                f"gateway {gateway} serves {len(served)} models", f"name one: {', '.join(served)}"
            )
        return served[0]
    if asked not in served:
        raise BadInput(
            f"gateway {gateway} serves no model {asked!r}", f"it serves {', '.join(served)}"
        )
    return asked
