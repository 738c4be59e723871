"""The `plan` step's tables for people, drawn from its JSON result alone.

Figures are GiB, labelled GB as the engines print them. The first table has
one row per file: its size, the best way it runs, what a card holds of what
is usable, what all its cards hold, and whether those cards are free now.
Then the best way in words, what context costs, every way best first, and
the command that would serve it.
"""

from __future__ import annotations

from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

# The console shows this many ways; `--json` always lists them all.
MAX_WAYS_SHOWN = 20


def _way_text(way: dict[str, Any]) -> str:
    return f"{way['label']} ({way['layout']})"


def _files_table(result: dict[str, Any]) -> Table:
    table = Table(box=None, pad_edge=False, header_style="bold")
    for name in ("FILE", "SIZE", "BEST WAY", "A CARD", "OF", "ALL CARDS", "NOW"):
        justify = "right" if name in ("SIZE", "A CARD", "OF", "ALL CARDS") else "left"
        table.add_column(name, justify=justify, no_wrap=name != "BEST WAY")
    for artifact in result["artifacts"]:
        size = (
            f"{artifact['size_gib']:.0f} GB"
            if artifact["size_gib"] >= 10
            else f"{artifact['size_gib']:.1f} GB"
        )
        name = artifact["name"]
        if len(artifact["files"]) > 1 and artifact["format"] == "gguf":
            name += f" ({len(artifact['files'])} parts)"
        best = artifact["best"]
        if best is None:
            table.add_row(name, size, Text("fits nowhere", style="red"), "", "", "", "")
            continue
        now = Text("free", style="green") if best["free_now"] else Text("busy", style="yellow")
        if best["on_cpu"]:
            holds, all_cards = f"{best['per_card_gib']:.1f} GB of RAM", "-"
        else:
            holds, all_cards = f"{best['per_card_gib']:.1f} GB", f"{best['total_gib']:.0f} GB"
        table.add_row(
            name, size, _way_text(best), holds, f"{best['usable_gib']:.0f} GB", all_cards, now
        )
    return table


def _with_adapters(options: list[dict[str, Any]]) -> bool:
    return any(way.get("adapters_gib") for way in options[:MAX_WAYS_SHOWN])


def _parts_words(options: list[dict[str, Any]]) -> str:
    words = "weights + context + engine"
    return words + " + adapters" if _with_adapters(options) else words


def _ways_table(options: list[dict[str, Any]]) -> Table:
    table = Table(box=None, padding=(0, 1, 0, 1), header_style="dim")
    parts_name = "W + C + E + A" if _with_adapters(options) else "W + C + E"
    for name in ("FILE", "WAY", "HOW", "A CARD", parts_name, "OF", "NOW"):
        right = name in ("A CARD", "OF")
        wraps = name in ("WAY", "HOW")
        table.add_column(name, justify="right" if right else "left", no_wrap=not wraps)
    for way in options[:MAX_WAYS_SHOWN]:
        now = Text("free", style="green") if way["free_now"] else Text("busy", style="yellow")
        parts = way.get("parts") or (
            f"{way['weights_gib']:.1f} + {way['context_gib']:.1f} + {way['engine_gib']:.1f}"
        )
        table.add_row(
            way["artifact"],
            way["label"],
            way["layout"],
            f"{way['per_card_gib']:.1f} GB",
            parts,
            f"{way['usable_gib']:.0f} GB",
            now,
        )
    return table


def _heading(result: dict[str, Any]) -> Text:
    shape = result.get("shape") or {}
    parts = [result["model"]]
    details = []
    if shape.get("parameters"):
        details.append(f"{shape['parameters'] / 1e9:.1f}B parameters")
    if shape.get("layers"):
        details.append(f"{shape['layers']} layers")
    if shape.get("kv_heads"):
        details.append(f"{shape['kv_heads']} KV heads")
    if shape.get("experts"):
        details.append(f"{shape['experts']} experts")
    if details:
        parts.append(", ".join(details))
    planned = f"planned for a {result['context']}-token context"
    if result["concurrency"] > 1:
        planned += f" × {result['concurrency']} sequences"
    return Text(": ".join(parts) + "; " + planned, style="bold")


def _context_line(result: dict[str, Any], best: dict[str, Any]) -> str:
    per_card = best["context_gib_per_1k_tokens"]
    text = f"The context costs {per_card:.2f} GB per 1000 tokens on each card"
    whole = result.get("context_gib_per_1k_tokens")
    if whole is not None and best["cards"] > 1:
        text += f" ({whole:.2f} GB for the whole model)"
    if best["max_concurrency"] is not None:
        text += f"; {best['max_concurrency']:.1f} sequences of {result['context']} tokens fit"
    return text + "."


def render(result: dict[str, Any]) -> Group:
    """Draw a plan result: files table, the best way, every way, the command."""
    parts: list[Any] = [_heading(result)]
    if result.get("model_source"):
        parts.append(Text(f"Model facts {result['model_source']}.", style="dim"))
    parts += [Text(""), _files_table(result)]
    best = result.get("best")
    if best is None:
        parts.append(Text(""))
        parts.append(Text("No file fits this fleet as it is.", style="red"))
        for line in result.get("advice", []):
            parts.append(Text(f"  - {line}"))
    else:
        parts.append(Text(""))
        parts.append(Text(f"Best: {best['artifact']} on {_way_text(best)}: {best['memory']}."))
        parts.append(Text(_context_line(result, best)))
        if len(result["options"]) > 1:
            parts += [
                Text(""),
                Text(f"Every way, best first (a card: {_parts_words(result['options'])}):"),
                _ways_table(result["options"]),
            ]
            hidden = len(result["options"]) - MAX_WAYS_SHOWN
            if hidden > 0:
                parts.append(Text(f"  … and {hidden} more (--json lists every way)", style="dim"))
        parts += [Text(""), Text("Serve it:")]
        if best["needs_download"]:
            parts.append(
                Text(
                    f"  # a GGUF file: download it to the node first ({best['source']})",
                    style="dim",
                )
            )
        parts.append(Text("  " + best["serve"]))
        if best["nodes"] > 1:
            where = f"{best['nodes']} nodes of {best['interconnect']}"
            parts.append(Text(f"  # one pipeline stage a node, over {where}", style="dim"))
        for line in result.get("advice", []):
            parts.append(Text(f"To run it now: {line}.", style="yellow"))
    notes = result.get("notes") or []
    if notes:
        parts.append(Text(""))
        parts.extend(Text(f"note: {note}", style="dim") for note in notes)
    return Group(*parts)
