"""The Serve a model wizard's five pages, each a widget that draws and reads its own fields.

A page knows its fields, what they say as the `serve` step's arguments, and
how to draw what the wizard hands it (the plan's ways, the fit of a size,
the preview); it neither plans nor serves. The flow — which page is shown,
why Next is greyed out, the workers that ask the feed — is `ServeScreen`'s
(`llmgw_tui.screens.serve`), which calls these pages and handles their
fields' messages.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.suggester import SuggestFromList
from textual.widgets import Checkbox, DataTable, Input, Static

from llmgw_core.errors import LlmgwError
from llmgw_tui.cells import plain
from llmgw_tui.fields import (
    Checked,
    CheckedInput,
    adapters_refusal,
    env_lines,
    env_refusal,
    key_env_refusal,
    model_ref_refusal,
    number_input,
    reason,
    replica_name_refusal,
)

if TYPE_CHECKING:
    from llmgw_core.script.steps.serve import ServeArgs
    from llmgw_core.serve.prepare import ServePreview

# The serving modules (SSH, engines) are imported when a page needs them, so the
# console's first frame never waits for them.

WAY_COLUMNS = ("FILE", "WAY", "HOW", "A CARD", "OF USABLE", "NOW")
GATEWAY_NAME = "front"
"""The gateway the wizard puts a replica behind (started on first use, adopted after)."""


def catalog_refs() -> list[str]:
    """Every model the catalog knows offline, as `catalog:org/name`."""
    from llmgw_core.catalog import known_models

    return [f"catalog:{repo_id}" for repo_id in known_models()]


def _reset(field: Input, value: str) -> None:
    """Put `value` in `field` as if new: no `Changed` (nothing is checked), no red."""
    with field.prevent(Input.Changed):
        field.value = value
    field.remove_class("-invalid")


class ModelPage(Vertical):
    """Page 1: the model, as a Hub id, a local path or a catalog name (→ completes); and, where
    the inventory names Slurm clusters, the place: the SSH nodes or one of them."""

    _clusters: tuple[str, ...] = ()

    def compose(self) -> ComposeResult:
        """The question, the field, and the last model served (hidden until there is one)."""
        yield Static("Which model? A Hub id, a local path, or catalog:org/name (→ completes).")
        self._serve_model = CheckedInput(
            placeholder="model",
            id="serve-model",
            suggester=SuggestFromList(catalog_refs(), case_sensitive=False),
            validators=[Checked(model_ref_refusal)],
        )
        yield self._serve_model
        self._serve_last = Static("", id="serve-last", markup=False)
        self._serve_last.display = False
        yield self._serve_last
        self._serve_place_question = Static("", id="serve-place-question", markup=False)
        self._serve_place_question.display = False
        yield self._serve_place_question
        self._serve_place = CheckedInput(
            placeholder="empty: the SSH nodes",
            id="serve-place",
            validators=[Checked(self.place_refusal)],
        )
        self._serve_place.display = False  # shown once the inventory names a Slurm cluster
        yield self._serve_place

    @property
    def model_ref(self) -> str:
        """The model as typed."""
        return self._serve_model.value.strip()

    @property
    def place(self) -> str | None:
        """The Slurm cluster typed as the place, None for the SSH nodes."""
        return self._serve_place.value.strip() or None

    def offer_clusters(self, names: tuple[str, ...]) -> None:
        """Offer the inventory's Slurm clusters as places (→ completes); none, no field."""
        if names == self._clusters:
            return
        self._clusters = names
        self._serve_place.suggester = SuggestFromList(list(names), case_sensitive=False)
        self._serve_place_question.update(
            f"Where? Empty for the SSH nodes, or a Slurm cluster: {', '.join(names)} "
            "(the replica is one job there)."
        )
        self._serve_place_question.display = bool(names)
        self._serve_place.display = bool(names)

    def place_refusal(self, text: str) -> str | None:
        """Why the place typed is none: a name the inventory's clusters do not have."""
        typed = text.strip()
        if not typed or typed in self._clusters:
            return None
        known = ", ".join(self._clusters) or "none"
        return f"place: no Slurm cluster is named {typed!r} (the inventory has: {known})"

    def reset(self, last_served: str | None) -> None:
        """Empty, offering `last_served` (its name on the page and as the first completion)."""
        _reset(self._serve_model, "")
        _reset(self._serve_place, "")
        if last_served:
            self._serve_model.suggester = SuggestFromList(
                [last_served, *catalog_refs()], case_sensitive=False
            )
            self._serve_last.update(
                f"Last served: {last_served} (type its first letters, → completes)"
            )
            self._serve_last.display = True


class WayPage(Vertical):
    """Page 2: the plan's ways (file, way, layout, what a card holds), one row each."""

    def compose(self) -> ComposeResult:
        """The plan's line over the table of ways."""
        self._serve_plan_line = Static("", id="serve-plan-line", markup=False)
        yield self._serve_plan_line
        self._serve_ways: DataTable[object] = DataTable(
            id="serve-ways", classes="short", cursor_type="row"
        )
        self._serve_ways.add_columns(*WAY_COLUMNS)
        yield self._serve_ways

    def show(self, body: dict[str, Any]) -> None:
        """Draw the plan `body`'s ways, or why none fits."""
        table = self._serve_ways
        table.clear()
        for way in body["options"]:
            table.add_row(
                plain(way["artifact"]),
                plain(way["label"]),
                plain(way["layout"]),
                plain(f"{way['per_card_gib']:.1f} GB"),
                plain(f"{way['usable_gib']:.0f} GB"),
                Text("free" if way["free_now"] else "busy"),
            )
        line = f"{body['model']}: {len(body['options'])} ways for {body['context']} tokens."
        self._serve_plan_line.update(
            line if body["options"] else body["does_not_fit"] or "no way fits"
        )

    def pick_first(self) -> None:
        """The cursor on the first way (its row is highlighted, as a move would)."""
        self._serve_ways.move_cursor(row=0)

    def reset(self) -> None:
        """No ways."""
        self._serve_ways.clear()


class SizePage(Vertical):
    """Page 3: the context and concurrency, and whether the chosen way holds them."""

    def compose(self) -> ComposeResult:
        """The two numbers side by side, the fit line under them."""
        from llmgw_core.script.steps.serve import ServeArgs  # the fields' bounds are the step's

        yield Static("Tokens a sequence may hold, and sequences served at once.")
        with Horizontal(classes="serve-row"):
            self._serve_context = number_input(
                ServeArgs, "context", "context", id="serve-context", placeholder="context (tokens)"
            )
            yield self._serve_context
            self._serve_concurrency = number_input(
                ServeArgs,
                "concurrency",
                "sequences",
                id="serve-concurrency",
                value="1",
                placeholder="sequences",
            )
            yield self._serve_concurrency
        self._serve_fit = Static("", id="serve-fit", classes="fit", markup=False)
        yield self._serve_fit

    def offer_context(self, context: int) -> None:
        """Fill in the plan's context, unless one is typed."""
        if not self._serve_context.value:
            self._serve_context.value = str(context)

    def refusal(self) -> str | None:
        """Why the context or the concurrency typed is refused, or None."""
        return reason(self._serve_context) or reason(self._serve_concurrency)

    def typed(self) -> tuple[int, int] | None:
        """The context and concurrency the page holds now, None while either is refused."""
        if self.refusal() is not None:
            return None
        return int(self._serve_context.value), int(self._serve_concurrency.value)

    def args(self) -> dict[str, int]:
        """The page's part of the `serve` step's arguments.

        Raises:
            ValueError: a number field not yet a number.
        """
        return {
            "context": int(self._serve_context.value),
            "concurrency": int(self._serve_concurrency.value),
        }

    def say(self, sentence: str) -> None:
        """Put `sentence` on the fit line."""
        self._serve_fit.update(sentence)

    def show_fit(
        self, body: dict[str, Any], way: dict[str, Any]
    ) -> tuple[dict[str, Any] | None, str]:
        """Whether the plan `body` still lists `way`, drawn on the fit line.

        Returns:
            The way as `body` has it (None when it no longer fits), and the line drawn.
        """
        same = next((w for w in body["options"] if _same_way(w, way)), None)
        if same is None:
            line = f"{way['label']} does not hold {body['context']} tokens × " + (
                f"{body['concurrency']}: " + (body["does_not_fit"] or "pick a smaller context")
            )
        else:
            line = f"{same['label']}: {same['memory']}"
        self._serve_fit.update(line)
        return same, line

    def reset(self) -> None:
        """No context typed (the next plan's is offered), one sequence, no fit line."""
        _reset(self._serve_context, "")
        _reset(self._serve_concurrency, "1")
        self._serve_fit.update("")


def _same_way(a: dict[str, Any], b: dict[str, Any]) -> bool:
    keys = ("engine", "artifact", "gpu_class", "cards", "nodes")
    return all(a.get(k) == b.get(k) for k in keys)


class ExtrasPage(Vertical):
    """Page 4: fallbacks, the engine's environment and flags, the key, the replica's name."""

    engine: str | None = None
    """The chosen way's engine (`offer_flags`): the flags typed must be its own."""
    adapter_files: tuple[str, str] | None = None
    """The adapters as typed when reading their files refused them, and why (`refuse_adapters`)."""

    def compose(self) -> ComposeResult:
        """Each field under the line that says what it takes."""
        from llmgw_core.script.steps.serve import ServeArgs  # the fields' bounds are the step's

        yield Static("Fallbacks: how many next-best ways to try if this one fails.")
        self._serve_fallbacks = number_input(
            ServeArgs, "fallbacks", "fallbacks", id="serve-fallbacks", value="0", optional=True
        )
        yield self._serve_fallbacks
        yield Static("Engine environment: KEY=VALUE entries, space separated.")
        self._serve_env = CheckedInput(
            placeholder="KEY=VALUE …", id="serve-env", validators=[Checked(env_refusal)]
        )
        yield self._serve_env
        self._serve_flags_hint = Static(
            "Engine flags: NAME=VALUE entries (the engine's own).", id="serve-flags-hint"
        )
        yield self._serve_flags_hint
        self._serve_flags = CheckedInput(
            placeholder="NAME=VALUE …", id="serve-flags", validators=[Checked(self._flags_refusal)]
        )
        yield self._serve_flags
        yield Static(
            "LoRA adapters (optional): NAME=PATH entries, a PEFT folder or a GGUF file each;"
            " clients ask for them by NAME."
        )
        self._serve_adapters = CheckedInput(
            placeholder="NAME=PATH …",
            id="serve-adapters",
            validators=[Checked(self._adapters_refusal)],
        )
        yield self._serve_adapters
        yield Static(
            "Key (optional): the variable in this console's environment holding the key"
            " clients must send."
        )
        self._serve_key = CheckedInput(
            placeholder="VARIABLE", id="serve-key", validators=[Checked(key_env_refusal)]
        )
        yield self._serve_key
        yield Static("Replica name.")
        self._serve_name = CheckedInput(id="serve-name", validators=[Checked(replica_name_refusal)])
        yield self._serve_name

    def _serve_fields(self) -> tuple[Input, ...]:
        return (
            self._serve_fallbacks,
            self._serve_env,
            self._serve_flags,
            self._serve_adapters,
            self._serve_key,
            self._serve_name,
        )

    def offer_name(self, name: str) -> None:
        """Fill in the name `serve` would give, unless one is typed."""
        if not self._serve_name.value:
            self._serve_name.value = name

    def offer_flags(self, engine: str | None) -> None:
        """Take `engine` as the flags' own, and name the flags most often given to it."""
        from llmgw_core.engines.flags import COMMON

        self.engine = engine
        common = COMMON.get(str(engine), "")
        self._serve_flags_hint.update(
            f"Engine flags for {engine}: NAME=VALUE entries, e.g. {common}"
            if common
            else "Engine flags: NAME=VALUE entries (the engine's own)."
        )

    def refusal(self) -> str | None:
        """Why the first refused field of the page is refused, or None."""
        return next(filter(None, (reason(field) for field in self._serve_fields())), None)

    def adapters_typed(self) -> str:
        """The adapters field as typed now."""
        return self._serve_adapters.value.strip()

    def refuse_adapters(self, typed: str, why: str) -> None:
        """The adapters `typed` were refused once their files were read: the field says `why`
        (red) until it says something else."""
        self.adapter_files = (typed, why)
        self._serve_adapters.validate(self._serve_adapters.value)

    def _adapters_refusal(self, text: str) -> str | None:
        """Why the adapters typed cannot be read as `NAME=PATH …`, or why their files were
        refused when this same text was read."""
        said = adapters_refusal(text)
        if said is None and self.adapter_files and self.adapter_files[0] == text.strip():
            return self.adapter_files[1]
        return said

    def _flags_refusal(self, text: str) -> str | None:
        """Why the engine flags cannot be used with the way chosen, or None."""
        try:
            self._engine_args(text)
        except LlmgwError as exc:
            return exc.sentence()
        return None

    def _engine_args(self, text: str) -> dict[str, str | bool]:
        from llmgw_core.engines.flags import checked_engine_args, parse_engine_args

        given = parse_engine_args(text)
        if not given:
            return {}
        if not self.engine:
            raise LlmgwError("engine flags: choose a way first (the flags are its engine's)")
        return checked_engine_args(self.engine, given)

    def args(self) -> dict[str, Any]:
        """The page's part of the `serve` step's arguments (name and key only when typed).

        Raises:
            LlmgwError: engine flags the chosen way's engine does not take.
            ValueError: the fallbacks not yet a number.
        """
        given: dict[str, Any] = {
            "env": env_lines(self._serve_env.value),
            "fallbacks": int(self._serve_fallbacks.value.strip() or 0),
            "engine_args": self._engine_args(self._serve_flags.value),
        }
        for key, field in (("name", self._serve_name), ("api_key_env", self._serve_key)):
            if field.value.strip():
                given[key] = field.value.strip()
        if self._serve_adapters.value.strip():
            from llmgw_core.serve.adapters import parse_adapter_entries

            given["adapters"] = parse_adapter_entries(self._serve_adapters.value)
        return given

    def reset(self) -> None:
        """No fallbacks, and nothing else typed."""
        self.adapter_files = None
        for field in self._serve_fields():
            _reset(field, "0" if field is self._serve_fallbacks else "")


class GatewayBox(Checkbox, inherit_bindings=False):
    """The Confirm page's checkbox: space ticks it; Enter is left to the page (it serves)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("space", "toggle_button", "Toggle", show=False, id="serve-gateway-toggle")
    ]


class ConfirmPage(VerticalScroll):
    """Page 5: the gateway box, and the exact commands and environment per node."""

    def compose(self) -> ComposeResult:
        """The box over the preview."""
        self._serve_gateway = GatewayBox(
            f"put behind a gateway ({GATEWAY_NAME}: one address for every model served)",
            id="serve-gateway",
        )
        yield self._serve_gateway
        self._serve_preview = Static("", id="serve-preview", markup=False)
        yield self._serve_preview

    @property
    def behind_gateway(self) -> bool:
        """Whether the box is ticked."""
        return self._serve_gateway.value

    def say(self, sentence: str) -> None:
        """Show `sentence` in place of the commands (an error; "" while they are built)."""
        self._serve_preview.update(sentence)

    def show(self, args: ServeArgs, preview: ServePreview | None, way: dict[str, Any]) -> None:
        """Draw what serving `args` starts: `preview`'s commands, else (a feed that cannot say)
        the chosen `way`'s own words."""
        if preview is None:
            self._serve_preview.update(confirm_text_from_way(args, way))
        else:
            self._serve_preview.update(confirm_text(args, preview.as_dict()))

    def reset(self) -> None:
        """Unticked, nothing drawn."""
        self._serve_gateway.value = False
        self._serve_preview.update("")


def confirm_text(args: ServeArgs, preview: dict[str, Any]) -> str:
    """The confirmation page: the way, the placement, and per node its commands and env."""
    from llmgw_core.engines import redact_env

    if preview.get("reason"):
        return f"Nothing would start: {preview['reason']}"
    way = preview.get("way") or {}
    # The engine, and how it is run where that says more (vLLM over Ray); llama.cpp is itself.
    how = dict.fromkeys(x for x in (way.get("engine"), preview.get("executor")) if x)
    lines = [
        f"Replica {preview['name']} of {preview['model']}",
        f"  way {way.get('label')} ({', '.join(how)}) · "
        f"context {preview['context']} × {args.concurrency}",
    ]
    if preview.get("fallbacks"):
        lines.append(f"  fallbacks: {', '.join(preview['fallbacks'])}")
    if args.adapters:
        lines.append(f"  adapters: {', '.join(a.name for a in args.adapters)}")
    for passed in preview.get("passed_over") or ():
        lines.append(f"  passed over {passed['way']}: {passed['reason']}")
    for warning in preview.get("warnings") or ():
        lines.append(f"  ! {warning}")
    if args.api_key_env is None:
        lines.append(
            "  ! no key: the replica, and a gateway put in front of it, answer whoever reaches "
            "their ports (page 4's Key names the variable holding one)"
        )
    for shard in preview.get("shards") or ():
        gpus = ", ".join(str(g) for g in shard.get("gpus") or ()) or "RAM"
        lines.append("")
        lines.append(f"▸ {shard['node']} · rank {shard['rank']} · {gpus}")
        for command in shard.get("commands") or ():
            env = redact_env(command.get("env") or {})
            for key, value in sorted(env.items()):
                lines.append(f"    {key}={value}")
            lines.append(f"    $ {command.get('shell') or ' '.join(command.get('argv') or ())}")
    lines.append("")
    lines.append("Enter or ctrl+n serves it; space ticks the gateway box; ctrl+b goes back.")
    name = preview.get("name") or args.name or "NAME"
    lines.append(f"ctrl+s saves it as service {name} ({name}.service.yaml here) and applies it.")
    return "\n".join(lines)


def confirm_text_from_way(args: ServeArgs, way: dict[str, Any]) -> str:
    """The confirmation page from the plan's way alone (a feed without a preview)."""
    from llmgw_core.engines import redact_env

    env = " ".join(f"{k}={v}" for k, v in sorted(redact_env(dict(args.env)).items()))
    lines = [
        f"Replica {args.name} of {args.model}",
        f"  way {way.get('label')} · context {args.context} × {args.concurrency}",
        f"  environment: {env or '(none added)'}",
    ]
    if args.cluster is not None:
        lines.append(
            f"  one Slurm job on {args.cluster}: its nodes and cards are the scheduler's "
            "choice, known once the job runs"
        )
    lines.append(f"    $ {way.get('serve')}")
    return "\n".join(lines)


__all__ = [
    "GATEWAY_NAME",
    "ConfirmPage",
    "ExtrasPage",
    "GatewayBox",
    "ModelPage",
    "SizePage",
    "WayPage",
    "catalog_refs",
    "confirm_text",
    "confirm_text_from_way",
]
