"""The sim engine's HTTP side: the routes an engine serves, paced answers, counters for /metrics.

`SimHandler` answers `/health` (503 while loading), `/v1/models`,
`/v1/chat/completions`, `/v1/completions`, `/tokenize` and `/metrics` as the
engine named does (the bodies are `engine.api`'s), holding at most
`max_seqs` requests at once; `EngineHttpServer` takes the connections, each
on its own thread, over TLS where the command names a certificate.
"""

from __future__ import annotations

import contextlib
import hmac
import json
import os
import socket
import ssl
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Optional

from llmgw_agent.sim.engine import api
from llmgw_agent.sim.engine.latency import Latencies
from llmgw_agent.sim.engine.lines import kv_bytes_per_token, lora_loaded_line, lora_removed_line
from llmgw_agent.sim.engine.stdout import say
from llmgw_agent.sim.engine.transfer import (
    ROOM_WAIT_S_ENV,
    bootstrap_of,
    fill_room,
    handoff_params,
    receive_s,
    received_line,
    wait_room,
)

TOKEN_S = 0.005
"""How long the sim takes per generated token: a request is in flight for a while, as on an
engine, so a roll has something to drain (a 12-token answer: 60 ms)."""
IN_FLIGHT_NAMES = {
    "vllm": ("vllm:num_requests_running", "vllm:num_requests_waiting"),
    "sglang": ("sglang:num_running_reqs", "sglang:num_queue_reqs"),
    "llama.cpp": ("llamacpp:requests_processing", "llamacpp:requests_deferred"),
}
"""The families each engine counts its requests in flight in (running, waiting), on /metrics."""
KV_USE_NAMES = {
    "vllm": "vllm:kv_cache_usage_perc",
    "sglang": "sglang:token_usage",
    "llama.cpp": "llamacpp:kv_cache_usage_ratio",
}
"""The family each engine publishes its KV cache in use in (a share, 0 to 1)."""
_MAX_BODY_BYTES = 64 * 1024 * 1024


class SimState:
    """What the HTTP side needs to know: loading or ready, and counters for /metrics."""

    def __init__(self, engine: dict, plan: dict, api_key: Optional[str] = None) -> None:
        self.engine = engine
        self.plan = plan
        self.api_key = api_key
        """The key clients must present (None: any request is taken); never printed."""
        self.ready = threading.Event()
        self.lock = threading.Lock()
        self.requests_total = 0
        self.running = 0
        """Requests being answered now (what a roll waits on while draining)."""
        self.waiting = 0
        """Requests queued for a free sequence slot (`max_seqs` are answered at once)."""
        self.admitted = threading.Condition(self.lock)
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0
        self.started = int(time.time())
        """When the engine started: its model card's `created`."""
        self.token_s = _token_s(os.environ.get("LLMGW_SIM_TOKEN_S"))
        """Seconds per generated token (`LLMGW_SIM_TOKEN_S`, else `TOKEN_S`)."""
        self.prefill_s = _token_s(os.environ.get("LLMGW_SIM_PREFILL_S") or "0")
        """Seconds of compute per prompt token (`LLMGW_SIM_PREFILL_S`, default 0: none)."""
        self.compute = threading.Lock()
        """Held while a prompt is read: the engine's one compute, on which every sequence's
        next token waits meanwhile (what a long prompt does to everyone else's answers)."""
        self.latencies = Latencies(engine["kind"])
        """Its latency histograms, as the engine it stands in for publishes them."""
        self.kv_received_bytes = 0
        self.kv_received_s = 0.0
        self.kv_gbps = None  # type: Optional[float]
        """How fast a prefill or decode worker moves KV (`transfer.path_gbps`); None: it does
        both."""


def _token_s(given: Optional[str]) -> float:
    """A pace from the environment: a number of seconds from 0 to 10, else `TOKEN_S`."""
    try:
        value = float(given) if given else TOKEN_S
    except ValueError:
        return TOKEN_S
    return value if 0 <= value <= 10 else TOKEN_S


def _answer_text(state: SimState) -> str:
    return "Hello from the simulated {} engine serving {}.".format(
        state.engine["kind"], state.engine["served_name"]
    )


class SimHandler(BaseHTTPRequestHandler):
    """The OpenAI-style API of the sim engine."""

    server_version = "llmgw-sim"
    protocol_version = "HTTP/1.1"
    sim: SimState

    def log_message(self, format: str, *args) -> None:
        """An access line as uvicorn prints it; health and metrics polls are not logged."""
        if not self.path.startswith(("/health", "/metrics")):
            say(
                'INFO:     {}:{} - "{} {} HTTP/1.1" {}'.format(
                    self.client_address[0], self.client_address[1], self.command, self.path, args[1]
                )
            )

    def _send(self, status: int, body: object, content_type: str = "application/json") -> None:
        raw = (body if isinstance(body, str) else json.dumps(body)).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    def _refused(self, route: str) -> bool:
        """Answer 401 when the route needs the key and the request lacks it (as the engine does)."""
        key = self.sim.api_key
        if key is None or not api.needs_key(self.sim.engine["kind"], route):
            return False
        given = self.headers.get("Authorization") or ""
        if hmac.compare_digest(given.encode(), "Bearer {}".format(key).encode()):
            return False
        self._send(*api.unauthorized(self.sim.engine["kind"]))
        return True

    def _loading(self) -> bool:
        if self.sim.ready.is_set():
            return False
        error = {"code": 503, "message": "Loading model", "type": "unavailable_error"}
        self._send(503, {"error": error})
        return True

    def do_GET(self) -> None:
        """`/health`, `/v1/models`, `/metrics`, `/openapi.json`, `/version`."""
        route = self.path.split("?")[0]
        if self._refused(route):
            return
        if route in ("/health", "/v1/health", "/health_generate"):
            if not self._loading():  # vLLM answers an empty 200; the others a status
                vllm = self.sim.engine["kind"] == "vllm"
                self._send(
                    200,
                    "" if vllm else {"status": "ok"},
                    "text/plain" if vllm else "application/json",
                )
        elif route == "/v1/models":
            self._send(200, api.model_list(self.sim.engine, self.sim.started))
        elif route == "/lora-adapters" and self.sim.engine["kind"] == "llama.cpp":
            self._send(200, api.lora_adapters(self.sim.engine))
        elif route == "/metrics":
            self._send(200, self._metrics(), "text/plain; version=0.0.4")
        elif route == "/openapi.json":
            if not self._loading():
                self._send(200, {"openapi": "3.1.0", "info": {"title": "llmgw-sim"}, "paths": {}})
        elif route == "/version":
            self._send(200, {"version": "sim"})
        else:
            self._send(*api.error(404, "Not Found", "NotFoundError"))

    def _metrics(self) -> str:
        kind = self.sim.engine["kind"]
        running, waiting = IN_FLIGHT_NAMES.get(kind, IN_FLIGHT_NAMES["llama.cpp"])
        prefix = running.split(":")[0] + ":"
        label = '{{model_name="{}"}}'.format(self.sim.engine["served_name"])
        with self.sim.lock:
            limit = int(self.sim.engine.get("max_seqs") or 1)
            values = [
                (running, self.sim.running),
                (waiting, self.sim.waiting),
                (
                    KV_USE_NAMES.get(kind, KV_USE_NAMES["llama.cpp"]),
                    round(self.sim.running / limit, 4),
                ),
                (prefix + "request_success_total", self.sim.requests_total),
                (prefix + "prompt_tokens_total", self.sim.prompt_tokens_total),
                (prefix + "generation_tokens_total", self.sim.generation_tokens_total),
            ]
        # Prometheus's text format as the engines' prometheus_client writes it: each family
        # declared (`# HELP`, `# TYPE`) before its sample, a counter by its `_total` name.
        return "".join(
            "# HELP {0} The simulated engine's {0}.\n# TYPE {0} {1}\n{0}{2} {3}\n".format(
                name, "counter" if name.endswith("_total") else "gauge", label, value
            )
            for name, value in values
        ) + self.sim.latencies.text(label[1:-1])

    def do_POST(self) -> None:
        """`/v1/chat/completions` and `/v1/completions`: the sim's answer, as vLLM shapes it."""
        route = self.path.split("?")[0]
        # The body is read whatever the answer: left in the stream, it would be
        # taken for the next request on this kept-alive connection.
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if not 0 <= length <= _MAX_BODY_BYTES:
            self.close_connection = True
            self._send(*api.bad_request("the request body's length is not taken"))
            return
        raw = self.rfile.read(length) if length else b""
        if self._refused(route):
            return
        runtime = api.LORA_ROUTES.get(self.sim.engine["kind"], {})
        if route in runtime and self.sim.engine.get("runtime_lora"):
            try:
                given = json.loads(raw or b"{}")
            except ValueError:
                given = None
            with self.sim.lock:
                status, answer = api.change_adapter(self.sim.engine, runtime[route], given)
            plain = isinstance(answer, str)  # vLLM's success is a bare sentence
            if status == 200 and isinstance(given, dict):
                name = str(given["lora_name"])
                if runtime[route] == "load":
                    say(lora_loaded_line(name, str(given["lora_path"])))
                else:
                    say(lora_removed_line(name))
            self._send(status, answer, "text/plain; charset=utf-8" if plain else "application/json")
            return
        if route not in ("/v1/chat/completions", "/v1/completions", "/tokenize"):
            self._send(*api.error(404, "Not Found", "NotFoundError"))
            return
        try:
            body = json.loads(raw or b"{}")
        except ValueError as exc:  # vLLM's schema refusal, at the character it stopped on
            where = "body.{}".format(getattr(exc, "pos", 0))
            detail = {"type": "json_invalid", "loc": where, "msg": "JSON decode error"}
            message = "1 validation error:\n  {!r}".format(detail)
            self._send(*api.error(400, message, "Bad Request", where))
            return
        if route == "/tokenize":
            self._send(*api.tokenize(body, self.sim.engine))
            return
        if self._loading():
            return
        queued_s = self._admit()
        try:
            self._answer(route, body, queued_s)
        finally:
            with self.sim.lock:
                self.sim.running -= 1
                self.sim.admitted.notify()

    def _admit(self) -> float:
        """Wait for one of the engine's `max_seqs` sequence slots, counted as waiting meanwhile
        (as vLLM's scheduler queues what it cannot batch); the seconds it waited."""
        limit = int(self.sim.engine.get("max_seqs") or 1)
        started = time.monotonic()
        with self.sim.lock:
            self.sim.waiting += 1
            while self.sim.running >= limit:
                self.sim.admitted.wait()
            self.sim.waiting -= 1
            self.sim.running += 1
        return time.monotonic() - started

    def _answer(self, route: str, body: object, queued_s: float) -> None:
        """A completion, paced as an engine generates it (`token_s` per token)."""
        found, refused = api.plan(route, body, self.sim.engine, _answer_text(self.sim))
        if refused is not None or found is None:
            self._send(*(refused or api.bad_request("the request could not be read")))
            return
        with self.sim.lock:
            self.sim.requests_total += 1
            self.sim.prompt_tokens_total += found.prompt_tokens
            self.sim.generation_tokens_total += found.completion_tokens
            number = self.sim.requests_total
        request_id = api.request_id(found.chat, number)
        created = api.now()
        handoff = self._kv_handoff(body, found.prompt_tokens)
        room = bootstrap_of(body) if self.sim.kv_gbps is not None else None
        role = (self.sim.engine.get("pd") or {}).get("role")
        if room is not None and role == "decode":
            if not self._receive_room(room):
                message = "the KV of bootstrap room {} never came from {}:{}".format(
                    room[2], room[0], room[1]
                )
                self._send(*api.error(500, message, "InternalServerError"))
                return
        elif not _received(body) and self.sim.prefill_s > 0:
            self._prefill(found.prompt_tokens)
        if room is not None and role == "prefill":
            # SGLang's prefill worker: the prompt's KV into its room, for the decode worker
            # that waits there; its own answer (dropped by the router) is not paced.
            per_token = int(kv_bytes_per_token(self.sim.engine))
            params = handoff_params(
                self.sim.engine, room[0], found.prompt_tokens, per_token, self.sim.kv_gbps or 0
            )
            fill_room(room[1], room[2], params)
            if not (isinstance(body, dict) and body.get("stream")):
                self._send(200, api.completion(found, request_id, created))
                return
        if isinstance(body, dict) and body.get("stream"):
            self._stream(api.chunks(found, request_id, created), found)
        else:
            self._pace(self.sim.token_s * found.completion_tokens)
            answer = api.completion(found, request_id, created)
            if handoff is not None:
                answer["kv_transfer_params"] = handoff
            self._send(200, answer)
        self.sim.latencies.request(queued_s, self.sim.token_s, found.completion_tokens)

    def _kv_handoff(self, body: object, prompt_tokens: int) -> Optional[dict]:
        """A worker's part of a split request, as vLLM's NixlConnector plays it: asked to
        `do_remote_decode`, the prefill worker keeps the prompt's KV and says where it is (what
        it returns); given `do_remote_prefill`, the decode worker first takes that KV over its
        path, as long as the bytes take at the slower side's speed, and says so."""
        gbps = self.sim.kv_gbps
        params = body.get("kv_transfer_params") if isinstance(body, dict) else None
        if gbps is None or not isinstance(params, dict):
            return None
        if params.get("do_remote_decode"):
            per_token = int(kv_bytes_per_token(self.sim.engine))
            return handoff_params(
                self.sim.engine, socket.gethostname(), prompt_tokens, per_token, gbps
            )
        if params.get("do_remote_prefill"):
            self._receive(params, gbps)
        return None

    def _receive(self, params: dict, gbps: float) -> None:
        """A decode worker's wait for a prompt's KV: as long as its bytes take at `gbps`;
        counted, and said in the log as the real connectors say each transfer."""
        wait_s, moved, speed = receive_s(params, gbps)
        time.sleep(wait_s)
        with self.sim.lock:
            self.sim.kv_received_bytes += moved
            self.sim.kv_received_s += wait_s
        say(received_line(moved, wait_s, speed))

    def _receive_room(self, room: tuple) -> bool:
        """An SGLang decode worker's wait: for its room's KV from the prefill worker, then as
        long as the bytes take at the slower side's speed; False when the room stayed empty."""
        params = wait_room(room[1], room[2], float(os.environ.get(ROOM_WAIT_S_ENV) or 30))
        if params is None:
            return False
        self._receive(params, self.sim.kv_gbps or 0)
        return True

    def _prefill(self, prompt_tokens: int) -> None:
        """Read the prompt on the engine's one compute; a prompt queued for it counts as
        waiting, as vLLM counts a request not yet prefilled."""
        with self.sim.lock:
            self.sim.waiting += 1
        self.sim.compute.acquire()
        with self.sim.lock:
            self.sim.waiting -= 1
        try:
            time.sleep(self.sim.prefill_s * prompt_tokens)
        finally:
            self.sim.compute.release()

    def _pace(self, seconds: float) -> None:
        """Sleep `seconds` of decoding, a token's time at a time, each token waiting while a
        prompt is being read (`compute`): a sleep without prefill is one plain sleep."""
        if self.sim.prefill_s <= 0:
            time.sleep(seconds)
            return
        step = max(self.sim.token_s, 0.001)
        while seconds > 0:
            with self.sim.compute:
                pass
            time.sleep(min(step, seconds))
            seconds -= step

    def _stream(self, chunks, found) -> None:
        """The chunks as an engine streams them: the first token after one token's time, the
        words after it paced over the rest, so a client's time to first token is the engine's."""
        token_s, tokens = self.sim.token_s, max(1, found.completion_tokens)
        self._pace(token_s)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        left = token_s * (tokens - 1)
        gap = left / max(1, len(found.words) - 1)
        said = False
        for chunk in chunks:
            words = any(
                (c.get("delta") or {}).get("content") or c.get("text")
                for c in chunk.get("choices") or ()
            )
            if words and said and left > 0:  # each word after the first, a share of the rest
                self._pace(min(gap, left))
                left -= gap
            said = said or words
            self.wfile.write("data: {}\n\n".format(json.dumps(chunk)).encode())
            self.wfile.flush()
        if left > 0:
            self._pace(left)
        self.wfile.write(b"data: [DONE]\n\n")
        self.wfile.flush()


def _received(body: object) -> bool:
    """True for a decode worker's request whose prompt was read elsewhere (its KV handed)."""
    params = body.get("kv_transfer_params") if isinstance(body, dict) else None
    return isinstance(params, dict) and bool(params.get("do_remote_prefill"))


class EngineHttpServer(ThreadingHTTPServer):
    """A thread per connection, and a listen backlog an engine's (uvicorn's 2048), not
    socketserver's 5: a burst of clients is queued, never refused. With `tls` each
    connection's handshake is made on its own thread, so one slow or plain client
    holds up no other."""

    request_queue_size = 2048
    tls = None  # type: Optional[ssl.SSLContext]

    def finish_request(self, request, client_address) -> None:
        if self.tls is None:
            super().finish_request(request, client_address)
            return
        request.settimeout(_HANDSHAKE_S)
        try:
            wrapped = self.tls.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError):
            return  # a client that did not complete the handshake: nothing was read
        try:
            wrapped.settimeout(None)
            super().finish_request(wrapped, client_address)
        finally:
            with contextlib.suppress(OSError):
                wrapped.close()


_HANDSHAKE_S = 10.0


def tls_context(certfile: str, keyfile: str) -> ssl.SSLContext:
    """The server context of the certificate and key files the command names (TLS 1.2 on)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(certfile, keyfile)
    return context
