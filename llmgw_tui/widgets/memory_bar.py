"""What one card holds, as a bar: weights, context and engine against the usable memory."""

from __future__ import annotations

from textual.content import Content
from textual.widgets import Static

SEGMENTS = (("weights", "$primary"), ("context", "$accent"), ("engine", "$warning"))
"""Each part of a card's need, in its theme colour."""


def bar_markup(
    weights_gib: float, context_gib: float, engine_gib: float, usable_gib: float, width: int
) -> str:
    """The bar as markup: one cell per `usable/width` GiB, parts in order, the rest dim.

    A need past the usable memory fills the bar and ends in a red mark: it does
    not fit, and the bar says so rather than clipping quietly.
    """
    scale = width / usable_gib if usable_gib > 0 else 0.0
    cells: list[str] = []
    used = 0
    for (_, colour), gib in zip(SEGMENTS, (weights_gib, context_gib, engine_gib), strict=True):
        count = max(0, min(width - used, round(gib * scale)))
        if count:
            cells.append(f"[{colour}]{'█' * count}[/]")
            used += count
    over = weights_gib + context_gib + engine_gib > usable_gib
    if over:
        cells.append("[$error]▌[/]")
    elif used < width:
        cells.append(f"[$panel-lighten-2]{'░' * (width - used)}[/]")
    return "".join(cells)


class MemoryBar(Static):
    """A card's need as a coloured bar with its legend."""

    DEFAULT_CSS = """
    MemoryBar { height: 2; padding: 0 1; }
    """

    def show(
        self,
        weights_gib: float,
        context_gib: float,
        engine_gib: float,
        usable_gib: float,
        *,
        width: int = 60,
    ) -> None:
        """Draw the bar for these figures (GiB, shown as GB)."""
        legend = (
            f"[$primary]■[/] weights {weights_gib:.1f}  [$accent]■[/] context {context_gib:.1f}  "
            f"[$warning]■[/] engine {engine_gib:.1f}  of {usable_gib:.0f} GB usable"
        )
        self.update(
            Content.from_markup(bar_markup(weights_gib, context_gib, engine_gib, usable_gib, width))
            + Content("\n")
            + Content.from_markup(legend)
        )
