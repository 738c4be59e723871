"""The console's theme, its animation level, and the one bridge from theme names to styles.

Every colour the console draws comes from the theme: widgets style themselves
in `.tcss` with `$success`/`$warning`/`$error`, and the few places that build
Rich text by hand (table cells) go through `theme_style`, so a theme swap
recolours everything at once.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any, Literal

from rich.style import Style
from textual.theme import Theme

if TYPE_CHECKING:
    from textual.app import App

AnimationLevel = Literal["none", "basic", "full"]
ANIMATION_ENV = "LLMGW_ANIMATION"
ANIMATION_LEVELS: tuple[AnimationLevel, ...] = ("none", "basic", "full")

LLMGW_THEME = Theme(
    name="llmgw",
    primary="#4fa3e0",
    secondary="#7d8fd6",
    accent="#c792ea",
    success="#59c27a",
    warning="#e0a03a",
    error="#e0584f",
    foreground="#dfe4ea",
    background="#11151b",
    surface="#181e26",
    panel="#222a35",
    dark=True,
)
"""The default theme: a dark background where green, amber and red read as states."""


def animation_level_from_env(default: AnimationLevel = "full") -> AnimationLevel:
    """The animation level `LLMGW_ANIMATION` asks for (`none`, `basic`, `full`).

    An unknown value falls back to the default rather than failing: a typo in an
    environment variable should not keep the console from starting.
    """
    value = os.environ.get(ANIMATION_ENV, "").strip().lower()
    for level in ANIMATION_LEVELS:
        if value == level:
            return level
    return default


def theme_style(app: App[object], name: str, *, bold: bool = False) -> Style:
    """A Rich style in the colour the current theme gives `name` (`success`, `error` …)."""
    colour = app.theme_variables.get(name) or app.theme_variables.get("foreground")
    return Style(color=colour, bold=bold)


def use_theme_before_start(app: App[Any], theme: Theme) -> None:
    """Make `theme` the app's theme before it runs, so its first frame is styled once.

    Setting `App.theme` queues a restyle of the whole app with every stylesheet
    parsed again (Textual's theme watcher), which at start-up styles the first
    frame twice. Before the app runs nothing is parsed yet: the stylesheet only
    needs the theme's variables. A theme whose light/dark differs from the
    default's still goes through the watcher (it also swaps the ANSI colours).
    """
    from textual.app import App as TextualApp

    app.register_theme(theme)
    if theme.dark != app.current_theme.dark:
        app.theme = theme.name
        return
    app.set_reactive(TextualApp.theme, theme.name)
    app.stylesheet.set_variables(app.get_css_variables())
    app.set_class(True, f"-theme-{theme.name}", update=False)
