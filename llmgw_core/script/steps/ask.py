"""The `ask` step: one chat completion from a replica or a gateway, through an SSH tunnel.

```yaml
steps:
  - ask: {replica: llama-70b, prompt: "Say hello in one word."}
  - ask: {gateway: front, model: llama-70b, prompt: "Say hello in one word."}
```

Through a gateway, `model` picks the served model (it may be left out when
the gateway fronts only one). The key presented is the one the replica (or
gateway) was started with; `api_key_env: OTHER` presents another variable's,
`api_key_env: none` none at all; with `expect: refused` the step passes
when the request is refused (401) and fails when it is answered.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import Field, model_validator

from llmgw_core.script.registry import (
    EXIT_STEP_FAILED,
    StepArgs,
    StepContext,
    StepOutcome,
    step,
)
from llmgw_core.serve.keys import ENV_NAME


class TargetArgs(StepArgs):
    """What `ask` and `bench` send to: a replica, or a gateway and one of its models, and the key."""

    replica: str | None = Field(default=None, min_length=1)
    gateway: str | None = Field(default=None, min_length=1)
    model: str | None = Field(default=None, min_length=1)
    api_key_env: str | None = Field(default=None, pattern=ENV_NAME)
    ca_file: str | None = Field(default=None, min_length=1)
    """The CA file a gateway's HTTPS certificate is checked against (default: the system's)."""

    @model_validator(mode="after")
    def _one_target(self) -> TargetArgs:
        if (self.replica is None) == (self.gateway is None):
            raise ValueError("give either replica or gateway")
        if self.model is not None and self.gateway is None:
            raise ValueError("model is for a gateway; a replica serves one model")
        return self


class AskArgs(TargetArgs):
    """Arguments of `ask`."""

    prompt: str = Field(min_length=1)
    max_tokens: int = Field(default=64, ge=1, le=32_768)
    expect: Literal["answer", "refused"] = "answer"


@dataclass(frozen=True)
class Target:
    """Where a question goes: the node and port through the tunnels, the model, the key."""

    reach: Any
    node: str
    port: int
    served_name: str
    gateway: Any = None
    api_key: str | None = field(default=None, repr=False)
    host: str = "127.0.0.1"
    """The address on the node the port listens on (an engine's bind address)."""
    tls: Any = None
    """`ClientTls` for a gateway that speaks HTTPS or a replica's pinned engine, else None."""


async def engine_target(args: TargetArgs, ctx: StepContext) -> Target:
    """The replica's rank 0 (or the gateway's front) a question goes to, with the key to present.

    The key is `api_key_env`'s, else the one the replica or gateway was started
    with; `api_key_env: none` presents none.
    """
    from llmgw_core.serve.keys import client_key
    from llmgw_core.serve.replicas import find_replica
    from llmgw_core.serve.tunnels import fleet_and_reach

    fleet, reach = await fleet_and_reach(ctx)
    if args.gateway is None:
        from llmgw_core.serve.http import engine_tls

        view = await find_replica(fleet, args.replica or "")
        head, port, served_name = view.ready_engine()
        key = client_key(args.api_key_env, view.api_key_env)
        # Pinned to the replica's own certificate: a process that took a dead engine's
        # port fails the handshake and is sent neither the prompt nor the key.
        tls = engine_tls(view.tls_cert)
        return Target(reach, head, port, served_name, api_key=key, host=view.http_host, tls=tls)
    from llmgw_core.gateway.run import find_gateway, router_workers
    from llmgw_core.gateway.spec import choose_model

    gateway = await find_gateway(fleet, args.gateway)
    workers = await router_workers(reach, gateway)
    served = [
        name
        for worker in workers.values()
        for name in ([worker["model"]] if worker["base"] else []) + sorted(worker["adapters"])
    ]
    model = choose_model(served, args.model, gateway.name)
    key = client_key(args.api_key_env, gateway.api_key_env)
    tls = None
    if gateway.tls:
        from llmgw_core.serve.http import ClientTls

        server_name = fleet.inventory.node_spec(gateway.node).host
        ca_file = str(ctx.local_path(args.ca_file)) if args.ca_file else None
        tls = ClientTls(server_name=server_name, ca_file=ca_file)
    return Target(reach, gateway.node, gateway.port, model, gateway, api_key=key, tls=tls)


async def run_ask(args: AskArgs, ctx: StepContext) -> StepOutcome:
    """Ask the replica's engine (or the gateway) one question; the result is its answer's text."""
    from llmgw_core.serve.http import KeyRefused, chat

    target = await engine_target(args, ctx)
    try:
        answer = await chat(
            target.reach,
            target.node,
            target.port,
            target.served_name,
            args.prompt,
            max_tokens=args.max_tokens,
            api_key=target.api_key,
            host=target.host,
            tls=target.tls,
        )
    except KeyRefused as refused:
        if args.expect != "refused":
            raise
        return StepOutcome(result={**_named(args, target), "refused": True, "why": refused.message})
    if args.expect == "refused":
        return StepOutcome(
            result={**_named(args, target), "refused": False, "text": answer.text},
            ok=False,
            exit_code=EXIT_STEP_FAILED,
            error=f"{args.replica or args.gateway} answered a request it should have refused",
        )
    return StepOutcome(
        result={
            **_named(args, target),
            "text": answer.text,
            "completion_tokens": answer.completion_tokens,
            "latency_s": round(answer.latency_s, 3),
        }
    )


def _named(args: AskArgs, target: Target) -> dict[str, Any]:
    """Whom the question went to, as the result names it."""
    if args.gateway is None:
        return {"replica": args.replica}
    return {"gateway": args.gateway, "model": target.served_name}


def render_ask(result: dict[str, Any]) -> Any:
    """The answer's text."""
    from rich.text import Text

    if result.get("refused"):
        return Text(f"refused, as expected: {result.get('why')}")
    return Text(result.get("text", ""))


step("ask", args=AskArgs, render=render_ask)(run_ask)
