"""What a `serve` would do, decided without starting anything: the ways, the ports, each launch.

`serve` and its dry run share every decision here, so the preview an
operator (or the console's Serve wizard) confirms is the launch that runs:

* `resolve` — the replica's name, its context, and the ways to try in
  order (the plan's, narrowed or forced by the operator, with fallbacks);
* `choose_ports` — each node's HTTP port and rank 0's rendezvous port;
* `rail_choice` — the adapters a multi-node replica leaves out, after the
  fabric tests the nodes keep (`fabric.rails.choose_rails`);
* `launch_for` — the engines' `LaunchPlan` for one placed way.

`preview_serve(fleet, request, model) -> ServePreview` is the dry run:
planned, placed and built, never claimed or started. Its `as_dict()` is the
`serve` step's `dry_run: true` result (see docs/serving.md); every secret in
it is `***`.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from llmgw_agent.ops import Op
from llmgw_core.engines import LaunchPlan, build_launch, redact_env
from llmgw_core.engines.cpu_bind import BIND_VARIABLE, binding_beside
from llmgw_core.engines.environment import CPU_KV_VARIABLE
from llmgw_core.engines.flags import plan_options, release_refusal
from llmgw_core.engines.identity import EngineIdentity
from llmgw_core.engines.planned import lora_launch
from llmgw_core.engines.programs import named_by_inventory
from llmgw_core.engines.spec import PdLaunch
from llmgw_core.errors import BadInput, LlmgwError
from llmgw_core.fabric.rails import RailChoice, choose_rails
from llmgw_core.facts import NodeFacts
from llmgw_core.fleet.client import AgentError
from llmgw_core.memory.adapters import LoraSlots
from llmgw_core.model.source import ModelInfo
from llmgw_core.placement import Placement, explain, place, want_summary
from llmgw_core.planner.plan import Plan, plan
from llmgw_core.planner.pools_live import planner_fleet
from llmgw_core.serve.choice import Choice, Overrides, choices
from llmgw_core.serve.launch import (
    HTTP_BASE_PORT,
    RENDEZVOUS_BASE_PORT,
    default_replica_name,
    free_port_on,
    launch_request,
    replica_name,
)
from llmgw_core.serve.replicas import fleet_views, shard_listings
from llmgw_core.serve.view import assemble

STARTUP_TIMEOUT_S = 1200.0
"""How long a replica may show no progress before it is failed (20 minutes)."""


@dataclass(frozen=True)
class ServeRequest:
    """What the operator asked `serve` for.

    Attributes:
        model: the model as typed (for messages and the replica's spec).
        name: the replica's name; None derives one from the model.
        format: "gguf", "safetensors" or None.
        context: tokens a sequence may hold; None: the model's trained context.
        concurrency: sequences served at once.
        overrides: the layout the operator fixed.
        env: allowed engine variables for every node.
        fallbacks: how many of the next best ways to try when one fails.
        wait_ready: wait until rank 0's health answers (else return once started).
        startup_timeout_s: how long without progress before failing.
        source: what the engines load instead of the way's own (a path on the nodes).
        secret_env: secrets for the engines' environment only (`HF_TOKEN`).
        api_key: the key the engines demand of clients (from `api_key_env`); None: none.
        api_key_env: the operator's variable it came from, recorded (never the value)
            so `ask`, `bench` and a heal find it again.
        hub_repo: the Hub repository the nodes fetch when they lack it; None: no fetch.
        revision: the Hub revision fetched (None: the default branch).
        all_reduce: run nccl-tests' all_reduce_perf across a multi-node replica's
            nodes before starting it, and fail the serve when it fails.
        rails: "tested" leaves out a rail whose last fabric test between the
            replica's nodes failed; "all" uses every rail anyway (with a warning).
        engine_args: the engine's own flags, checked (`engines.flags.checked_engine_args`).
        service: the service this replica belongs to, recorded in every shard's spec:
            `{name, hash, settings}` (`service.spec.ServiceLabel`).
        lora: the LoRA adapters served beside the model, read and checked
            (`serve.adapters.checked_slots`), None for none.
        cluster: the inventory's Slurm cluster the replica is one job on (None: SSH nodes).
        wait_s: how long that job may wait in Slurm's queue.
        slurm: the Slurm job the replica runs in, recorded in every shard's spec:
            `{cluster, job_id, nodes}` (`serve.slurm`); None on SSH nodes.
    """

    model: str
    name: str | None = None
    format: str | None = None
    context: int | None = None
    concurrency: int = 1
    overrides: Overrides = field(default_factory=Overrides)
    env: Mapping[str, str] = field(default_factory=dict)
    fallbacks: int = 0
    wait_ready: bool = True
    startup_timeout_s: float = STARTUP_TIMEOUT_S
    source: str | None = None
    secret_env: Mapping[str, str] = field(default_factory=dict, repr=False)
    api_key: str | None = field(default=None, repr=False)
    api_key_env: str | None = None
    hub_repo: str | None = None
    revision: str | None = None
    all_reduce: bool = False
    rails: Literal["tested", "all"] = "tested"
    service: Mapping[str, Any] | None = None
    engine_args: Mapping[str, str | bool] = field(default_factory=dict)
    lora: LoraSlots | None = None
    cluster: str | None = None
    wait_s: float = 600.0
    slurm: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Resolved:
    """A request made concrete: the name, the context, the ways to try in order."""

    name: str
    context: int
    ways: tuple[Choice, ...]
    served_name: str
    models: tuple[str, ...]
    plan: Plan | None = None
    """The plan the ways came from (a disaggregated side's own width is looked up there)."""


async def refuse_a_running_name(fleet: Any, name: str) -> None:
    """Refuse `name` while a replica of that name runs on the fleet (one stopped or failed
    may be served again).

    Raises:
        BadInput: naming its phase.
    """
    listings = await shard_listings(fleet)
    for view in assemble(listings, fleet.snapshot()):
        if view.name == name and view.phase not in ("stopped", "failed"):
            raise BadInput(
                f"a replica named {name!r} already runs ({view.phase})",
                "give another `name`, or stop it first",
            )


async def resolve(fleet: Any, request: ServeRequest, model: ModelInfo) -> Resolved:
    """The replica's name and context and the ways `serve` tries, best first.

    Raises:
        BadInput: the context is unknown, or a replica of that name already runs.
        DoesNotFit: nothing fits (or nothing the operator fixed).
    """
    shape = model.any_shape
    context = request.context or (shape.max_context if shape else None)
    if context is None:
        raise BadInput(
            f"{request.model}: the trained context is unknown", "give `context:` in tokens"
        )
    name = request.name or default_replica_name(model)
    await refuse_a_running_name(fleet, name)
    views = await fleet_views(fleet)
    the_plan = plan(
        model,
        planner_fleet(views),
        format=request.format,
        context=context,
        concurrency=request.concurrency,
        adapters=request.lora,
        **plan_options(request.overrides.engine, request.engine_args),
    )
    ways = choices(
        the_plan, model, planner_fleet(views), request.overrides, fallbacks=request.fallbacks
    )
    models = tuple(x for x in (model.repo_id, model.ref, request.source) if x)
    # Replicas of one local file serve one model name, so a gateway pools them together.
    served_name = model.repo_id or replica_name(model.ref)
    return Resolved(
        name=name,
        context=context,
        ways=ways,
        served_name=served_name,
        models=models,
        plan=the_plan,
    )


# --- ports ------------------------------------------------------------------------------


def _local_free_port() -> int:
    """A free port on this machine (the demo's simulated nodes all live on it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def used_ports(records: list[dict[str, Any]]) -> set[int]:
    """The ports a node's running shards of ours hold (HTTP and rendezvous)."""
    used: set[int] = set()
    for record in records:
        if record.get("phase") in ("exited", "failed", "stopped"):
            continue
        spec = record.get("spec") or {}
        port = (spec.get("launch") or {}).get("http_port")
        if isinstance(port, int):
            used.add(port)
        rendezvous = (spec.get("replica") or {}).get("rendezvous_port")
        if isinstance(rendezvous, int):
            used.add(rendezvous)
    return used


async def free_port(fleet: Any, node: str, start: int, avoid: set[int]) -> int:
    """The first port from `start` nothing listens on at `node` and not in `avoid`.

    Asks the node's agent (`port.free`: its listening sockets and a bind);
    an agent without that op leaves only `avoid` to go by.

    Raises:
        LlmgwError: the node has no free port in the range, or did not answer.
    """
    try:
        answer = await fleet.request(
            node, Op.PORT_FREE, {"start": start, "count": 1, "avoid": sorted(avoid)}
        )
    except AgentError as exc:
        if exc.code != "unknown_op":
            raise
        return free_port_on(avoid, start)
    ports = answer.get("ports") or []
    if not ports:
        raise LlmgwError(
            f"{node} has no free port from {start}: every one is listened on",
            "stop what holds them, or free a port in that range",
        )
    return int(ports[0])


async def choose_ports(
    fleet: Any, nodes: list[str], listings: Mapping[str, list[dict[str, Any]]]
) -> tuple[dict[str, int], int]:
    """HTTP ports per node and rank 0's rendezvous port: free on the node, never a shard's.

    `nodes` is in rank order. A port is free when nothing listens on it on
    the node (asked of its agent) and no shard of ours holds it — a shard
    just started may not listen yet.
    """
    specs = {s.name: s for s in fleet.inventory.node_specs()}
    if all(specs[n].replay is not None for n in nodes):
        # Simulated nodes share this machine's ports: each shard needs its own.
        return {n: _local_free_port() for n in nodes}, _local_free_port()
    used = {n: used_ports(listings.get(n, [])) for n in nodes}
    found = await asyncio.gather(*(free_port(fleet, n, HTTP_BASE_PORT, used[n]) for n in nodes))
    http = dict(zip(nodes, found, strict=True))
    taken = set().union(*used.values()) | set(http.values())
    return http, await free_port(fleet, nodes[0], RENDEZVOUS_BASE_PORT, taken)


# --- the launch ---------------------------------------------------------------------------


def rail_choice(fleet: Any, placement: Placement, *, all_rails: bool = False) -> RailChoice:
    """The adapters each node of `placement` leaves out, from the verdicts the nodes keep."""
    if placement.fabric is None or len(placement.nodes) < 2:
        return RailChoice()
    nodes = [p.node for p in placement.nodes]
    specs = {s.name: s for s in fleet.inventory.node_specs()}
    snapshot = fleet.snapshot()
    hcas = {
        node: next((f.hcas for f in specs[node].fabrics if f.name == placement.fabric), ())
        for node in nodes
    }
    verdicts = {
        node: snapshot.nodes[node].facts.rail_verdicts if snapshot.nodes[node].facts else ()
        for node in nodes
    }
    return choose_rails(nodes, hcas, verdicts, all_rails=all_rails)


async def launch_for(
    fleet: Any,
    request: ServeRequest,
    choice: Choice,
    placement: Placement,
    served_name: str,
    context: int,
    rails: RailChoice | None = None,
    notes: list[str] | None = None,
    pd: PdLaunch | None = None,
) -> tuple[LaunchPlan, int | None]:
    """The engines' launch for one placed way, and its rendezvous port (None on one node).

    `rails` (default: `rail_choice` now) names the adapters left out of `NCCL_IB_HCA`;
    `notes` is given each sentence about the launch that the operator should see
    (vLLM on a CPU node sharing its cores with another replica); `pd` makes it a
    prefill or decode worker of a disaggregated service (`engines.disagg`).
    Every launch gets a new certificate and key (`engines.identity`): a heal or a
    retry is never trusted with the certificate of the engine it replaces.

    Raises:
        BadInput: the launch cannot work (see `engines.validate_launch`).
    """
    nodes = [p.node for p in placement.nodes]
    specs = {s.name: s for s in fleet.inventory.node_specs()}
    listings = await shard_listings(fleet)
    http_ports, rendezvous = await choose_ports(fleet, nodes, listings)
    snapshot = fleet.snapshot()
    facts = {n: snapshot.nodes[n].facts for n in nodes}
    rendezvous_port = rendezvous if len(nodes) > 1 else None
    for node in nodes:  # a flag the engine a node has lacks is refused before the start
        found = facts[node]
        installed = found.engines.get(choice.engine) if found is not None else None
        lacked = release_refusal(
            choice.engine, request.engine_args, installed.version if installed else None
        )
        if lacked:
            raise BadInput(
                f"{lacked} on {node}",
                f"run a release of {choice.engine} there that takes it, or drop the flag",
            )
    cpu_bind = None
    head = specs[nodes[0]]
    if head.replay is not None and named_by_inventory(choice.engine, head.engines):
        # A real engine on a replayed node runs on this machine, whose cores are not the
        # capture's: vLLM binds its own.
        if choice.cpu_kv_cache_gib is not None and notes is not None:
            notes.append(f"{head.name}: a real engine on a replayed node binds its own cores")
    elif choice.cpu_kv_cache_gib is not None and facts[nodes[0]] is not None:
        cpu_bind, shared = cpu_binding_for(facts[nodes[0]], choice, listings.get(nodes[0], []))
        if shared and notes is not None:
            notes.append(f"{nodes[0]}: {shared}")
    launch = build_launch(
        launch_request(
            choice,
            placement,
            specs,
            facts,
            served_name=served_name,
            context=context,
            concurrency=request.concurrency,
            http_ports=http_ports,
            rendezvous_port=rendezvous_port,
            extra_env=request.env,
            secret_env=request.secret_env,
            api_key=request.api_key,
            source=request.source,
            engine_args=request.engine_args,
            rails=rails
            if rails is not None
            else rail_choice(fleet, placement, all_rails=request.rails == "all"),
            tls=EngineIdentity.make(request.name or served_name),
            cpu_bind=cpu_bind,
            lora=lora_launch(request.lora),
            pd=pd,
        )
    )
    return launch, rendezvous_port


def cpu_binding_for(
    facts: NodeFacts, choice: Choice, records: list[dict[str, Any]]
) -> tuple[str | None, str | None]:
    """The cores a vLLM replica on a CPU node binds to, beside the vLLM replicas running there.

    A running shard is one of vLLM's CPU replicas when its launch set the KV cache's
    size (`VLLM_CPU_KVCACHE_SPACE`); its binding is its `VLLM_CPU_OMP_THREADS_BIND`
    (none: vLLM's own) and its ranks its way's tensor-parallel width.
    """
    others = []
    for record in records:
        if record.get("phase") in ("exited", "failed", "stopped"):
            continue
        spec = record.get("spec") or {}
        env = (spec.get("launch") or {}).get("env") or {}
        if CPU_KV_VARIABLE not in env:
            continue
        way = (spec.get("replica") or {}).get("way") or {}
        others.append((env.get(BIND_VARIABLE), int(way.get("tensor_parallel") or 1)))
    return binding_beside(facts.host.numa_nodes or (), choice.tensor_parallel, others)


# --- the dry run --------------------------------------------------------------------------


@dataclass(frozen=True)
class ServePreview:
    """What `serve` would start, decided and built but never claimed or started.

    Attributes:
        name: the replica's name.
        model: the model as asked.
        context: tokens a sequence may hold.
        way: the way chosen (`Choice.as_dict()`), None when no way has room.
        placement: its nodes and cards (`Placement.as_dict()`), None when no room.
        executor: how the nodes join ("single", "ray", "mp", "sglang", "llama.cpp").
        health_url: where rank 0's health is checked, on the node.
        shards: per node: `node`, `rank`, `gpus`, `http_port`, `serves_http`,
            `health_url`, `commands` (`name`, `role`, `argv`, `env` with every
            secret `***`, `shell`: the argv quoted for a POSIX shell).
        fallbacks: the ways tried next when this one fails, in order (labels).
        passed_over: the ways before the chosen one that have no room now, with why.
        reason: why nothing would start (no way has room), None when one would.
        rails_left_out: the adapters left out of `NCCL_IB_HCA` (`RailLeftOut.as_dict`).
        warnings: sentences to show beside it (a rail left out, or used anyway).
    """

    name: str
    model: str
    context: int
    way: dict[str, Any] | None
    placement: dict[str, Any] | None
    executor: str | None
    health_url: str | None
    shards: tuple[dict[str, Any], ...]
    fallbacks: tuple[str, ...]
    passed_over: tuple[dict[str, str], ...] = ()
    reason: str | None = None
    rails_left_out: tuple[dict[str, Any], ...] = ()
    warnings: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """The preview as the `serve` step's `dry_run: true` gives it."""
        return {
            "dry_run": True,
            "name": self.name,
            "model": self.model,
            "context": self.context,
            "way": self.way,
            "placement": self.placement,
            "executor": self.executor,
            "health_url": self.health_url,
            "shards": list(self.shards),
            "fallbacks": list(self.fallbacks),
            "passed_over": list(self.passed_over),
            "reason": self.reason,
            "rails_left_out": list(self.rails_left_out),
            "warnings": list(self.warnings),
        }


def shard_preview(launch: LaunchPlan) -> tuple[dict[str, Any], ...]:
    """Each shard of a launch as people and scripts read it, secrets shown as `***`."""
    return tuple(
        {
            "node": shard.node,
            "rank": shard.rank,
            "gpus": list(shard.gpus),
            "http_port": shard.http_port,
            "serves_http": shard.serves_http,
            "health_url": shard.health_url,
            "secrets": sorted(shard.secret_env),
            "commands": [
                {
                    "name": command.name,
                    "role": command.role,
                    "argv": list(command.argv),
                    "env": redact_env(dict(command.env)),
                    "shell": command.shell_text(),
                }
                for command in shard.commands
            ],
        }
        for shard in launch.shards
    )


async def preview_serve(fleet: Any, request: ServeRequest, model: ModelInfo) -> ServePreview:
    """Plan, place and build `request`'s launch without claiming a card or starting anything.

    The way is the one `serve` would start: the first of its ways that has
    room now; the rest are its fallbacks. Cards another console claims
    between this preview and the serve may move the placement.

    Raises:
        BadInput: the context is unknown, a replica of that name runs, or the
            launch cannot work (a forced layout, a variable refused).
        DoesNotFit: nothing fits (or nothing the operator fixed).
    """
    resolved = await resolve(fleet, request, model)
    views = await fleet_views(fleet)
    passed_over: list[dict[str, str]] = []
    for index, choice in enumerate(resolved.ways):
        want = choice.want(resolved.models)
        placement = place(want, views)
        if placement is None:
            passed_over.append({"way": choice.label, "reason": want_summary(explain(want, views))})
            continue
        rails = rail_choice(fleet, placement, all_rails=request.rails == "all")
        launch, _rendezvous = await launch_for(
            fleet, request, choice, placement, resolved.served_name, resolved.context, rails
        )
        return ServePreview(
            name=resolved.name,
            model=request.model,
            context=resolved.context,
            way=choice.as_dict(),
            placement=placement.as_dict(),
            executor=launch.executor,
            health_url=launch.head.health_url,
            shards=shard_preview(launch),
            fallbacks=tuple(c.label for c in resolved.ways[index + 1 :]),
            passed_over=tuple(passed_over),
            rails_left_out=tuple(rail.as_dict() for rail in rails.left_out),
            warnings=rails.warnings,
        )
    return ServePreview(
        name=resolved.name,
        model=request.model,
        context=resolved.context,
        way=None,
        placement=None,
        executor=None,
        health_url=None,
        shards=(),
        fallbacks=(),
        passed_over=tuple(passed_over),
        reason="; ".join(f"no room for {p['way']} now: {p['reason']}" for p in passed_over),
    )
