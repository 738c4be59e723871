"""llama-cpp-python's own server, answering `/health` as llama.cpp's `llama-server` does (tests only).

Why it exists: the gateway's router (vllm-router 0.1.17) probes every worker
it is given through its `/workers` API on `GET /health`, whatever
`--health-check-endpoint` says, and llama-cpp-python's server has no such
route (404), so a router in front of it holds every worker unhealthy. The
real `llama-server` answers `/health` (503 "Loading model", then 200), but it
is not installed here; llama-cpp-python is.

So this is what the test node runs as its llama.cpp program (the
inventory's `engines: {llama.cpp: {bin: …}}`, through a two-line `exec`
script): it takes the `llama-server` flags the product builds for that
program, and serves llama-cpp-python's own FastAPI app, unchanged, in this
one process, with one route put in front of it:

* `GET /health`: 503 `{"error": {"code": 503, "message": "Loading model",
  "type": "unavailable_error"}}` while the model loads, then 200
  `{"status": "ok"}` (llama-server's bodies);
* `GET /metrics` (with `--metrics`, as llama-server): `llamacpp:requests_processing`,
  the requests this process is answering now, and `llamacpp:requests_deferred` 0
  (llama-cpp-python queues them inside the app);
* anything else: llama-cpp-python's app once the model is loaded, 503 before.

With `--ssl-cert-file` and `--ssl-key-file` (the replica's certificate, as
`/dev/fd/N` paths of the agent's in-memory files) it serves HTTPS only, as
llama-server built with OpenSSL does.

The port listens at once and the model loads on a thread, as llama-server
does, so the agent's and the router's probes see the 503 first. No proxy and
no second process: the process that answers `/health` is the one computing
the tokens, so killing it kills the engine. The product carries none of
this; it builds `llama-server`'s command and checks `/health`, as for the
real binary.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import threading
from collections.abc import Awaitable, Callable, MutableMapping
from pathlib import Path
from typing import Any

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

LOADING_BODY = {"error": {"code": 503, "message": "Loading model", "type": "unavailable_error"}}
READY_BODY = {"status": "ok"}


def launcher_script(folder: Path) -> Path:
    """`folder/llama-server`: a script that `exec`s this module with this interpreter.

    `exec` keeps one process: the shard's pid the agent records is this
    module's, the one serving tokens.
    """
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "llama-server"
    here = shlex.quote(str(Path(__file__).resolve()))
    script.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} {here} "$@"\n')
    script.chmod(0o755)
    return script


def parse_flags(argv: list[str]) -> argparse.Namespace:
    """The `llama-server` flags the product's llama.cpp builder gives (any other is refused)."""
    parser = argparse.ArgumentParser(prog="llama-server (llama-cpp-python stand-in)")
    parser.add_argument("--model", required=True)
    parser.add_argument("--alias", required=True)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--ctx-size", type=int, required=True)
    parser.add_argument("--parallel", type=int, default=1)
    parser.add_argument("--n-gpu-layers", type=int, default=0)
    parser.add_argument("--split-mode", default="none")
    parser.add_argument("--metrics", action="store_true")
    parser.add_argument("--flash-attn", choices=("on", "off", "auto"), default="auto")
    parser.add_argument("--ubatch-size", type=int, default=512)
    parser.add_argument("--ssl-cert-file", default=None)
    parser.add_argument("--ssl-key-file", default=None)
    flags = parser.parse_args(argv)
    if (flags.ssl_cert_file is None) != (flags.ssl_key_file is None):
        parser.error("--ssl-cert-file and --ssl-key-file go together")
    if flags.parallel != 1:
        parser.error("llama-cpp-python's server answers one sequence at a time: --parallel 1 only")
    return flags


async def _send_json(send: Send, status: int, body: dict[str, Any]) -> None:
    payload = json.dumps(body).encode()
    headers = [(b"content-type", b"application/json"), (b"content-length", b"%d" % len(payload))]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": payload})


class HealthFront:
    """An ASGI app: `/health` answered here, the rest passed to the engine's app once it is loaded."""

    def __init__(self, metrics: bool = False) -> None:
        self.engine: App | None = None
        self.failed: str | None = None
        self.metrics = metrics
        self.processing = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        engine = self.engine
        if scope["type"] == "http" and scope["path"] == "/health":
            if engine is None:
                await _send_json(send, 503, LOADING_BODY)
            else:
                await _send_json(send, 200, READY_BODY)
            return
        if scope["type"] == "http" and scope["path"] == "/metrics" and self.metrics:
            text = (
                f"llamacpp:requests_processing {self.processing}\nllamacpp:requests_deferred 0\n"
            ).encode()
            headers = [(b"content-type", b"text/plain; version=0.0.4")]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            await send({"type": "http.response.body", "body": text})
            return
        if engine is None:
            await _send_json(send, 503, LOADING_BODY)
            return
        self.processing += 1
        try:
            await engine(scope, receive, send)
        finally:
            self.processing -= 1

    @staticmethod
    async def _lifespan(receive: Receive, send: Send) -> None:
        # llama-cpp-python's app has no start-up or shut-down work of its own.
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                await send({"type": "lifespan.shutdown.complete"})
                return


def load_engine(front: HealthFront, flags: argparse.Namespace) -> None:
    """Build llama-cpp-python's server app (which loads the model) and hand it to `front`."""
    from llama_cpp.server.app import create_app
    from llama_cpp.server.settings import ModelSettings, ServerSettings

    try:
        app = create_app(
            server_settings=ServerSettings(
                host=flags.host,
                port=flags.port,
                # Requests the router sends side by side wait their turn, none is cut short.
                interrupt_requests=False,
            ),
            model_settings=[
                ModelSettings(
                    model=flags.model,
                    model_alias=flags.alias,
                    n_ctx=flags.ctx_size,
                    n_gpu_layers=flags.n_gpu_layers,
                    flash_attn=flags.flash_attn == "on",
                    n_ubatch=flags.ubatch_size,
                    verbose=False,
                )
            ],
        )
    except Exception as failed:  # any load failure ends the engine, as llama-server's does
        front.failed = f"{type(failed).__name__}: {failed}"
        print(f"loading {flags.model} failed: {front.failed}", file=sys.stderr, flush=True)
        return
    front.engine = app
    print(f"model loaded: {flags.model} as {flags.alias}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    """Listen at once, load the model on a thread, serve until stopped."""
    import uvicorn

    flags = parse_flags(sys.argv[1:] if argv is None else argv)
    front = HealthFront(metrics=flags.metrics)
    server = uvicorn.Server(
        uvicorn.Config(
            front,
            host=flags.host,
            port=flags.port,
            ssl_certfile=flags.ssl_cert_file,
            ssl_keyfile=flags.ssl_key_file,
        )
    )

    def load() -> None:
        load_engine(front, flags)
        if front.failed is not None:
            server.should_exit = True

    threading.Thread(target=load, name="load-model", daemon=True).start()
    server.run()
    return 1 if front.failed is not None else 0


if __name__ == "__main__":
    sys.exit(main())
