"""`llmgw doctor`'s command line: the checks or the facts of this node, or a capture of it."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import List, Optional

from llmgw_agent import paths
from llmgw_agent.doctor import format_checks, run_checks


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="llmgw doctor", description="Check this node.")
    parser.add_argument(
        "--replay", metavar="DIR", help="read a capture directory instead of the hardware"
    )
    parser.add_argument(
        "--model-dir",
        action="append",
        default=[],
        metavar="PATH",
        help="a model directory to check (repeatable)",
    )
    parser.add_argument("--json", action="store_true", help="print JSON")
    parser.add_argument(
        "--facts", action="store_true", help="print the node's facts instead of checks"
    )
    parser.add_argument(
        "--capture", metavar="DIR", help="write a capture directory for a bug report"
    )
    return parser


def main(argv: Optional[List[str]] = None) -> int:
    """`llmgw doctor ...`: 0 all checks pass or warn, 1 one failed, 2 bad arguments."""
    args = _parser().parse_args(argv)
    if args.capture:
        from llmgw_agent.discover.capture import capture

        written = capture(Path(args.capture))
        print("wrote {} to {}".format(", ".join(written["files"]) or "nothing", args.capture))
        for filename, problem in sorted(written["problems"].items()):
            print("  not captured: {}: {}".format(filename, problem))
        return 0
    from llmgw_agent.discover import DiscoveryError, collect_facts

    try:
        facts = collect_facts(replay=args.replay, model_dirs=args.model_dir)
    except DiscoveryError as exc:
        sys.stderr.write("llmgw doctor: {}\n".format(exc))
        return 2
    if args.facts:
        print(json.dumps(facts, indent=None if args.json else 2, sort_keys=True))
        return 0
    try:
        state = paths.state_dir()
    except OSError:
        state = None
    checks = run_checks(facts, state_dir=state)
    if args.json:
        print(json.dumps({"checks": checks}))
    else:
        print(format_checks(checks))
    return 1 if any(c["status"] == "fail" for c in checks) else 0


if __name__ == "__main__":
    sys.exit(main())
