"""The `serve` step: bring a model up on the live fleet and wait until it answers.

```yaml
steps:
  - serve:
      model: catalog:meta-llama/Llama-3.3-70B-Instruct
      context: 32768
      gpu_class: h100-80g        # optional layout: gpu_class, gpus (per node), nodes,
      name: llama-70b            #   engine, artifact
      env: {NCCL_DEBUG: INFO}    # allowlisted engine variables, on every node
      fallbacks: 1               # the next best ways, tried in order when one fails
      wait: ready                # or `started`
      timeout: 1200              # seconds without progress before it is failed
      dry_run: false             # true: plan, place and build the commands; start nothing
      all_reduce: false          # true: all_reduce_perf across the nodes first (multi-node)
      rails: tested              # `all`: use a rail even when its last fabric test failed
      api_key_env: LLAMA_KEY     # the engines refuse requests without this variable's key
      engine_args: {kv_cache_dtype: fp8, enable_prefix_caching: true}   # with `engine:`
      cluster: hpc-a             # a Slurm cluster of the inventory: the replica is one job there
      wait_s: 600                # how long its job may wait in Slurm's queue (default 600)
```

The result is the replica's name and phase, the way and placement, every
attempt (with the last lines of each shard of a failed one) and the trace of
the start, step by step and node by node, with times.

With `dry_run: true` nothing is claimed or started: the result is the
launch `serve` would start (`replica_prepare.ServePreview`) — per node its
rank, cards, each command's argv and environment, the names of its secrets, the
health URL, the way and the fallbacks.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from llmgw_core.arguments import NAME_PATTERN
from llmgw_core.engines import checked_env
from llmgw_core.engines.flags import checked_engine_args
from llmgw_core.errors import BadInput, DoesNotFit
from llmgw_core.script.registry import (
    EXIT_DOES_NOT_FIT,
    EXIT_STEP_FAILED,
    StepArgs,
    StepContext,
    StepOutcome,
    step,
)
from llmgw_core.serve.args import ServeFields
from llmgw_core.serve.keys import hub_token_env, operator_key


class ServeArgs(StepArgs, ServeFields):
    """Arguments of `serve` (`ServeFields`, and these)."""

    name: str | None = Field(default=None, pattern=NAME_PATTERN)
    wait: Literal["ready", "started"] = "ready"
    dry_run: bool = False


def local_source(ref: str, script_dir: Path) -> str | None:
    """The absolute path of a local model file or directory, None for a Hub or catalog model."""
    if ref.startswith(("./", "../")):
        return str((script_dir / ref).resolve())
    path = Path(ref).expanduser()
    if ref.startswith(("/", "~")) or path.exists():
        return str(path.resolve())
    return None


def split_refused() -> BadInput:
    """The refusal of a disaggregated service where its sides cannot be run apart (the
    console's Serve wizard and apply)."""
    return BadInput(
        "disaggregation: the console cannot start prefill and decode workers apart yet"
        " (the `serve`, `apply` and `keep` steps can)",
        "start it with a script's `apply` or `serve`, or leave disaggregation out"
        " (docs/disaggregation.md)",
    )


def serve_request(
    args: ServeFields,
    ctx: StepContext,
    *,
    name: str | None,
    wait_ready: bool = True,
    service: dict[str, Any] | None = None,
    starts_split: bool = False,
) -> tuple[Any, Any]:
    """The `ServeRequest` and the model a `serve` (or a service's replica) starts from.

    The keys are read from the operator's environment here, once: a missing
    variable is refused before anything starts. A disaggregated one is refused where the
    caller cannot start its workers apart (`starts_split`: `serve` and `apply` can).
    """
    from llmgw_core.catalog import is_catalog_ref
    from llmgw_core.script.steps.plan import step_model
    from llmgw_core.serve.adapters import checked_slots
    from llmgw_core.serve.choice import Overrides
    from llmgw_core.serve.start import ServeRequest

    if args.disaggregation is not None and not starts_split:
        # Started as one replica it would serve, but not split: never behind the operator's back.
        raise split_refused()
    env = checked_env(args.env)
    api_key = operator_key(args.api_key_env, "the replica's key") if args.api_key_env else None
    model = step_model(args.model, ctx)
    source = local_source(args.model, ctx.script_dir)
    # The demo's simulated nodes never download; a real node fetches a Hub model it lacks.
    fetched = source is None and not is_catalog_ref(args.model) and not ctx.demo
    hub_repo = model.repo_id if fetched else None
    request = ServeRequest(
        model=args.model,
        name=name,
        format=args.format,
        context=args.context,
        concurrency=args.concurrency,
        overrides=Overrides(
            engine=args.engine,
            artifact=args.artifact,
            gpu_class=args.gpu_class,
            gpus=args.gpus,
            nodes=args.nodes,
        ),
        env=env,
        fallbacks=args.fallbacks,
        wait_ready=wait_ready,
        startup_timeout_s=args.timeout,
        source=source,
        secret_env=hub_token_env() if hub_repo or _hub_adapters(args) else {},
        api_key=api_key,
        api_key_env=args.api_key_env,
        hub_repo=hub_repo,
        revision=model.revision if hub_repo else None,
        all_reduce=args.all_reduce,
        rails=args.rails,
        service=service,
        engine_args=checked_engine_args(args.engine, args.engine_args) if args.engine else {},
        cluster=args.cluster,
        wait_s=args.wait_s,
        lora=checked_slots(
            args.adapters,
            model,
            ctx.script_dir,
            max_loras=args.max_loras,
            max_lora_rank=args.max_lora_rank,
        ),
    )
    return request, model


def _hub_adapters(args: ServeFields) -> bool:
    """True when an adapter comes from the Hub (the nodes then need the Hub token too)."""
    return any(local_source(a.source, Path("/")) is None for a in args.adapters)


async def run_serve(args: ServeArgs, ctx: StepContext) -> StepOutcome:
    """Plan, place, claim, start and (by default) wait until rank 0's health answers."""
    from llmgw_core.serve.replicas import find_replica
    from llmgw_core.serve.slurm import serve_where_asked
    from llmgw_core.serve.start import preview_serve
    from llmgw_core.serve.transport import with_transport
    from llmgw_core.serve.tunnels import fleet_and_reach

    request, model = serve_request(
        args, ctx, name=args.name, wait_ready=args.wait == "ready", starts_split=True
    )
    fleet, reach = await fleet_and_reach(ctx)
    if args.cluster is not None and args.dry_run:
        raise BadInput(
            "a dry run on a Slurm cluster is not supported yet",
            "leave `dry_run:` out, or serve on SSH nodes",
        )
    if args.dry_run:
        try:
            if args.disaggregation is not None:  # every worker of both sides
                from llmgw_core.serve.disagg_preview import preview_disaggregated

                split = args.disaggregation
                return StepOutcome(result=await preview_disaggregated(fleet, request, model, split))
            preview = await preview_serve(fleet, request, model)
        except DoesNotFit as exc:
            return StepOutcome(
                result={"dry_run": True, "name": args.name, "reason": exc.sentence()},
                ok=False,
                exit_code=EXIT_DOES_NOT_FIT,
                error=exc.sentence(),
            )
        if preview.way is None:
            return StepOutcome(
                result=preview.as_dict(),
                ok=False,
                exit_code=EXIT_DOES_NOT_FIT,
                error=f"{preview.name} would not start: {preview.reason}",
            )
        return StepOutcome(result=preview.as_dict())
    if args.disaggregation is not None:
        return await _serve_split(fleet, reach, request, model, args.disaggregation)
    try:
        outcome = await serve_where_asked(fleet, reach, request, model)
    except DoesNotFit as exc:
        return _no_room(args.name, exc)
    result: dict[str, Any] = outcome.as_dict()
    if outcome.phase in ("ready", "starting"):
        from llmgw_core.serve.figures import with_figures

        view = await with_transport(fleet, await find_replica(fleet, outcome.name))
        view = await with_figures(fleet, view)
        result["replica"] = view.as_dict()
        from llmgw_core.gateway.run import follow_all

        gateways = await follow_all(fleet, reach)  # running gateways take the new engine
        if gateways:
            result["gateways"] = gateways
        return StepOutcome(result=result)
    code = EXIT_DOES_NOT_FIT if outcome.exit_code == EXIT_DOES_NOT_FIT else EXIT_STEP_FAILED
    return StepOutcome(
        result=result,
        ok=False,
        exit_code=code,
        error=f"{outcome.name} did not come up: {outcome.reason}",
    )


def _no_room(name: str | None, exc: DoesNotFit) -> StepOutcome:
    """A start that nothing on the fleet holds now: failed, exit code 3, the reason said."""
    return StepOutcome(
        result={"name": name, "phase": "failed", "reason": exc.sentence()},
        ok=False,
        exit_code=EXIT_DOES_NOT_FIT,
        error=exc.sentence(),
    )


async def _serve_split(fleet: Any, reach: Any, request: Any, model: Any, split: Any) -> StepOutcome:
    """Every worker of both sides started (`serve.disagg_start`); the running gateways take
    them."""
    from llmgw_core.gateway.run import follow_all
    from llmgw_core.serve.disagg_start import serve_disaggregated

    try:
        result = await serve_disaggregated(fleet, reach, request, model, split)
    except DoesNotFit as exc:
        return _no_room(request.name, exc)
    if result["phase"] == "failed":
        code = (
            EXIT_DOES_NOT_FIT if result.get("exit_code") == EXIT_DOES_NOT_FIT else EXIT_STEP_FAILED
        )
        return StepOutcome(result=result, ok=False, exit_code=code, error=result["reason"])
    gateways = await follow_all(fleet, reach)
    if gateways:
        result["gateways"] = gateways
    return StepOutcome(result=result)


def _render_split(result: dict[str, Any]) -> Any:
    """A disaggregated dry run: the KV's path, then each worker's commands."""
    from rich.console import Group
    from rich.text import Text

    split = result["disaggregation"]
    parts: list[Any] = [
        Text(f"{result['name']} (dry run, {result['connector']}): {split['path']}"),
        *(Text(warning, style="yellow") for warning in result.get("warnings") or []),
    ]
    for worker in result["workers"]:
        parts.append(Text(f"{worker['name']} ({worker['role']}, {worker['way']})", style="bold"))
        for shard in worker["shards"]:
            for command in shard["commands"]:
                env = " ".join(f"{k}={v}" for k, v in sorted(command["env"].items()))
                parts.append(Text(f"  r{shard['rank']} {shard['node']}: {command['shell']}"))
                parts.append(Text(f"    {env}", style="dim"))
    return Group(*parts)


def render_preview(result: dict[str, Any]) -> Any:
    """A dry run for people: the way, then each node's commands with their environment."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    if "workers" in result:
        return _render_split(result)
    way = result.get("way")
    if not way:
        return Text(f"{result.get('name')}: would not start — {result.get('reason')}", style="red")
    head = Text(f"{result['name']} (dry run): {way['label']} ({way['engine']}, ")
    head.append(f"{result.get('executor')}), health {result.get('health_url')}")
    parts: list[Any] = [head]
    if result.get("fallbacks"):
        parts.append(Text(f"then, if it fails: {', '.join(result['fallbacks'])}"))
    for passed in result.get("passed_over") or []:
        parts.append(Text(f"no room for {passed['way']}: {passed['reason']}", style="yellow"))
    parts += [Text(warning, style="yellow") for warning in result.get("warnings") or []]
    table = Table("rank", "node", "gpus", "command", "environment", box=None)
    for shard in result.get("shards", []):
        for index, command in enumerate(shard["commands"]):
            env = " ".join(f"{k}={v}" for k, v in sorted(command["env"].items()))
            table.add_row(
                str(shard["rank"]) if index == 0 else "",
                shard["node"] if index == 0 else "",
                (",".join(shard["gpus"]) or "RAM") if index == 0 else "",
                command["shell"],
                env,
            )
    parts.append(table)
    return Group(*parts)


def render_serve(result: dict[str, Any]) -> Any:
    """The outcome for people: the phase, the way, where, and the trace."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    if result.get("dry_run"):
        return render_preview(result)
    head = Text(f"{result.get('name')}: {result.get('phase')}")
    if result.get("reason"):
        head.append(f" — {result['reason']}", style="red")
    parts: list[Any] = [head]
    if "workers" in result:  # a split: the KV's path, then each worker
        if result.get("disaggregation"):
            parts.append(Text(f"{result['connector']}: {result['disaggregation']['path']}"))
        parts += [Text(warning, style="yellow") for warning in result.get("warnings") or []]
        for worker in result["workers"]:
            nodes = ", ".join(n["node"] for n in worker["placement"].get("nodes") or [])
            parts.append(Text(f"{worker['name']} ({worker['role']}) {worker['phase']} on {nodes}"))
        return Group(*parts)
    way = result.get("way")
    if way:
        parts.append(Text(f"way: {way['label']} ({way['engine']})"))
    parts += [Text(warning, style="yellow") for warning in result.get("warnings") or []]
    table = Table("time", "node", "step", "detail", box=None)
    for entry in result.get("trace", []):
        table.add_row(
            entry["at"][11:23], entry.get("node") or "", entry["step"], entry.get("detail") or ""
        )
    parts.append(table)
    return Group(*parts)


step("serve", args=ServeArgs, render=render_serve)(run_serve)
