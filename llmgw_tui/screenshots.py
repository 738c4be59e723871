"""Regenerate `screenshots/`: one SVG of every console screen, from the demo fleet.

    python -m llmgw_tui.screenshots [--out screenshots]

The fleet is the demo's, built offline (`llmgw_tui.offline_demo`), and
animation is off, so the pictures change only when the console does.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from llmgw_tui.app import LlmgwApp
from llmgw_tui.feed import StaticFeed
from llmgw_tui.offline_demo import demo_loads, demo_replica_with_logs, offline_demo_state

SHOTS: tuple[tuple[str, tuple[int, int], tuple[str, ...]], ...] = (
    ("fleet", (120, 40), ()),
    ("fleet-80x24", (80, 24), ()),
    ("fleet-filter", (120, 40), ("slash", *"gb200-r1-t1", "enter")),
    ("node-h100", (120, 40), ("enter",)),
    ("node-a100-mig", (120, 40), ("colon", *"node a100-mig-01", "enter")),
    ("node-gb200-tray", (120, 40), ("colon", *"node gb200-r1-t13", "enter")),
    ("racks", (120, 40), ("2",)),
    ("plan", (120, 40), ("colon", *"plan catalog:meta-llama/Llama-3.3-70B-Instruct", "enter")),
    ("help", (120, 40), ("question_mark",)),
    ("command-mode", (120, 40), ("colon", *"node ")),
    ("replicas", (120, 40), ("4",)),
    ("replicas-80x24", (80, 24), ("4",)),
    ("logs", (120, 40), ("colon", *"logs llama-405b", "enter")),
    ("logs-80x24", (80, 24), ("colon", *"logs llama-405b", "enter")),
    ("serve-ways", (120, 40), ("5", *"catalog:meta-llama/Llama-3.3-70B-Instruct", "enter")),
    ("doctor", (120, 40), ("colon", *"doctor", "enter")),
    ("gateways", (120, 40), ("6",)),
)
"""Each picture: its file name, the terminal size, and the keys pressed before it is taken."""


async def _shoot(app: LlmgwApp, size: tuple[int, int], keys: Sequence[str]) -> str:
    async with app.run_test(size=size) as pilot:
        await app.workers.wait_for_complete()
        await pilot.pause()
        await pilot.press(*keys)
        for _ in range(3):
            await pilot.pause()
        for _ in range(40):  # a page that plans or reads in a worker: until it has drawn
            await pilot.pause(0.05)
            if not [w for w in app.workers if w.is_running and w.group != "replicas-poll"]:
                break
        await pilot.pause(0.2)
        return app.export_screenshot(title="llmgw")


def write_screenshots(out: Path) -> list[Path]:
    """Write every screen's SVG into `out`; the paths written."""
    os.environ.pop("NO_COLOR", None)
    out.mkdir(parents=True, exist_ok=True)
    written = []
    with tempfile.TemporaryDirectory(prefix="llmgw-shots-") as captures:
        state, fabrics = offline_demo_state(Path(captures))
        replica, logs = demo_replica_with_logs(state)
        for name, size, keys in SHOTS:
            loads = {replica.name: demo_loads(replica.name)}
            feed = StaticFeed(state, fabrics, replicas=[replica], logs=logs, loads=loads)
            app = LlmgwApp(feed, animation="none")
            svg = asyncio.run(_shoot(app, size, keys))
            path = out / f"{name}.svg"
            path.write_text(svg, encoding="utf-8")
            written.append(path)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: write the screenshots, print where."""
    parser = argparse.ArgumentParser(prog="python -m llmgw_tui.screenshots")
    parser.add_argument("--out", type=Path, default=Path("screenshots"), help="folder to write")
    args = parser.parse_args(argv)
    for path in write_screenshots(args.out):
        print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
