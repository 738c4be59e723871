"""Serve a model: a wizard from a model name to a replica answering, every step by keyboard.

model → file and way → context and concurrency → fallbacks, env and name →
confirm (the exact commands and environment per node) → submit. Each page
says why "Next" is greyed out; every figure is the planner's, every command
the core's preview. Submitting runs `serve` in a worker and shows the
replicas screen on the new replica as it comes up.

This screen is the flow: the page shown, why Next is greyed out, Back and
Next, and the workers that ask the feed (plan, preview, serve, apply). Each
page is a widget of `llmgw_tui.screens.serve_pages` that draws and reads its
own fields.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, cast

from textual import events, on, work
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal
from textual.reactive import var
from textual.widgets import Button, ContentSwitcher, DataTable, Input, Static

from llmgw_core.errors import LlmgwError
from llmgw_tui.feed.protocol import plan_body
from llmgw_tui.fields import env_lines, reason
from llmgw_tui.kept_screen import KeptScreen
from llmgw_tui.messages import OpenReplica, PreviewRead
from llmgw_tui.screens.serve_pages import (
    GATEWAY_NAME,
    ConfirmPage,
    ExtrasPage,
    ModelPage,
    SizePage,
    WayPage,
    catalog_refs,
    confirm_text,
)
from llmgw_tui.widgets.footer import SteadyFooter
from llmgw_tui.widgets.header import TitleBar

if TYPE_CHECKING:
    from llmgw_core.script.steps.serve import ServeArgs
    from llmgw_core.serve.prepare import ServePreview
    from llmgw_core.service.spec import ServiceDoc

# The serving modules (SSH, engines) are imported when a step needs them, so the
# console's first frame never waits for them.

STEPS = ("model", "way", "size", "extras", "confirm")
STEP_TITLES = {
    "model": "1 · Model",
    "way": "2 · File and way",
    "size": "3 · Context and concurrency",
    "extras": "4 · Fallbacks, environment, name",
    "confirm": "5 · Confirm",
}
FIRST_FIELD = {
    "model": "#serve-model",
    "way": "#serve-ways",
    "size": "#serve-context",
    "extras": "#serve-fallbacks",
    "confirm": "#serve-gateway",
}
"""What each page focuses when shown (Confirm: the checkbox, so `q`, digits and `?` keep
their meaning there and Enter serves)."""


class ServeScreen(KeptScreen[None]):
    """The Serve a model wizard."""

    BINDING_GROUP_TITLE = "Serve"
    AUTO_FOCUS = ""
    """Textual's auto focus takes the first focusable widget, on a hidden page too; each page
    focuses its own first field (`FIRST_FIELD`), also when the wizard is shown again."""
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("ctrl+n", "next", "Next", id="serve-next"),
        Binding("ctrl+b", "back", "Back", id="serve-back"),
        Binding("enter", "next", "Next (on Confirm: serve)", show=False, id="serve-enter"),
        Binding("escape", "toggle_field", "Field", show=False, id="serve-field"),
        Binding("ctrl+s", "save_service", "Save as a service", show=False, id="serve-save"),
    ]
    QUIT_AGAIN_S = 5.0
    """How long a second `q` quits after the first was held back."""

    step: var[str] = var("model", init=False)
    """The page shown (one of `STEPS`): setting it shows it (`watch_step`)."""
    blocked: var[str | None] = var("type a model", init=False)
    """Why Next is greyed out, None when it may be pressed: setting it draws it."""

    def __init__(self) -> None:
        super().__init__()
        self._quit_asked_at: float | None = None
        """When a `q` out of a field was held back (a second one soon after quits)."""
        self.plan_body: dict[str, Any] | None = None
        self.way: dict[str, Any] | None = None
        self.preview: Any = None
        self._size_checked = False
        self.last_served: str | None = None
        """The model of the last replica this wizard served (offered first, visibly)."""
        self.left_fields = False
        """Escape left the fields: shown again (help closed), the wizard does not go back in."""

    def compose(self) -> ComposeResult:
        """One page per step in a switcher; the reason line and Back / Next under it."""
        yield TitleBar(icon="▦")
        self._serve_step = Static("", id="serve-step", classes="status", markup=False)
        yield self._serve_step
        with ContentSwitcher(initial="model", id="serve-pages") as self._serve_pages:
            self._model_page = ModelPage(id="model")
            yield self._model_page
            self._way_page = WayPage(id="way")
            yield self._way_page
            self._size_page = SizePage(id="size")
            yield self._size_page
            self._extras_page = ExtrasPage(id="extras")
            yield self._extras_page
            self._confirm_page = ConfirmPage(id="confirm")
            yield self._confirm_page
        with Horizontal(id="serve-buttons", classes="buttons"):
            self._serve_reason = Static("", id="serve-reason", markup=False)
            yield self._serve_reason
            yield Button("Back", id="serve-back-button")
            self._serve_next_button = Button("Next", id="serve-next-button", variant="primary")
            yield self._serve_next_button
        yield SteadyFooter()

    def on_mount(self) -> None:
        """The model field first; no blinking cursors."""
        self.title = "llmgw"
        self.sub_title = "serve a model"
        for field in self.query(Input):
            field.cursor_blink = False
        self._show_step()
        self._focus_first()
        self._model_page.offer_clusters(self.console_app.feed.cluster_names())

    def on_screen_resume(self, event: events.ScreenResume) -> None:
        """Shown again with nothing focused: the page's first field, unless Escape left the
        fields (help or a palette opened and closed over the page keeps the keys the
        console's, as they were).

        (Textual calls `KeptScreen`'s handler too, after this one: not called here.)
        """
        if self.focused is None and not self.left_fields:
            self._focus_page()

    # --- the pages -------------------------------------------------------------------------

    def watch_step(self) -> None:
        """Show the page, and Next's state and label for it."""
        self._show_step()

    def watch_blocked(self, reason: str | None) -> None:
        """Grey out Next with the reason, or let it be pressed."""
        self._draw_block(reason)

    def _show_step(self) -> None:
        pages = self._serve_pages
        focused = self.focused
        if (
            focused is not None
            and pages in focused.ancestors
            and self.step not in {node.id for node in focused.ancestors}
        ):
            self.set_focus(None)  # a hidden page never holds the focus (its keys would be text)
        pages.current = self.step
        self._serve_step.update(
            "  ".join(f"[{STEP_TITLES[s]}]" if s == self.step else STEP_TITLES[s] for s in STEPS)
        )
        self._draw_block(self.blocked)

    def _block(self, reason: str | None) -> None:
        """Grey out Next with the reason, or let it be pressed."""
        self.blocked = reason

    def _draw_block(self, reason: str | None) -> None:
        button = self._serve_next_button
        button.disabled = reason is not None
        button.label = "Serve" if self.step == "confirm" else "Next"
        line = self._serve_reason
        line.update(f"Next: {reason}" if reason else "")
        line.set_class(reason is not None, "-error")

    def _focus_page(self) -> None:
        # The page is shown at the next refresh; a hidden field cannot take the focus.
        self.call_after_refresh(self._focus_first)

    def _focus_first(self) -> None:
        # At once, not `widget.focus()`, which Textual defers to a later message: a ctrl+b
        # queued before it would move the page on and leave the focus on the hidden one.
        self.left_fields = False
        self.set_focus(self.query_one(FIRST_FIELD[self.step]))

    def quit_held(self) -> bool:
        """`q` out of a field quits, unless the wizard holds what was typed: then it says so
        and a second `q` quits (a stray key does not throw the entries away)."""
        import time

        asked = self._quit_asked_at
        if (not self.model_ref and self.step == STEPS[0]) or (
            asked is not None and time.monotonic() - asked < self.QUIT_AGAIN_S
        ):
            return False
        self._quit_asked_at = time.monotonic()
        self.notify(
            "q again quits, and what the wizard holds is lost; 1 goes to the fleet and keeps it",
            title="Serve",
            severity="warning",
            timeout=self.QUIT_AGAIN_S,
        )
        return True

    def action_toggle_field(self) -> None:
        """Leave the field (digits, `?` and `q` are the console's keys again), or go back to it."""
        if isinstance(self.focused, Input):
            self.left_fields = True
            self.set_focus(None)
        else:
            self._focus_first()

    def action_back(self) -> None:
        """The previous page."""
        index = STEPS.index(self.step)
        if index:
            self.blocked = None
            self.step = STEPS[index - 1]
            self._focus_page()

    async def action_next(self) -> None:
        """The next page (or submit on the last), when nothing blocks it."""
        if self.blocked is not None:
            self.notify(self.blocked, title="Serve", severity="warning")
            return
        if self.step == "model":
            self._block("planning…")
            self.plan_ways(self.model_ref, None, 1)
        elif self.step == "way":
            self._go("size", None if self._size_checked else "checking…")
            if self.plan_body is not None:
                self._size_page.offer_context(self.plan_body["context"])
                self.check_size()
        elif self.step == "size":
            if self.plan_body is not None:  # the name `serve` would give
                self._extras_page.offer_name(str(self.plan_body["replica_name"]))
            self._go("extras", None)
            self._extras_page.offer_flags((self.way or {}).get("engine"))
            self._check_extras()
        elif self.step == "extras":
            args = self._args_or_block()
            if args is not None:
                self._go("confirm", "building the commands…")
                self._confirm_page.say("")
                self.preview_commands(args)
        else:
            args = self._args_or_block()
            if args is not None:
                self.submit(args, self._confirm_page.behind_gateway)
                self.start_fresh()

    def _args_or_block(self) -> ServeArgs | None:
        """The `serve` step's arguments the pages make, or None with Next greyed out by why."""
        try:
            return self.serve_args()
        except (LlmgwError, ValueError) as exc:  # ValueError: a number field not yet a number
            self._block(exc.sentence() if isinstance(exc, LlmgwError) else str(exc))
            return None

    def start_fresh(self) -> None:
        """Page 1 again with every field as new: `5` after a serve starts another replica.

        The model just served is offered (its name on the page and as the
        first completion); nothing else is carried over.
        """
        self.last_served = self.model_ref or self.last_served
        self._model_page.reset(self.last_served)
        self._way_page.reset()
        self._size_page.reset()
        self._extras_page.reset()
        self._confirm_page.reset()
        self.plan_body = self.way = self.preview = None
        self._size_checked = False
        self._go("model", "type a model")

    def _go(self, step: str, blocked: str | None) -> None:
        self.blocked = blocked
        self.step = step
        self._focus_page()

    @on(Button.Pressed, "#serve-next-button")
    async def _next_pressed(self) -> None:
        await self.action_next()

    @on(Button.Pressed, "#serve-back-button")
    def _back_pressed(self) -> None:
        self.action_back()

    @on(Input.Submitted)
    async def _field_submitted(self, event: Input.Submitted) -> None:
        if self.step not in {node.id for node in event.input.ancestors}:
            return  # a field of another page (it holds no focus once hidden)
        why = reason(event.input)
        if why is not None:
            self._block(why)
            self.notify(why, title="Serve", severity="warning")
            return
        await self.action_next()

    @property
    def model_ref(self) -> str:
        """The model as typed."""
        return self._model_page.model_ref

    @on(Input.Changed, "#serve-model, #serve-place")
    def _model_changed(self, event: Input.Changed) -> None:
        if self.step == "model":
            self._model_page.offer_clusters(self.console_app.feed.cluster_names())
            model = self._model_page.query_one("#serve-model", Input)
            place = self._model_page.query_one("#serve-place", Input)
            typed = model.value.strip()
            self._block(
                (reason(model) if typed else "type a model")
                or (reason(place) if place.value.strip() else None)
            )

    # --- planning --------------------------------------------------------------------------

    @work(group="serve-plan", exclusive=True, exit_on_error=False, description="Plan")
    async def plan_ways(self, model_ref: str, context: int | None, concurrency: int) -> None:
        """Plan the model as the `plan` step does (the feed asks the core), then the ways page."""
        try:
            body = await self._planned(model_ref, context, concurrency)
        except LlmgwError as exc:
            self._block(exc.sentence())
            return
        self._show_ways(body)

    async def _planned(
        self, model_ref: str, context: int | None, concurrency: int
    ) -> dict[str, Any]:
        """The `plan` step's result for the wizard's model (every file), from the feed.

        Raises:
            LlmgwError: the step's refusal (an unknown model, no files to plan, a bad field).
        """
        from pydantic import ValidationError

        from llmgw_core.errors import BadInput
        from llmgw_core.script.steps.plan import PlanArgs

        try:
            args = PlanArgs(
                model=model_ref,
                context=context,
                concurrency=concurrency,
                cluster=self._model_page.place,
            )
        except ValidationError as exc:
            raise BadInput(str(exc.errors()[0]["msg"])) from None
        return plan_body(await self.console_app.feed.plan(args))

    def _show_ways(self, body: dict[str, Any]) -> None:
        self.plan_body = body
        self._size_checked = False
        self._way_page.show(body)
        if not body["options"]:
            self._block(body["does_not_fit"] or "no way fits this fleet")
            return
        self.way = body["options"][0]
        self._go("way", None)
        self._way_page.pick_first()

    @on(DataTable.RowHighlighted, "#serve-ways")
    def _way_moved(self, event: DataTable.RowHighlighted) -> None:
        if self.plan_body is None or self.step != "way":
            return
        self.way = self.plan_body["options"][event.cursor_row]
        self._block(None if self.way["free_now"] else f"{self.way['label']} is busy now")

    @on(DataTable.RowSelected, "#serve-ways")
    async def _way_chosen(self) -> None:
        await self.action_next()

    @on(Input.Changed, "#serve-context, #serve-concurrency")
    def _size_changed(self) -> None:
        if self.step == "size":
            self.check_size()

    def check_size(self) -> None:
        """Plan again for the context and concurrency typed; the chosen way must still fit."""
        typed = self._size_page.typed()
        if typed is None:
            self._block(self._size_page.refusal())
            return
        self._block("checking…")
        self.replan_size(self.model_ref, *typed)

    @work(group="serve-size", exclusive=True, exit_on_error=False, description="Fit")
    async def replan_size(self, model_ref: str, context: int, concurrency: int) -> None:
        """Whether the chosen way holds `context` × `concurrency` (the planner's figure)."""
        try:
            body = await self._planned(model_ref, context, concurrency)
        except LlmgwError as exc:
            self._size_result(None, exc.sentence(), (context, concurrency))
            return
        self._size_result(body, None, (context, concurrency))

    def _size_result(
        self, body: dict[str, Any] | None, error: str | None, asked: tuple[int, int]
    ) -> None:
        page = self._size_page
        if self.step != "size" or asked != page.typed():
            return  # an answer for values no longer typed: it must not clear a refusal
        if body is None or self.way is None:
            page.say(error or "")
            self._block(error or "pick a way first")
            return
        same, line = page.show_fit(body, self.way)
        if same is None:
            self._block(line)
            return
        self.way = same
        self._size_checked = True
        self._block(None)

    @on(
        Input.Changed,
        "#serve-fallbacks, #serve-env, #serve-flags, #serve-adapters, #serve-key, #serve-name",
    )
    def _extras_changed(self) -> None:
        if self.step == "extras":
            self._check_extras()

    def _check_extras(self) -> None:
        self._block(self._extras_page.refusal())

    # --- confirm and submit ----------------------------------------------------------------

    def serve_args(self) -> ServeArgs:
        """What the pages say, as the arguments the `serve` step takes: the feed turns them
        into its request (`serve_request`) as a script's would be.

        Raises:
            LlmgwError: a field the step refuses, in its words.
        """
        from llmgw_core.arguments import checked_args
        from llmgw_core.script.steps.serve import ServeArgs
        from llmgw_core.serve.choice import way_layout

        given: dict[str, Any] = {
            "model": self.model_ref,
            **self._size_page.args(),
            **way_layout(self.way or {}),
            **self._extras_page.args(),
        }
        if self._model_page.place is not None:
            given["cluster"] = self._model_page.place  # the replica is one job there
        return checked_args(ServeArgs, given)

    @work(group="serve-preview", exclusive=True, exit_on_error=False, description="Preview")
    async def preview_commands(self, args: ServeArgs) -> None:
        """The exact commands and environment per node: the `serve` step's dry run of `args`."""
        from llmgw_core.errors import AdapterRefused

        try:
            preview = await self.console_app.feed.preview(args)
        except AdapterRefused as exc:
            typed = self._extras_page.adapters_typed()
            self.post_message(PreviewRead(error=exc.sentence(), adapters=typed))
            return
        except LlmgwError as exc:
            self.post_message(PreviewRead(error=exc.sentence()))
            return
        self.post_message(PreviewRead((args, preview)))

    def on_preview_read(self, read: PreviewRead) -> None:
        """Draw the commands per node (or why there are none), and let Next be pressed or not."""
        page = self._confirm_page
        if read.adapters is not None and read.error is not None and self.step == "confirm":
            # Their files say no: the reason goes on the adapters field, where they are typed.
            self._extras_page.refuse_adapters(read.adapters, read.error)
            self._go("extras", read.error)
            return
        if read.error is not None:
            page.say(read.error)
            self._block(read.error)
            return
        args, preview = cast("tuple[ServeArgs, ServePreview | None]", read.found)
        page.show(args, preview, self.way or {})
        if preview is None:  # a feed that cannot say: the way's own words are shown
            self._block(None)
            return
        self.preview = preview
        self._block(preview.reason)

    def action_save_service(self) -> None:
        """On Confirm: save what it would serve as a service document here, and apply it."""
        from pydantic import ValidationError

        from llmgw_core.service.spec import doc_of_args, document_text

        if self.step != "confirm" or self.blocked is not None:
            why = self.blocked or "a service is saved from the Confirm page"
            self.notify(why, title="Service", severity="warning")
            return
        args = self._args_or_block()
        if args is None:
            return
        name = self._replica_name(args)
        gateway = GATEWAY_NAME if self._confirm_page.behind_gateway else None
        try:
            doc = doc_of_args(args, name=name, gateway=gateway)
        except ValidationError as exc:
            self.notify(str(exc.errors()[0]["msg"]), title="Service", severity="error")
            return
        path = Path.cwd() / f"{name}.service.yaml"
        refusal = overwrite_refusal(path, name)
        if refusal is not None:
            self.notify(refusal, title="Service", severity="error", timeout=15)
            return
        try:
            path.write_text(document_text(doc), encoding="utf-8")
        except OSError as exc:
            self.notify(
                f"{path} cannot be written: {exc.strerror or exc}",
                title="Service",
                severity="error",
                timeout=15,
            )
            return
        self.apply_saved(doc, path)
        self.start_fresh()

    def _replica_name(self, args: ServeArgs) -> str:
        """The name typed, else the one `serve` gives (the plan says it)."""
        return args.name or str((self.plan_body or {}).get("replica_name") or "replica")

    @work(group="serve-apply", exit_on_error=False, description="Applying")
    async def apply_saved(self, doc: ServiceDoc, path: Path) -> None:
        """Apply the saved service as the `apply` step would, and say what it changed."""
        from llmgw_core.service.spec import Action

        self.notify(f"saved {path}; applying service {doc.name}…", title="Service")
        try:
            result = await self.console_app.feed.apply_service(doc)
        except LlmgwError as exc:
            self.notify(exc.sentence(), title="Service", severity="error", timeout=15)
            return
        lines = [Action.of_dict(action).line() for action in result.get("actions") or []]
        said = "; ".join(lines) or "nothing to change"
        if result.get("failed"):
            self.notify(
                f"{said} — {result['failed']}",
                title=f"Service {doc.name}",
                severity="error",
                timeout=15,
            )
            return
        self.notify(said, title=f"Service {doc.name}", timeout=10)
        started = [r["name"] for r in result.get("replicas") or []]
        if started:
            self.post_message(OpenReplica(started[-1]))

    @work(group="serve-submit", exit_on_error=False, description="Serving")
    async def submit(self, args: ServeArgs, behind_gateway: bool) -> None:
        """Run `serve`, show the replicas screen on it at once, and say how it ended."""
        feed = self.console_app.feed
        name = self._replica_name(args)
        self.notify(f"Serving {name}…", title="Serve")
        self.post_message(OpenReplica(name))
        try:
            outcome = await feed.serve(args)
        except LlmgwError as exc:
            self.notify(exc.sentence(), title="Serve", severity="error", timeout=15)
            return
        if outcome.phase == "ready":
            self.notify(f"{outcome.name} is ready.", title="Serve")
            if behind_gateway:
                await self._put_behind_gateway(feed, args.api_key_env)
        else:
            self.notify(
                f"{outcome.name} did not come up: {outcome.reason}",
                title="Serve",
                severity="error",
                timeout=15,
            )

    async def _put_behind_gateway(self, feed: Any, api_key_env: str | None) -> None:
        """Start the wizard's gateway, keyed as the replica is (or make the running one take
        the new replica)."""
        try:
            gateway = await feed.put_behind_gateway(GATEWAY_NAME, api_key_env)
        except LlmgwError as exc:
            self.notify(exc.sentence(), title="Gateway", severity="error", timeout=15)
            return
        self.notify(
            f"gateway {gateway['name']} at {gateway['address']}: "
            f"{len(gateway['workers'])} worker(s) behind it",
            title="Gateway",
        )
        for warning in gateway.get("warnings") or ():
            self.notify(warning, title="Gateway", severity="warning", timeout=20)


def overwrite_refusal(path: Path, name: str) -> str | None:
    """Why the wizard may not write service `name` to `path`: only a missing file, or the same
    service's own document (saved before, now changed), is written over; anything else is
    the operator's and is kept. The file is read as `apply` reads one (`read_service_file`)."""
    from llmgw_core.script.steps.apply import read_service_file

    if not path.exists():
        return None
    try:
        if read_service_file(path).name == name:
            return None
    except LlmgwError:
        pass
    return f"{path} exists and is not service {name}'s document: move it, or name the replica otherwise"


__all__ = ["ServeScreen", "catalog_refs", "confirm_text", "env_lines"]
