"""The `keep` step: a service healed and scaled on its engines' own signals, while it runs.

```yaml
steps:
  - keep: {service: chat, duration_s: 600}   # the document its replicas carry
  - keep: {file: chat.yaml}                  # until interrupted
  - keep:
      service:
        name: chat
        model: catalog:meta-llama/Llama-3.1-8B-Instruct
        replicas: {min: 1, max: 4, target_waiting: 4, scale_down_after_s: 120}
        gateway: front
```

Every `interval_s` (2) it heals what failed and scales on the requests
waiting and the KV cache in use, holding the service's lease. Each action
is printed as it happens (stderr) and is an event `{at, action, replica,
why}` in `result.events`. See docs/services.md.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import Field, model_validator

from llmgw_core.arguments import NAME_PATTERN
from llmgw_core.script.registry import StepArgs, StepContext, StepOutcome, step
from llmgw_core.service.spec import ServiceDoc


class KeepArgs(StepArgs):
    """Arguments of `keep`: the service (its name, or its document inline or in a file)."""

    service: ServiceDoc | str | None = None
    file: str | None = None
    duration_s: float | None = Field(default=None, gt=0, le=31_536_000)
    interval_s: float = Field(default=2.0, ge=0.2, le=3600)

    @model_validator(mode="after")
    def _one_service(self) -> KeepArgs:
        if (self.service is None) == (self.file is None):
            raise ValueError("give either service (its name or its document) or file")
        if isinstance(self.service, str) and not re.match(NAME_PATTERN, self.service):
            raise ValueError("service must be a service's name or its document")
        return self


async def _document(args: KeepArgs, ctx: StepContext, fleet: Any) -> ServiceDoc:
    """The document to keep: given, read from its file, or the one its replicas carry."""
    from llmgw_core.script.steps.apply import read_service_file

    if isinstance(args.service, ServiceDoc):
        return args.service
    if args.file is not None:
        return read_service_file(ctx.local_path(args.file))
    from llmgw_core.service.keep import carried_document

    return await carried_document(fleet, str(args.service))


async def run_keep(args: KeepArgs, ctx: StepContext) -> StepOutcome:
    """Heal and scale the service until `duration_s` is spent (or the script is interrupted)."""
    from llmgw_core.script.steps.apply import outcome_of
    from llmgw_core.script.steps.serve import serve_request
    from llmgw_core.serve.tunnels import fleet_and_reach
    from llmgw_core.service.keep import keep_service

    # A document given (or its file's mistakes) is read once, before any connection.
    doc = None if isinstance(args.service, str) else await _document(args, ctx, None)
    fleet, reach = await fleet_and_reach(ctx)
    if doc is None:
        doc = await _document(args, ctx, fleet)
    base, model = serve_request(doc, ctx, name=None, starts_split=True)
    result = await keep_service(
        fleet,
        reach,
        doc,
        base,
        model,
        duration_s=args.duration_s,
        interval_s=args.interval_s,
        progress=ctx.progress,
    )
    return outcome_of(result)


def render_keep(result: dict[str, Any]) -> Any:
    """Each event on a line, then the replicas."""
    from rich.text import Text

    events = result.get("events") or []
    text = Text(
        f"service {result.get('service')}: kept for {result.get('cycles')} cycle(s), "
        f"{len(events)} event(s)"
    )
    for event in events:
        text.append(
            f"\n  {event['at'][11:23]} {event['action']} {event['replica']}: {event['why']}"
        )
    for replica in result.get("replicas") or []:
        text.append(f"\n  {replica['name']}: {replica['phase']} at {replica.get('endpoint')}")
    return text


step("keep", args=KeepArgs, render=render_keep)(run_keep)
