"""`llmgw-tui`: the console, with `--run` the headless runner, with `--serve-web` the console in a browser;
`llmgw-tui demo up|down|status` keeps the demo fleet up between runs.

Nothing is imported before the chosen path needs it: the headless path never
imports Textual (nor SSH, for a script that plans against a described fleet),
so scripts start fast and run where no terminal is attached.
"""

from __future__ import annotations

import argparse
import sys

from llmgw_core.startup import pydantic_plugins_off


def build_parser() -> argparse.ArgumentParser:
    """The command line of `llmgw-tui`."""
    parser = argparse.ArgumentParser(
        prog="llmgw-tui",
        description="Bring large language models up on GPU clusters reached over SSH.",
    )
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--inventory", metavar="FILE", help="the fleet's inventory YAML")
    source.add_argument(
        "--demo", action="store_true", help="start an embedded simulated fleet on this machine"
    )
    parser.add_argument(
        "--run", metavar="SCRIPT", help="run a YAML script headless ('-' for stdin)"
    )
    parser.add_argument("--json", action="store_true", help="with --run: one JSON object per step")
    parser.add_argument(
        "--accept-host", metavar="NODE", help="trust the host key a node presents now, then exit"
    )
    parser.add_argument(
        "--metrics-port",
        metavar="PORT",
        type=_port,
        help="serve Prometheus metrics of the fleet on this port while the console runs",
    )
    parser.add_argument(
        "--metrics-host",
        metavar="ADDRESS",
        help="the address --metrics-port binds (default 127.0.0.1: this machine only)",
    )
    web = parser.add_argument_group("the console in a browser")
    web.add_argument(
        "--serve-web", action="store_true", help="serve the console to browsers (textual-serve)"
    )
    web.add_argument("--host", default=None, help="with --serve-web: the address (127.0.0.1)")
    web.add_argument("--port", type=int, default=None, help="with --serve-web: the port (8000)")
    web.add_argument(
        "--allow-remote",
        action="store_true",
        help="with --serve-web: allow a --host other machines can reach (its token then "
        "crosses the network in plain HTTP)",
    )
    web.add_argument(
        "--public-url",
        metavar="URL",
        help="with --serve-web: the address browsers use, if not --host; "
        "a websocket must come from its origin",
    )
    web.add_argument(
        "--token-file",
        metavar="FILE",
        help="with --serve-web: the token browsers and scripts give, read from FILE "
        "(mode 600; without it a new token each start, printed in the address to open)",
    )
    web.add_argument(
        "--unix-socket",
        metavar="PATH",
        help="with --serve-web: listen on a Unix socket at PATH (mode 600, in a folder only "
        "you can enter) and on no TCP port; reach it with ssh -L 8000:PATH",
    )
    return parser


def _port(text: str) -> int:
    """A TCP port from the command line (argparse turns the error into one line and exit 2)."""
    if not text.isdigit() or not 0 <= int(text) <= 65535:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port (0 to 65535)")
    return int(text)


def before_any_model() -> None:
    """What `main` does first, before any module that builds a pydantic model is imported."""
    pydantic_plugins_off()


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `llmgw-tui` console script."""
    before_any_model()
    given = sys.argv[1:] if argv is None else argv
    if given[:1] == ["demo"]:
        from llmgw_core.fleet.sim.kept import demo_main

        return demo_main(given[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.json and not args.run:
        parser.error("--json needs --run SCRIPT")
    if args.metrics_host and args.metrics_port is None:
        parser.error("--metrics-host needs --metrics-port PORT")
    if args.metrics_port is not None and (args.run or args.accept_host):
        parser.error("--metrics-port is for the console; a script serves with a `metrics:` step")
    web_only = [
        flag
        for flag, given in (
            ("--host", args.host is not None),
            ("--port", args.port is not None),
            ("--allow-remote", args.allow_remote),
            ("--public-url", args.public_url is not None),
            ("--token-file", args.token_file is not None),
            ("--unix-socket", args.unix_socket is not None),
        )
        if given
    ]
    if web_only and not args.serve_web:
        parser.error(f"{web_only[0]} needs --serve-web")
    if args.serve_web and (args.run or args.accept_host):
        parser.error("--serve-web serves the console; it does not go with --run or --accept-host")
    if args.serve_web:
        return _serve_web(args)
    if args.run:
        from llmgw_core.startup import loading_modules

        with loading_modules():
            from llmgw_core.script.runner import run_script

        return run_script(args.run, as_json=args.json, inventory=args.inventory, demo=args.demo)
    if args.accept_host:
        from llmgw_core.fleet.accept import accept_host_main

        return accept_host_main(args.accept_host, inventory=args.inventory)
    from llmgw_tui.app import run_app

    return run_app(
        inventory=args.inventory,
        demo=args.demo,
        metrics_port=args.metrics_port,
        metrics_host=args.metrics_host,
    )


def _serve_web(args: argparse.Namespace) -> int:
    from llmgw_core.errors import BadInput
    from llmgw_tui.web import serve_web, web_settings

    try:
        settings = web_settings(
            host=args.host,
            port=args.port,
            allow_remote=args.allow_remote,
            inventory=args.inventory,
            demo=args.demo,
            public_url=args.public_url,
            token_file=args.token_file,
            unix_socket=args.unix_socket,
        )
        return serve_web(settings)
    except BadInput as exc:
        print(f"llmgw-tui: {exc.sentence()}", file=sys.stderr)
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())
