"""The logs screen: batched lines, the NET/Socket banner, filter, the N-new-lines badge, save."""

from __future__ import annotations

import asyncio

from live_walk import until
from textual.widgets import Log, Static

from llmgw_tui.log_lines import LogLines, strip_ansi
from llmgw_tui.screens.logs import LogsScreen

SOCKET_LOG_NAME = (
    "nccl-debug-info_all_reduce_perf_a100-sxm4-80gb_2gpu_container_socket-fallback.txt"
)


def test_colour_escapes_are_stripped_from_engine_lines():
    assert strip_ansi("\x1b[32mINFO\x1b[0m ready\r\n") == "INFO ready"


def test_a_socket_fallback_is_seen_in_a_real_nccl_run(hardware_dir):
    lines = LogLines()
    lines.add((hardware_dir / SOCKET_LOG_NAME).read_text().splitlines(), 0.0)
    lines.take()
    assert lines.socket_fallback("llama", 2).startswith("llama: NCCL fell back to TCP sockets")


async def _open(app, pilot) -> LogsScreen:
    await pilot.press("colon", *"logs llama-405b", "enter")

    def read_and_drawn() -> bool:  # every shard's lines read, and the last of them flushed
        screen = app.screen
        return (
            isinstance(screen, LogsScreen)
            and screen.stream_ended is not None
            and not screen.lines.pending
        )

    await until(pilot, read_and_drawn, "the replica's log read and drawn", 10)
    screen = app.screen
    assert isinstance(screen, LogsScreen)
    return screen


def test_logs_merge_both_ranks_filter_count_new_lines_when_scrolled_up_and_save(
    replica_app, tmp_path
):
    async def run() -> None:
        app = replica_app()
        async with app.run_test(size=(120, 40)) as pilot:
            screen = await _open(app, pilot)
            log = screen.query_one("#log", Log)
            assert screen.lines.seen == 120
            assert log.line_count == 120 and log.lines[0].startswith("[r0 h100-a-01] ")
            assert screen.query_one("#nccl-banner", Static).display

            await pilot.press("slash", *"NET/Socket")
            await pilot.pause()
            assert 0 < log.line_count < 120
            assert all("net/socket" in line.lower() for line in log.lines)
            await pilot.press("escape")
            await pilot.pause()
            assert log.line_count == 120

            log.scroll_home(animate=False)
            await pilot.pause()
            screen.lines.add([f"new line {i}" for i in range(7)], 0.0)
            badge = screen.query_one("#new-lines", Static)
            await until(pilot, lambda: badge.display, "the new-lines badge", 10)
            assert badge.display and "7 new lines" in str(badge.content)
            await pilot.press("end")
            await pilot.pause()
            assert not badge.display

            await pilot.press("W")
            await pilot.pause()
            assert log.line_count > 127 and max(len(line) for line in log.lines) < 120
            await pilot.press("W", "t")
            await pilot.pause()
            assert log.line_count == 127 and log.lines[0][2] == ":" and log.lines[0][5] == ":"
            await pilot.press("t")
            await pilot.pause()

            await pilot.press("w")
            field = screen.query_one("#logs-save-input")
            field.value = str(tmp_path / "saved.log")
            await pilot.press("enter")
            await pilot.pause()
            saved = (tmp_path / "saved.log").read_text().splitlines()
            assert len(saved) == 127 and saved[-1] == "new line 6"

    asyncio.run(run())


def test_nccl_on_a_socket_within_one_node_is_no_fallback_and_shows_no_banner():
    lines = LogLines()
    prefix = "gpu-01:1:1 [0] NCCL INFO "
    lines.add(
        [
            prefix + "NET/Socket : Using [0]eth0:10.0.0.1<0>",
            prefix + "Using network Socket",
            prefix + "comm 0x7f rank 0 nRanks 4 nNodes 1 localRanks 4 localRank 0 MNNVL 0",
        ],
        0.0,
    )
    lines.take()
    assert lines.socket_fallback("llama", 1) is None


def test_logs_gateway_name_opens_a_gateways_log_and_a_fixed_fleet_says_it_runs_none(make_app):
    async def run() -> None:
        app = make_app()
        async with app.run_test(size=(120, 40)) as pilot:
            await pilot.press("colon", *"logs gateway front", "enter")
            for _ in range(40):
                await pilot.pause(0.05)
                if isinstance(app.screen, LogsScreen) and app.screen.stream_ended:
                    break
            screen = app.screen
            assert isinstance(screen, LogsScreen) and screen.gateway
            assert screen.sub_title == "logs gateway front"
            status = str(screen.query_one("#logs-status", Static).content)
            assert status.startswith("gateway front · its front · 0 lines")
            assert status.endswith("no gateway is named 'front': a fixed fleet runs no gateway")

    asyncio.run(run())
