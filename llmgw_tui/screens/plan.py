"""Plan: does a model fit this fleet, and how — every file, every way, what a card holds.

The figures are the planner's (`llmgw_core.planner.plan`), made against the fleet the
console shows; this screen only lays them out. Model, context, concurrency
and format are editable; each change plans again in a worker.
"""

from __future__ import annotations

import re
from typing import Any, ClassVar

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, VerticalScroll
from textual.widgets import DataTable, Input, Select, Static
from textual.worker import Worker, WorkerState

from llmgw_core.errors import LlmgwError
from llmgw_tui.cells import plain, redraw_table
from llmgw_tui.feed.protocol import plan_body
from llmgw_tui.fields import Checked, CheckedInput, model_ref_refusal, number_input, reason
from llmgw_tui.kept_screen import KeptScreen
from llmgw_tui.theme import theme_style
from llmgw_tui.widgets.footer import SteadyFooter
from llmgw_tui.widgets.header import TitleBar
from llmgw_tui.widgets.memory_bar import MemoryBar

FILE_COLUMNS = ("FILE", "SIZE", "BEST WAY", "A CARD", "OF", "ALL CARDS", "NOW")
WAY_COLUMNS = ("FILE", "WAY", "HOW", "WHERE", "A CARD", "WEIGHTS+CONTEXT+ENGINE", "OF", "NOW")
_UUID = re.compile(r"\b([0-9a-f]{8})-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b")


def short_where(way: dict[str, Any]) -> str:
    """Where a way runs, from its pool's description: `ib-a`, `NVLink domain 4f2c9a1e/32766`.

    The class is in the WAY column already, and a cluster UUID is cut to its
    first block, as the fleet screen names domains.
    """
    text = _UUID.sub(r"\1", str(way["pool"])).removeprefix(f"{way['gpu_class']} ")
    return text.removeprefix("on ").removeprefix("in ")


FORM_FIELDS = ("model", "context", "concurrency")
FORMATS = (("every file", "both"), ("safetensors", "safetensors"), ("GGUF", "gguf"))


class PlanScreen(KeptScreen[None]):
    """The plan of one model on this fleet."""

    BINDING_GROUP_TITLE = "Plan"
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("ctrl+r", "replan", "Plan again", id="plan-again"),
        Binding("escape", "toggle_form", "Form", show=False, id="plan-focus-model"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.model_ref = ""
        """The model planned (a Hub id, a local directory, or `catalog:org/name`)."""

    def compose(self) -> ComposeResult:
        """The form on top, then the files, the best way with its bar, every way, the command."""
        from llmgw_core.script.steps.plan import PlanArgs  # the fields' bounds are the step's

        yield TitleBar(icon="▦")
        with Horizontal(id="plan-form"):
            self._plan_model = CheckedInput(
                placeholder="model: org/name, a directory, catalog:org/name",
                id="plan-model",
                classes="model",
                validators=[Checked(model_ref_refusal)],
            )
            yield self._plan_model
            self._plan_context = number_input(
                PlanArgs,
                "context",
                "context",
                id="plan-context",
                classes="context",
                placeholder="context",
                optional=True,
            )
            yield self._plan_context
            yield number_input(
                PlanArgs,
                "concurrency",
                "sequences",
                id="plan-concurrency",
                classes="concurrency",
                value="1",
                placeholder="sequences",
            )
            self._plan_format = Select(FORMATS, value="both", allow_blank=False, id="plan-format")
            yield self._plan_format
        with VerticalScroll(id="plan-body"):
            self._plan_status = Static(
                "Type a model and press Enter.", id="plan-status", classes="headline", markup=False
            )
            yield self._plan_status
            files: DataTable[object] = DataTable(id="plan-files", cursor_type="row")
            self._plan_files = files
            files.add_columns(*FILE_COLUMNS)
            yield files
            self._plan_best = Static("", id="plan-best", classes="line", markup=False)
            yield self._plan_best
            self._plan_bar = MemoryBar(id="plan-bar")
            yield self._plan_bar
            self._plan_context_line = Static(
                "", id="plan-context-line", classes="line", markup=False
            )
            yield self._plan_context_line
            ways: DataTable[object] = DataTable(id="plan-ways", cursor_type="row")
            self._plan_ways = ways
            ways.add_columns(*WAY_COLUMNS)
            yield ways
            self._plan_serve = Static("", id="plan-serve", classes="line command", markup=False)
            yield self._plan_serve
        yield SteadyFooter()

    def on_mount(self) -> None:
        """No blinking cursors (they are clocks); the model field first."""
        self.title = "llmgw"
        self.sub_title = "plan"
        for field in self.query(Input):
            field.cursor_blink = False
        self._plan_model.focus()

    def plan(self, model_ref: str) -> None:
        """Plan `model_ref` with the form's context, concurrency and format."""
        self._plan_model.value = model_ref
        self.action_replan()

    def action_focus_model(self) -> None:
        """Back to the model field."""
        self._plan_model.focus()

    def action_toggle_form(self) -> None:
        """Leave the form (digits, `?` and `q` are the console's keys again), or go back to it."""
        if isinstance(self.focused, Input):
            self._plan_ways.focus()
        else:
            self.action_focus_model()

    @on(Input.Submitted)
    def _submitted(self) -> None:
        self.action_replan()

    @on(Select.Changed, "#plan-format")
    def _format_changed(self) -> None:
        if self.model_ref:
            self.action_replan()

    def action_replan(self) -> None:
        """Plan again with what the form says; a bad field is a red line."""
        model_ref = self._plan_model.value.strip()
        if not model_ref:
            self._say("Type a model: a Hub id, a local directory or catalog:org/name.", error=True)
            return
        fields = [self.query_one(f"#plan-{name}", Input) for name in FORM_FIELDS]
        refused = next(filter(None, map(reason, fields)), None)
        if refused is not None:
            self._say(f"Not planned: {refused}.", error=True)
            return
        context_text = fields[1].value.strip()
        context = int(context_text) if context_text else None
        concurrency = int(fields[2].value.strip() or "1")
        self.model_ref = model_ref
        format_value = str(self._plan_format.value)
        self._say(f"Planning {model_ref}…")
        self._run_plan(model_ref, context, concurrency, format_value)

    @work(group="plan", exclusive=True, exit_on_error=False, description="Planning")
    async def _run_plan(
        self, model_ref: str, context: int | None, concurrency: int, format: str
    ) -> None:
        """The `plan` step's outcome from the feed (the core plans; this lays it out)."""
        from llmgw_core.script.steps.plan import PlanArgs

        try:
            given = {"model": model_ref, "context": context, "concurrency": concurrency}
            args = PlanArgs.model_validate({**given, "format": format})
            outcome = await self.console_app.feed.plan(args)
        except LlmgwError as error:
            self._say(str(error), error=True)
            return
        except ValueError as error:  # pydantic's: a field the step refuses
            self._say(f"Not planned: {error}", error=True)
            return
        self.show_plan(plan_body(outcome))

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """A plan that died of an unexpected error says so here too (the app notifies)."""
        if event.worker.group == "plan" and event.state == WorkerState.ERROR:
            self._say(f"Planning stopped: {event.worker.error}", error=True)

    def _say(self, sentence: str, *, error: bool = False) -> None:
        status = self._plan_status
        status.update(sentence)
        status.set_class(error, "-error")

    def _now(self, way: dict[str, Any]) -> Text:
        free = way["free_now"]
        return Text(
            "free" if free else "busy",
            style=theme_style(self.app, "success" if free else "warning"),
        )

    def show_plan(self, body: dict[str, Any]) -> None:
        """Lay out a plan result."""
        planned = f"{body['model']}: planned for a {body['context']}-token context"
        if body["concurrency"] > 1:
            planned += f" × {body['concurrency']} sequences"
        self._plan_context.value = str(body["context"])
        self._say(planned if body["best"] else body["does_not_fit"], error=not body["best"])
        self._show_files(body)
        self._show_best(body)
        self._show_ways(body)
        for table in self.query(DataTable):
            self.call_after_refresh(redraw_table, table)

    def _show_files(self, body: dict[str, Any]) -> None:
        table = self._plan_files
        table.clear()
        for artifact in body["artifacts"]:
            size = artifact["size_gib"]
            size_text = f"{size:.0f} GB" if size >= 10 else f"{size:.1f} GB"
            best = artifact["best"]
            if best is None:
                nowhere = Text("fits nowhere", style=theme_style(self.app, "error"))
                table.add_row(plain(artifact["name"]), plain(size_text), nowhere, "", "", "", "")
                continue
            on_cpu = best["on_cpu"]
            table.add_row(
                plain(artifact["name"]),
                plain(size_text),
                plain(f"{best['label']} ({best['layout']})"),
                plain(f"{best['per_card_gib']:.1f} GB" + (" of RAM" if on_cpu else "")),
                plain(f"{best['usable_gib']:.0f} GB"),
                plain("-" if on_cpu else f"{best['total_gib']:.0f} GB"),
                self._now(best),
            )

    def _show_best(self, body: dict[str, Any]) -> None:
        best = body["best"]
        bar = self._plan_bar
        if best is None:
            self._plan_best.update("\n".join(f"  - {line}" for line in body["advice"]))
            bar.display = False
            self._plan_context_line.update("")
            self._plan_serve.update("")
            return
        bar.display = True
        self._plan_best.update(
            f"Best: {best['artifact']} on {best['label']} ({best['layout']}): {best['memory']}."
        )
        bar.show(best["weights_gib"], best["context_gib"], best["engine_gib"], best["usable_gib"])
        line = f"Context costs {best['context_gib_per_1k_tokens']:.2f} GB per 1000 tokens a card"
        if best["max_concurrency"] is not None:
            line += f"; {best['max_concurrency']:.1f} sequences of {body['context']} tokens fit"
        self._plan_context_line.update(line + ".")
        self._plan_serve.update(f"Serve it:\n  {best['serve']}")

    def _show_ways(self, body: dict[str, Any]) -> None:
        table = self._plan_ways
        table.clear()
        for way in body["options"]:
            parts = (way.get("parts") or "").replace(" + ", "+") or (
                f"{way['weights_gib']:.1f}+{way['context_gib']:.1f}+{way['engine_gib']:.1f}"
            )
            table.add_row(
                plain(way["artifact"]),
                plain(way["label"]),
                plain(way["layout"]),
                plain(short_where(way)),
                plain(f"{way['per_card_gib']:.1f} GB"),
                plain(parts),
                plain(f"{way['usable_gib']:.0f} GB"),
                self._now(way),
            )
