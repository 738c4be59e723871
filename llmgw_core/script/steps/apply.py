"""The `apply` step: make the fleet run what a service document says, and say what changed.

```yaml
steps:
  - apply:
      service:
        name: chat
        model: catalog:meta-llama/Llama-3.1-8B-Instruct
        context: 16384
        replicas: 2
        gateway: front
  - apply: {file: chat.yaml}            # a file whose top is `service:`
  - apply: {file: chat.yaml, dry_run: true}
```

The result's `actions` (`[{action, replica, why, by?}]`: `start`, `replace`
naming what changed, `stop`) are decided before anything changes and printed
as they are taken; `done` says how each went, with its seconds and, for a
replace, how the old replica drained. Applying the same document again does
nothing (`actions: []`). Another operator applying the same service at the
same time is refused, named. See docs/services.md.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError, model_validator

from llmgw_core.errors import BadInput
from llmgw_core.script.registry import EXIT_STEP_FAILED, StepArgs, StepContext, StepOutcome, step
from llmgw_core.service.spec import Action, ServiceDoc


class ApplyArgs(StepArgs):
    """Arguments of `apply`: the document, inline or in a file."""

    service: ServiceDoc | None = None
    file: str | None = None
    dry_run: bool = False

    @model_validator(mode="after")
    def _one_document(self) -> ApplyArgs:
        if (self.service is None) == (self.file is None):
            raise ValueError("give either service (the document) or file (a file holding it)")
        return self


def read_service_file(path: Any) -> ServiceDoc:
    """The `service:` document in a YAML file.

    Raises:
        BadInput: the file cannot be read, or is not a service document (one sentence).
    """
    from llmgw_core.arguments import validation_sentence
    from llmgw_core.yaml_text import load_checked, read_text_file

    source = str(path)
    try:
        text = read_text_file(path, source)
    except OSError as exc:
        raise BadInput(f"the service file {source} cannot be read: {exc.strerror or exc}") from None
    _, data = load_checked(text, source)
    if not isinstance(data, dict) or set(data) != {"service"}:
        raise BadInput(f"{source} is not a service document", "its top is one key, `service:`")
    try:
        return ServiceDoc.model_validate(data["service"])
    except ValidationError as exc:
        raise BadInput(f"{source}: service: {validation_sentence(exc)}") from None


async def run_apply(args: ApplyArgs, ctx: StepContext) -> StepOutcome:
    """Read what runs, print the actions, carry them out under the service's lease."""
    from llmgw_core.script.steps.serve import serve_request
    from llmgw_core.serve.tunnels import fleet_and_reach
    from llmgw_core.service.apply import apply_service

    doc = (
        args.service
        if args.service is not None
        else read_service_file(ctx.local_path(args.file or ""))
    )
    base, model = serve_request(doc, ctx, name=None, starts_split=True)
    fleet, reach = await fleet_and_reach(ctx)
    result = await apply_service(
        fleet, reach, doc, base, model, dry_run=args.dry_run, progress=ctx.progress
    )
    return outcome_of(result)


def outcome_of(result: dict[str, Any]) -> StepOutcome:
    """A service step's outcome from its result: failed (with its exit code) when it says why."""
    if result.get("failed"):
        code = int(result.pop("exit_code", EXIT_STEP_FAILED))
        return StepOutcome(result=result, ok=False, exit_code=code, error=result["failed"])
    return StepOutcome(result=result)


def render_apply(result: dict[str, Any]) -> Any:
    """The actions, then how each went."""
    from rich.text import Text

    actions = result.get("actions") or []
    head = "dry run: " if result.get("dry_run") else ""
    text = Text(
        f"service {result.get('service')}: {head}"
        + (f"{len(actions)} action(s)" if actions else "nothing to change")
    )
    done = {(d.get("replica"), d.get("gateway")): d for d in result.get("done") or []}
    for action in actions:
        text.append(f"\n  {Action.of_dict(action).line()}")
        finished = done.get((action.get("replica"), action.get("gateway")))
        if finished is not None:
            text.append(f" — done in {finished['seconds']} s", style="green")
    if result.get("failed"):
        text.append(f"\n{result['failed']}", style="red")
    for replica in result.get("replicas") or []:
        text.append(f"\n  {replica['name']}: {replica['phase']} at {replica.get('endpoint')}")
    return text


step("apply", args=ApplyArgs, render=render_apply)(run_apply)
