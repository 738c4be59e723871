"""The console's first frame, drawn while the fleet is still connecting, shows everything a
user needs: the title, the status line, the table's header and the footer's keys."""

from __future__ import annotations

import asyncio

from textual.widgets import Input

from llmgw_tui.app import LlmgwApp


class Connecting:
    """A fleet still connecting: its first snapshot never arrives during the test."""

    refresh_s = None

    async def snapshot(self) -> None:
        await asyncio.Event().wait()

    async def close(self) -> None:
        pass


def first_frame_text(size: tuple[int, int]) -> tuple[str, bool]:
    """The screen's text at the first pause after start, and whether a filter is mounted."""

    async def run() -> tuple[str, bool]:
        app = LlmgwApp(Connecting(), animation="none")  # type: ignore[arg-type]
        async with app.run_test(size=size) as pilot:
            await pilot.pause()
            text = "\n".join(strip.text for strip in app.screen._compositor.render_strips())
            return text, bool(app.screen.query(Input))

    return asyncio.run(run())


def test_the_first_frame_shows_title_status_table_header_and_footer_keys():
    text, filter_mounted = first_frame_text((120, 40))
    lines = text.splitlines()
    assert "llmgw — fleet" in lines[0]
    assert "connecting to the fleet…" in lines[1]
    assert "NODE" in lines[2] and "CARDS FREE/TOTAL" in lines[2] and "SHARDS" in lines[2]
    for key in (" ⏎ Node page", " / Filter", " r Refresh", " ? Help", " : Command", " 1 Fleet"):
        assert key in lines[-1]
    assert lines[-1].rstrip().endswith("^p Palette")
    assert not filter_mounted, "the hidden filter is mounted only when / is pressed"
