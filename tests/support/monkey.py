"""A seeded monkey for the console: random episodes of keys, text and pastes, with invariants.

An episode is Escape, a mode key (or `:` and a command, or `?`), then keys
the screens bind and text typed into whatever has the focus: hostile values
included (`A=B=C`, `nan`, `1e309`, `../../etc`, right-to-left marks, 300
characters). After every key the console must still run, nothing may have
reached its guard (`LlmgwApp.guard`: a handler that raised) and no hidden
widget may hold the focus. A failing seed is named so it can be replayed:
`replay(app_factory, seed, keys)`.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from textual import events
from textual.widget import Widget

from llmgw_tui.app import LlmgwApp

MODE_KEYS = ("1", "2", "3", "4", "5", "6")
SCREEN_KEYS = (
    "enter", "escape", "tab", "shift+tab", "up", "down", "left", "right", "pageup", "pagedown",
    "home", "end", "space", "backspace", "ctrl+n", "ctrl+b", "ctrl+r", "slash", "question_mark",
    "a", "b", "d", "f", "g", "l", "r", "s", "t", "w", "W", "x", "y", "n",
)  # fmt: skip
"""Every key a screen binds (but `q`, which leaves) and the keys that move the focus."""
HOSTILE_TEXT = (
    "A=B=C",
    "nan",
    "1e309",
    "-1",
    "0",
    "99999999999999999999999999999999",
    "../../etc",
    "/",
    "~/",
    "NCCL_DEBUG=INFO",
    "HF_TOKEN=hf_x",
    "CUDA_VISIBLE_DEVICES=0",
    "nope",
    "catalog:meta-llama/Llama-3.1-8B-Instruct",
    "catalog:nobody/nothing",
    "\u202etxt.exe",
    "x\u2067y",
    "node h100-a-01",
    "fabric h100-a-01 h100-a-01",
    "logs nobody r9",
    "plan catalog:meta-llama/Llama-3.3-70B-Instruct",
    "doctor nobody",
    "é" * 40,
    "x" * 300,
    "'; rm -rf ~ #",
    "$(reboot)",
    "8192",
    "16",
)
WIZARD_MODELS = ("catalog:meta-llama/Llama-3.1-8B-Instruct", "catalog:Qwen/Qwen2.5-7B-Instruct")
PLANNING = ("serve-plan", "serve-size", "serve-preview")
"""The wizard's workers a `wait` waits for (the fleet's poller and the logs' readers never end)."""
COMMANDS = (
    "racks",
    "node h100-a-01",
    "replicas",
    "serve",
    "plan",
    "gw",
    "doctor",
    "help",
    "logs nobody r1",
    "logs gateway front",
    "fabric h100-a-01 h100-a-02",
)


@dataclass
class MonkeyRun:
    """What one seed did: keys pressed, the screens and wizard pages it reached."""

    seed: int
    keys: list[str] = field(default_factory=list)
    screens: set[str] = field(default_factory=set)
    wizard_pages: set[str] = field(default_factory=set)


def hidden(widget: Widget) -> bool:
    """Whether `widget` or one of its containers is not displayed."""
    node: object = widget
    while isinstance(node, Widget):
        if not node.display:
            return True
        node = node.parent
    return False


def episode(rng: random.Random) -> list[str | tuple[str, str]]:
    """One episode: a way onto a screen, then keys, typed text and pastes."""
    start: list[str | tuple[str, str]] = ["escape"]
    opening = rng.random()
    if opening < 0.25:  # through the wizard with a model that plans, hostile values on each page
        start += ["5", ("type", rng.choice(WIZARD_MODELS)), "enter", ("wait", "")]
        for _ in range(rng.randint(1, 5)):
            if rng.random() < 0.5:
                start.append(("type", rng.choice(HOSTILE_TEXT)))
            start += [rng.choice(("ctrl+n", "ctrl+n", "enter", "tab", "ctrl+b")), ("wait", "")]
    elif opening < 0.7:
        start.append(rng.choice(MODE_KEYS))
    elif opening < 0.85:
        start += ["colon", ("type", rng.choice(COMMANDS)), "enter"]
    else:
        start.append("question_mark")
    for _ in range(rng.randint(4, 12)):
        roll = rng.random()
        if roll < 0.55:
            start.append(rng.choice(SCREEN_KEYS))
        elif roll < 0.85:
            start.append(("type", rng.choice(HOSTILE_TEXT)))
        else:
            start.append(("paste", rng.choice(HOSTILE_TEXT)))
    return start


async def run_monkey(app: LlmgwApp, pilot, seed: int, keys: int) -> MonkeyRun:
    """Drive `app` with `keys` keys (a typed character is one, a paste one) from `seed`; raise AssertionError naming the seed and key."""
    from llmgw_tui.screens.serve import ServeScreen

    rng = random.Random(seed)
    run = MonkeyRun(seed)
    while len(run.keys) < keys:
        for action in episode(rng):
            if isinstance(action, tuple):
                kind, text = action
                if kind == "wait":  # for what the last key started (a plan in a thread)
                    for _ in range(600):
                        if not any(w.group in PLANNING and w.is_running for w in app.workers):
                            break
                        await pilot.pause(0.05)
                elif kind == "type":
                    typed = text[: keys - len(run.keys)]
                    for char in typed:
                        await pilot.press(char)  # Pilot names each character's key
                        run.keys.append(f"type:{char!r}")
                        check(app, run)
                else:
                    target = app.focused or app.screen
                    target.post_message(events.Paste(text))
                    await pilot.pause()
                    run.keys.append(f"paste:{text!r}")
            else:
                await pilot.press(action)
                run.keys.append(action)
            check(app, run)
            run.screens.add(type(app.screen).__name__)
            if isinstance(app.screen, ServeScreen):
                run.wizard_pages.add(app.screen.step)
            if len(run.keys) >= keys:
                break
    return run


def check(app: LlmgwApp, run: MonkeyRun) -> None:
    """The invariants after each key; the seed and the last keys are in the message."""
    where = f"seed {run.seed}, after key {len(run.keys)} ({run.keys[-3:]})"
    assert app.is_running and app.return_code is None, f"the console ended: {where}"
    guard = getattr(app, "guard", None)  # None: a console from before the guard (replays)
    caught = [f"{c.kind}: {c.sentence}" for c in guard.caught] if guard is not None else []
    assert not caught, f"a handler raised ({caught[0]}): {where}"
    focused = app.focused
    if focused is not None and hidden(focused):
        chain = [f"{type(n).__name__}#{n.id}:{n.display}" for n in [focused, *focused.ancestors]]
        state = f" step {getattr(app.screen, 'step', None)}"
        raise AssertionError(
            f"hidden {focused!r} has the focus ({' < '.join(chain)}){state}: {where}"
        )
