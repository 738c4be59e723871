"""`llmgw front`: the gateway's one network port, and its router (standard library).

The front takes the network port, checks client keys and routes each request
to one of its model's workers itself (`routing.py`: the policies, the pinned
certificates, the health checks). Its workers and counters are changed and
read only on its control socket (`control.py`), in the shard's 0700 folder:
no admin API listens on any TCP port.

* `/v1/…` needs `Authorization: Bearer KEY` with one of the gateway's client
  keys; without one it is answered 401 as OpenAI answers, and never reaches
  an engine. A key limited to some models gets 404 `model_not_found` for the
  others, as OpenAI answers a model one has no access to; so does a model no
  worker serves. `GET /v1/models` lists what the key may use.
* The request then goes to a worker of its model with the engines' key for
  that model in place of the client's.
* `/health` (200 while some worker is healthy) and `/liveness` (200) are
  answered without a key (load balancers probe them); every other route is
  404 here.
* A key's own limits (`quota.py`) are checked before a worker is chosen: over
  one, 429 with `Retry-After`. The tokens each answer used are read from the
  engine's own `usage` (`usage.py`).
* Every request gets an id (the client's `X-Request-Id` when it is a plain
  token, else a new one), which the engine gets and the client gets back;
  W3C `traceparent` passes through as any header does. Each keyed request
  leaves a JSON line in the access log (`access.py`), read back summed on the
  control socket's `GET /usage`.
* Requests and refusals are counted per key id (never a key), requests per
  worker too, and served as Prometheus text on the control socket
  (`counters.py`).
* With `tls` in its configuration (the operator's certificate and key, PEM)
  the network port speaks HTTPS only. The PEM text is handed to `ssl` through
  anonymous in-memory files (`memfd_create`): never a file on the node.
* What a client sends is read within limits (`http.py`, `connections.py`): the key is checked
  from the request's head before a byte of its body is read, so a client
  without one costs the front a head at most; heads, bodies and idle
  connections have time limits, and connections are capped per peer and in
  all, those that have not shown a key closed first to make room.

Configuration comes from the environment, where the agent put it from the
shard's `secret_env`; it is taken out of the environment at start.
`LLMGW_FRONT_CONFIG` is JSON: `{"keys": [{"id", "key", "models"?, "limits"?}],
"upstream": {model: key}, "upstream_default": key?, "tls": {"cert", "key"}?,
"limits": {name: value}?, "store": NAME?}` (`http.Limits.FIELDS`: the time limits and
caps, for tests and for operators who need others than the defaults; a key's own
`limits`: `quota.py`; `store`, the gateway's name, under which its budgets and access
log outlive the front on this node: `config.py`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import ssl
import sys
import time
from urllib.parse import unquote

from llmgw_agent.front.access import AccessLog, Exchange, request_id
from llmgw_agent.front.config import Config, tls_context
from llmgw_agent.front.connections import (
    Governor,
    Slot,
    connection_caps,
    listen,
    open_file_limit,
    serve_connections,
)
from llmgw_agent.front.control import control_socket, serve_control
from llmgw_agent.front.counters import (
    Counters,
    bad_key,
    error_body,
    no_key,
    no_model,
    over_limit,
    overloaded,
)
from llmgw_agent.front.fair import BYTES_PER_TOKEN, LOAD_INTERVAL_S
from llmgw_agent.front.http import (
    REASONS,
    Refusal,
    Request,
    clean_path,
    close_gently,
    read_body,
    read_request,
)
from llmgw_agent.front.pd import PD_ROUTES, bootstrap, prefill
from llmgw_agent.front.quota import SAVE_EVERY_S
from llmgw_agent.front.relay import relay, whole_answer
from llmgw_agent.front.routing import POLICIES, Pool, Worker
from llmgw_agent.front.usage import StreamUsage, ask_for_usage, whole_usage

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Callable, Dict, List, Optional, Tuple

CONFIG_ENV = "LLMGW_FRONT_CONFIG"
MAX_BODY_BYTES = 64 * 1024 * 1024
_OPEN = ("/health", "/liveness")
_INVALID = "invalid_request_error"


class Front:
    """The proxy and router: one per process."""

    def __init__(self, config: Config, pool: Pool) -> None:
        self.config = config
        self.pool = pool
        self.counters = Counters()
        self.quotas = config.quotas
        self.access = AccessLog(None)  # `_serve` gives it the front's folder
        self.shares = config.shares
        if self.shares is not None:
            self.shares.pool = pool

    async def served_models(self) -> List[str]:
        """The models the workers serve."""
        return self.pool.models()

    # --- the control socket ----------------------------------------------------

    def control(self, method: str, target: str, body: bytes) -> Tuple[int, str, bytes]:
        """One request on the control socket: the workers, the counters, liveness."""
        route = target.split("?", 1)[0]
        if method == "GET" and route == "/liveness":
            return 200, "application/json", b"{}"
        if method == "GET" and route == "/metrics":
            text = (
                self.counters.text()
                + self.counters.budgets_text(self.quotas.budgets())
                + self.pool.metrics_text()
                + (self.shares.metrics_text() if self.shares is not None else "")
            )
            return 200, "text/plain; version=0.0.4", text.encode()
        if method == "GET" and route == "/usage":
            summed = {"usage": self.access.usage(), "files": len(self.access.files())}
            return 200, "application/json", json.dumps(summed).encode()
        if method == "GET" and route == "/workers":
            listed = [w.as_dict() for w in sorted(self.pool.workers.values(), key=_url)]
            return 200, "application/json", json.dumps({"workers": listed}).encode()
        if method == "POST" and route == "/workers":
            try:
                given = json.loads(body.decode() or "{}")
                adapters = given.get("adapters") or {}
                if not isinstance(adapters, dict):
                    raise ValueError("adapters is an object of names")
                worker = Worker(
                    str(given["url"]),
                    str(given["model_id"]),
                    given.get("cert"),
                    adapters=adapters,
                    base=given.get("base", True) is not False,
                    role=given.get("role"),
                    bootstrap_port=given.get("bootstrap_port"),
                )
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                message = {"error": "not a worker: {}".format(exc)}
                return 400, "application/json", json.dumps(message).encode()
            self.pool.add(worker)
            return 200, "application/json", json.dumps({"added": worker.url}).encode()
        if method == "DELETE" and route.startswith("/workers/"):
            url = unquote(route[len("/workers/") :])
            if not self.pool.remove(url):
                return 404, "application/json", json.dumps({"error": "no such worker"}).encode()
            return 200, "application/json", json.dumps({"removed": url}).encode()
        return 404, "application/json", b'{"error": "Not Found"}'

    # --- one client connection -------------------------------------------------

    async def serve_client(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, slot: Slot
    ) -> None:
        """Serve one connection's requests, each read and checked within the limits."""
        fresh = True
        try:
            while await self._one_request(reader, writer, slot, fresh):
                fresh = False
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()

    async def _one_request(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, slot: Slot, fresh: bool
    ) -> bool:
        """Read, check and pass on one request; False when the connection is to close.

        The key is checked from the head alone: a request without one is
        answered and closed before a byte of its body is read.
        """
        limits = self.config.limits
        try:
            request = await read_request(reader, limits, fresh)
        except Refusal as refusal:
            await self._refuse(reader, writer, "none", refusal)
            return False
        if request is None:
            return False
        method, target = request.method, request.target
        route = clean_path(target)
        unread = request.content_length > 0  # bodies of keyless routes are never read
        if route in _OPEN:
            healthy = route == "/liveness" or any(w.healthy for w in self.pool.workers.values())
            await _answer(writer, 200 if healthy else 503, b"{}", request.close or unread)
            return await self._keep(reader, writer, request.close or unread)
        if route is None or (route != "/v1" and not route.startswith("/v1/")):
            self.counters.add("none", "not_found")
            invalid = error_body(404, "Invalid URL ({} {})".format(method, target), _INVALID, None)
            await _answer(writer, *invalid, close=request.close or unread)
            return await self._keep(reader, writer, request.close or unread)
        key_id = "-"
        models = None  # type: Optional[frozenset]
        if not self.config.open:
            authorization = request.header("authorization")
            found = self.config.who(authorization)
            if found is None:
                key_id = "unknown" if authorization else "none"
                self.counters.add(key_id, "bad_key" if authorization else "no_key")
                await _answer(writer, *(bad_key() if authorization else no_key()), close=True)
                await close_gently(reader, writer, limits.linger_s)
                return False
            key_id, models = found
        slot.trust()
        exchange = Exchange(request_id(request.header("x-request-id")), key_id)
        try:
            return await self._keyed(reader, writer, request, route, key_id, models, exchange)
        finally:
            self.access.write(exchange)

    async def _keyed(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        request: Request,
        route: str,
        key_id: str,
        models: Optional[frozenset],
        exchange: Exchange,
    ) -> bool:
        """The rest of a request whose key is known: its body, its model, the key's limits,
        then the worker; what happens is written into `exchange` for the access log."""
        limits = self.config.limits
        method, target, headers = request.method, request.target, request.headers
        unread = request.content_length > 0
        close = request.close
        if request.content_length > MAX_BODY_BYTES:
            too_large = "The request's body is over {} bytes.".format(MAX_BODY_BYTES)
            refusal = Refusal(413, "too_large", too_large)
            await self._refuse(reader, writer, key_id, refusal, exchange)
            return False
        if unread and request.expects == "100-continue":
            # curl and others wait for this before sending a body over 1 KiB.
            writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
            await writer.drain()
        try:
            body = await read_body(reader, request.content_length, limits) if unread else b""
        except Refusal as refusal:
            await self._refuse(reader, writer, key_id, refusal, exchange)
            return False
        model = _model_of(body) if method == "POST" else None
        exchange.model = model
        if method == "GET" and route == "/v1/models":
            listed = [m for m in await self.served_models() if models is None or m in models]
            self.counters.add(key_id, "answered")
            await _say(writer, exchange, 200, _model_list(listed, self.pool.parents()), close)
            return not close
        if model is not None:
            if models is not None and model not in models:
                self.counters.add(key_id, "model_refused")
                await _say(writer, exchange, *no_model(model), close=close)
                return not close
            if model not in await self.served_models():
                self.counters.add(key_id, "no_such_model")
                await _say(writer, exchange, *no_model(model), close=close)
                return not close
        refused = self.quotas.admit(key_id)
        if refused is not None:
            self.counters.refused(key_id, refused.limit)
            retry = ("Retry-After", str(refused.retry_after_s))
            await _say(writer, exchange, *over_limit(refused), close=close, more=(retry,))
            return not close
        shares, base, estimate = self.shares, self.pool.base_of(model) or "", 0
        if shares is not None and method == "POST":
            estimate = len(body) // BYTES_PER_TOKEN
            queued_at = time.monotonic()
            held = await shares.take(key_id, base, estimate)
            exchange.queued_s = time.monotonic() - queued_at
            if held is None and (writer.is_closing() or reader.at_eof()):
                shares.done(key_id, base, estimate, None)  # its client left while it waited
                self.quotas.finished(key_id, 0)
                return False
            if held is not None:
                self.quotas.finished(key_id, 0)
                self.counters.refused(key_id, held.limit)
                retry = ("Retry-After", str(held.retry_after_s))
                await _say(writer, exchange, *overloaded(held.message), close=close, more=(retry,))
                return not close
        else:
            shares = None
        usage = StreamUsage(strip=False)
        if method == "POST" and (shares is not None or self.quotas.counts_tokens(key_id)):
            body, asked = ask_for_usage(body)
            usage.strip = asked
        released = [False]

        def engine_done() -> None:
            # The engine's sequence is free once its answer is read: the next request waiting
            # at the front goes now, not after this answer has reached its client.
            if shares is not None and not released[0]:
                released[0] = True
                shares.done(key_id, base, estimate, usage.tokens)

        try:
            return await self._pass(
                writer,
                method,
                target,
                headers,
                body,
                model,
                self.config.upstream_key(base),
                close,
                exchange,
                usage,
                engine_done,
            )
        finally:
            engine_done()
            tokens = exchange.tokens = usage.tokens
            if exchange.first_at is None:
                exchange.first_at = usage.first_at
            if tokens is not None:
                self.counters.used(key_id, model, *tokens)
            self.quotas.finished(key_id, sum(tokens) if tokens is not None else 0)

    async def _refuse(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        key_id: str,
        refusal: Refusal,
        exchange: Optional[Exchange] = None,
    ) -> None:
        """Answer a request the front will not take (OpenAI's error body), count it, close."""
        self.counters.add(key_id, refusal.outcome)
        error = error_body(refusal.status, refusal.message, _INVALID, None)
        if exchange is not None:
            await _say(writer, exchange, *error, close=True)
        else:
            await _answer(writer, *error, close=True)
        await close_gently(reader, writer, self.config.limits.linger_s)

    async def _keep(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, close: bool
    ) -> bool:
        """Whether the connection carries another request; closed gently when not (a body
        may be left unread)."""
        if close:
            await close_gently(reader, writer, self.config.limits.linger_s)
        return not close

    async def _pass(
        self,
        writer: asyncio.StreamWriter,
        method: str,
        target: str,
        headers: List[Tuple[str, str]],
        body: bytes,
        model: Optional[str],
        upstream_key: Optional[str],
        close: bool,
        exchange: Exchange,
        usage: StreamUsage,
        engine_done: Callable[[], None],
    ) -> bool:
        """Send the request to a worker of its model and the answer back, as it comes (streams
        included), its tokens read into `usage`; `engine_done` is called as soon as the
        engine's answer has been read whole. A worker that will not connect is out of
        rotation and the next one is tried; nothing was sent to it."""
        key_id = exchange.key
        if method == "POST" and clean_path(target) in PD_ROUTES and self.pool.split(model):
            legged = bootstrap if self.pool.bootstrapped(model) else prefill
            body, refused = await legged(
                self.pool, model, target, headers, body, upstream_key, exchange.id
            )
            if refused is not None:
                self.counters.add(key_id, "no_worker" if b" 503 " in refused[0] else "answered")
                status = int(refused[0].split(b" ")[1])
                await _say(writer, exchange, status, refused[1], close)
                return not close
        tried = ()  # type: Tuple[str, ...]
        while True:
            worker = self.pool.choose(model, body, tried)
            if worker is None:
                self.counters.add(key_id, "no_worker")
                message = b'{"error": "no worker of the gateway is healthy"}'
                await _say(writer, exchange, 503, message, close)
                return not close
            tried += (worker.url,)
            try:
                up_reader, up_writer = await worker.open()
            except (OSError, ssl.SSLError, asyncio.TimeoutError) as exc:
                self.pool.failed(worker, "it would not connect ({})".format(_why(exc)))
                continue
            sent = worker.body_for(model, body)
            head = worker.request_head(
                method, target, headers, exchange.id, upstream_key, len(sent)
            )
            request = head + sent
            worker.in_flight += 1
            worker.processed += 1
            try:
                try:
                    up_writer.write(request)
                    status_head = await up_reader.readuntil(b"\r\n\r\n")
                except (OSError, ssl.SSLError, asyncio.IncompleteReadError) as exc:
                    # Nothing came back: the engine died (or its kept connection did) before
                    # answering. Out of rotation, and the request goes to another worker.
                    up_writer.close()
                    self.pool.failed(worker, "it dropped a request ({})".format(_why(exc)))
                    continue
                try:
                    # A whole answer of known length is read before a byte of it is sent on:
                    # an engine that dies mid-answer is then retried elsewhere, unseen.
                    whole = await whole_answer(status_head, up_reader, method)
                except (OSError, ssl.SSLError, asyncio.IncompleteReadError) as exc:
                    up_writer.close()
                    self.pool.failed(worker, "it dropped an answer ({})".format(_why(exc)))
                    continue
                self.counters.add(key_id, "answered")
                self.counters.answered(key_id, model, self.pool.parents().get(model or ""))
                exchange.worker, exchange.status = worker.url, _status(status_head)
                status_head = _with_request_id(status_head, exchange.id)
                if status_head[9:10] == b"5":  # "HTTP/1.1 5xx": the engine failed the request
                    worker.failures += 1
                if whole is not None:
                    exchange.first_at = time.monotonic()
                    usage.tokens = whole_usage(whole)
                    engine_done()
                    writer.write(status_head + whole)
                    await writer.drain()
                    reusable = b"connection: close" not in status_head.lower()
                else:
                    reusable = await relay(status_head, up_reader, writer, method, usage)
                    engine_done()
            finally:
                worker.in_flight -= 1
            if reusable:
                worker.keep(up_reader, up_writer)
            else:
                up_writer.close()
                close = close or not reusable
            return not close


def _url(worker: Worker) -> str:
    return worker.url


def _status(head: bytes) -> int:
    try:
        return int(head[9:12])
    except ValueError:
        return 0


def _with_request_id(head: bytes, rid: str) -> bytes:
    """An engine's answer head with the request's id (the engine's own, if it sent one, goes)."""
    lines = [
        line for line in head[:-4].split(b"\r\n") if not line.lower().startswith(b"x-request-id:")
    ]
    return b"\r\n".join([*lines, b"X-Request-Id: " + rid.encode()]) + b"\r\n\r\n"


def _why(exc: BaseException) -> str:
    text = str(exc).strip()
    return "{}: {}".format(type(exc).__name__, text) if text else type(exc).__name__


def _model_of(body: bytes) -> Optional[str]:
    try:
        parsed = json.loads(body.decode() or "{}")
    except (ValueError, UnicodeDecodeError):
        return None
    model = parsed.get("model") if isinstance(parsed, dict) else None
    return model if isinstance(model, str) else None


def _model_list(models: List[str], parents: Dict[str, str]) -> bytes:
    """OpenAI's model list; an adapter names the model it adapts in `parent`, as vLLM's does."""
    now = int(time.time())
    cards = [
        {"id": m, "object": "model", "created": now, "owned_by": "llmgw", "parent": parents.get(m)}
        for m in models
    ]
    return json.dumps({"object": "list", "data": cards}).encode()


async def _say(
    writer: asyncio.StreamWriter,
    exchange: Exchange,
    status: int,
    body: bytes,
    close: bool,
    more: Tuple[Tuple[str, str], ...] = (),
) -> None:
    """`_answer` for a keyed request: its status noted, its id sent back."""
    exchange.status = status
    exchange.first_at = time.monotonic()
    await _answer(writer, status, body, close, (*more, ("X-Request-Id", exchange.id)))


async def _answer(
    writer: asyncio.StreamWriter,
    status: int,
    body: bytes,
    close: bool,
    more: Tuple[Tuple[str, str], ...] = (),
) -> None:
    head = "HTTP/1.1 {} {}\r\nContent-Type: {}\r\nContent-Length: {}\r\n{}{}\r\n".format(
        status,
        REASONS.get(status, "Error"),
        "application/json",
        len(body),
        "".join("{}: {}\r\n".format(name, value) for name, value in more),
        "Connection: close\r\n" if close else "",
    )
    writer.write(head.encode() + body)
    await writer.drain()


def _host_port(text: str) -> Tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host or "0.0.0.0", int(port)


async def _serve(args: argparse.Namespace, config: Config) -> None:
    pool = Pool(args.policy)
    pool.health_path = args.health_path
    front = Front(config, pool)
    host, port = _host_port(args.listen)
    context = tls_context(*config.tls) if config.tls else None
    control_path = args.control or control_socket(os.environ.get("LLMGW_SHARD_ID", ""))
    front.access = AccessLog(config.folder or os.path.dirname(control_path))
    front.access.load()  # the kept lines' sums, before a request is taken
    control = await serve_control(control_path, front.control)
    listener = listen(host, port)
    limits = config.limits
    governor = Governor(*connection_caps(limits, open_file_limit()))

    def count(outcome: str) -> None:
        front.counters.add("none", outcome)

    async def keep_budgets() -> None:
        while True:
            await asyncio.sleep(SAVE_EVERY_S)
            front.quotas.save()

    def stopped() -> None:
        # SIGTERM (the supervisor's stop): the budgets' last counts are written, then the
        # process ends by the signal as it would have.
        front.quotas.save()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)

    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stopped)

    async def read_loads() -> None:
        shares = front.shares
        if shares is None:
            return
        while True:
            await asyncio.sleep(LOAD_INTERVAL_S)
            await pool.read_loads(shares.engine_said, front.config.upstream_key)
            shares.pump()

    sys.stdout.write(
        "llmgw front on {}:{} ({}, {} client key(s), policy {}), control on {}\n".format(
            host,
            port,
            "https" if context else "http",
            len(config.keys),
            args.policy,
            control_path,
        )
    )
    sys.stdout.flush()
    try:
        async with control:
            await asyncio.gather(
                serve_connections(listener, front.serve_client, governor, limits, context, count),
                control.serve_forever(),
                pool.watch(),
                keep_budgets(),
                read_loads(),
            )
    finally:
        listener.close()
        front.quotas.save()


def main(argv: List[str]) -> int:
    """`llmgw front --listen HOST:PORT --policy P [--health-path /health] [--control PATH]`."""
    parser = argparse.ArgumentParser(prog="llmgw front")
    parser.add_argument("--listen", required=True, help="HOST:PORT clients reach")
    parser.add_argument("--policy", choices=POLICIES, default="round_robin")
    parser.add_argument("--health-path", default="/health", help="the workers' health route")
    parser.add_argument(
        "--control", default=None, help="the control socket (default: in the shard's folder)"
    )
    args = parser.parse_args(argv)
    if args.control is None and not os.environ.get("LLMGW_SHARD_ID"):
        sys.stderr.write("llmgw front: give --control PATH (no shard started this front)\n")
        return 2
    raw = os.environ.pop(CONFIG_ENV, "") or "{}"
    try:
        config = Config(json.loads(raw))
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        sys.stderr.write("llmgw front: {} is not a key configuration: {}\n".format(CONFIG_ENV, exc))
        return 2
    try:
        asyncio.run(_serve(args, config))
    except KeyboardInterrupt:
        return 0
    except (OSError, ValueError) as exc:
        sys.stderr.write("llmgw front: {}\n".format(exc))
        return 1
    return 0
