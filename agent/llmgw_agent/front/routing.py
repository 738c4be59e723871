"""The gateway's workers and how the front picks one (standard library).

The front routes by itself: it holds every ready replica's rank-0 engine as a
worker, in one pool per served model, and sends each request to one of them.
No router process runs beside it, so no router admin API listens on the
node's loopback, where every user of the node could add a worker of their own
and receive the operator's prompts with the engines' key (vllm-router 0.1.17
has no authentication on that API, no Unix socket and no TLS towards its
workers; docs/gateway.md has the whole comparison).

* Policies: `round_robin` (each model's workers in turn), `power_of_two` (of
  two healthy workers drawn at random, the one with fewer requests in flight:
  least load without a global scan) and `cache_aware` (a request goes to the
  worker its prompt's opening hashes to, so one conversation's prefix stays in
  one engine's cache, unless that worker is busier than the least loaded by
  more than `BALANCE_ABS` and `BALANCE_REL`: then to the least loaded — the
  rule of sglang/vllm-router's cache-aware policy, with a hash in place of
  their radix tree).
* A worker may carry its engine's certificate (PEM): the front then speaks
  TLS to it, pinned to exactly that certificate, so a process that took a
  dead engine's port cannot complete a handshake and is sent nothing — no
  prompt, no key.
* A worker whose connection fails (refused, reset, a handshake that does not
  verify) is out of rotation at once, and the request goes to another worker
  of its model (nothing had been sent). Every `HEALTH_INTERVAL_S` each worker's
  `/health` is asked on a connection of its own; a 200 brings it back.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import ssl
import sys
import time
from urllib.parse import urlsplit

from llmgw_agent.front.fair import PROBE_SHARE, gauges
from llmgw_agent.front.relay import whole_answer

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Dict, List, Optional, Tuple

POLICIES = ("round_robin", "power_of_two", "cache_aware")
HEALTH_INTERVAL_S = 2.0
HEALTH_TIMEOUT_S = 5.0
CONNECT_TIMEOUT_S = 5.0
BALANCE_ABS = 8
"""A cache-aware choice stands unless its worker has this many more requests in flight …"""
BALANCE_REL = 1.5
"""… and more than this times the least loaded worker's."""
AFFINITY_BYTES = 256
"""How much of a prompt's opening decides its cache-aware worker."""
MAX_IDLE_PER_WORKER = 64
METRICS_BYTES = 4 * 1024 * 1024
"""The most of an engine's `/metrics` the front reads for its gauges (one that streams)."""
METRICS_TIMEOUT_S = 2.0
"""How long one read of an engine's `/metrics` may take (every worker is read at once)."""


_HOP = {
    "connection",
    "keep-alive",
    "proxy-authorization",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "content-length",
    "authorization",
    "host",
    "expect",
}
"""Headers the front never passes on: its own hop's, and the client's key."""

ROLES = ("prefill", "decode")
"""A worker's side in a disaggregated service (`pd.py`); None: it does both."""


class Worker:
    """One engine behind the gateway: where it listens, what it serves, how it is doing.

    `adapters` are the LoRA adapters its engine holds beside `model`: name → the id
    llama-server numbers it by (a request for it gets `"lora": [{"id", "scale": 1}]`),
    or None where the engine takes the adapter's name as the request's model (vLLM,
    SGLang). `base` False: the engine applies its one adapter to every request
    (llama-cpp-python's server), so `model` itself is not routed to it.
    """

    def __init__(
        self,
        url: str,
        model: str,
        cert: Optional[str] = None,
        adapters: Optional[Dict[str, Optional[int]]] = None,
        base: bool = True,
        role: Optional[str] = None,
        bootstrap_port: Optional[int] = None,
    ) -> None:
        parts = urlsplit(url)
        if role is not None and role not in ROLES:
            raise ValueError("a worker's role is prefill or decode, not {!r}".format(role))
        if bootstrap_port is not None and (
            role != "prefill"
            or isinstance(bootstrap_port, bool)
            or not isinstance(bootstrap_port, int)
            or not 0 < bootstrap_port < 65536
        ):
            raise ValueError("a bootstrap port is a prefill worker's port number, 1 to 65535")
        self.role = role
        self.bootstrap_port = bootstrap_port
        """SGLang's handshake port of a prefill worker: the front then speaks SGLang's router
        protocol to its split (`pd.bootstrap`); None: vLLM's (`pd.prefill`)."""
        if parts.scheme not in ("http", "https") or not parts.hostname or not parts.port:
            raise ValueError("a worker's URL is http(s)://HOST:PORT, not {!r}".format(url))
        if parts.scheme == "https" and not cert:
            raise ValueError("an https worker needs its engine's certificate to pin")
        self.url = url
        self.model = model
        self.adapters = dict(adapters or {})
        for name, lora_id in self.adapters.items():
            if not isinstance(name, str) or not name or name == model:
                raise ValueError("an adapter's name is a text other than its model's")
            if lora_id is not None and (isinstance(lora_id, bool) or not isinstance(lora_id, int)):
                raise ValueError("an adapter's lora id is a whole number")
        self.base = bool(base) or not self.adapters
        self.host = parts.hostname
        self.port = parts.port
        self.cert = cert
        self.context = pinned_context(cert) if cert else None
        self.healthy = True
        self.in_flight = 0
        self.processed = 0
        self.failures = 0
        self.idle = []  # type: List[Tuple[asyncio.StreamReader, asyncio.StreamWriter]]
        self.capacity = None  # type: Optional[int]
        """The requests its engine runs at once, learnt when it queued (`fair.py`; None: not
        yet)."""
        self.probed_at = 0.0
        self.probe_share = PROBE_SHARE
        """The share of its capacity the next probe adds."""

    async def open(self) -> Tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A connection to the engine: a kept one, else a new one (its handshake verified).

        Raises:
            OSError, ssl.SSLError, asyncio.TimeoutError: the engine (or whoever
                holds its port) would not connect as the engine.
        """
        while self.idle:
            reader, writer = self.idle.pop()
            if not writer.is_closing() and not reader.at_eof():
                return reader, writer
            writer.close()
        return await asyncio.wait_for(
            asyncio.open_connection(
                self.host,
                self.port,
                ssl=self.context,
                server_hostname=ENGINE_NAME if self.context else None,
            ),
            CONNECT_TIMEOUT_S,
        )

    def serves(self, model: Optional[str]) -> bool:
        """True when a request for `model` (any, when None) may go to this worker."""
        if model is None:
            return True
        return (model == self.model and self.base) or model in self.adapters

    def served(self) -> List[str]:
        """The names it answers to: its model (where it serves it bare) and its adapters."""
        return ([self.model] if self.base else []) + sorted(self.adapters)

    def body_for(self, model: Optional[str], body: bytes) -> bytes:
        """The request's body as this worker's engine takes it: for an adapter llama-server
        numbers, the adapter asked for by its id and scale (every other one is off)."""
        lora_id = self.adapters.get(model) if model is not None else None
        if lora_id is None:
            return body
        try:
            parsed = json.loads(body.decode())
        except (ValueError, UnicodeDecodeError):
            return body
        if not isinstance(parsed, dict):
            return body
        parsed["lora"] = [{"id": lora_id, "scale": 1.0}]
        return json.dumps(parsed).encode()

    def request_head(
        self,
        method: str,
        target: str,
        headers: List[Tuple[str, str]],
        request_id: str,
        upstream_key: Optional[str],
        length: int,
    ) -> bytes:
        """The head of a request to this worker: the client's headers less those the front
        sets itself (the client's key never reaches an engine; the engines' key does)."""
        out = ["{} {} HTTP/1.1".format(method, target), "Host: {}:{}".format(self.host, self.port)]
        out += [
            "{}: {}".format(n, v)
            for n, v in headers
            if n.lower() not in _HOP and n.lower() != "x-request-id"
        ]
        out.append("X-Request-Id: {}".format(request_id))
        if upstream_key:
            out.append("Authorization: Bearer {}".format(upstream_key))
        out.append("Content-Length: {}".format(length))
        return ("\r\n".join(out) + "\r\n\r\n").encode("latin-1")

    def keep(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Keep a connection that can carry another request (or close it when enough are kept)."""
        if len(self.idle) < MAX_IDLE_PER_WORKER:
            self.idle.append((reader, writer))
        else:
            writer.close()

    def drop_connections(self) -> None:
        while self.idle:
            self.idle.pop()[1].close()

    def as_dict(self) -> dict:
        return {
            "url": self.url,
            "model_id": self.model,
            "adapters": self.adapters,
            "base": self.base,
            "is_healthy": self.healthy,
            "load": self.in_flight,
            "processed": self.processed,
            "failures": self.failures,
            "pinned": self.cert is not None,
            "capacity": self.capacity,
            "role": self.role,
            "bootstrap_port": self.bootstrap_port,
        }


ENGINE_NAME = "llmgw-engine"
"""The name in every engine certificate llmgw makes (sent as SNI; the pin is what counts)."""


def pinned_context(cert_pem: str) -> ssl.SSLContext:
    """A client context that trusts exactly one certificate: the engine's own.

    The certificate is self-signed and its key exists only in the engine's
    memory, so a handshake verifies only against that engine; the name is not
    what proves it (`check_hostname` off).

    Raises:
        ValueError: the text is not a certificate.
    """
    context = ssl.create_default_context(ssl.Purpose.SERVER_AUTH)
    context.check_hostname = False
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_verify_locations(cadata=cert_pem)
    except (ssl.SSLError, ValueError) as exc:
        raise ValueError(
            "a worker's certificate is not a PEM certificate: {}".format(exc)
        ) from None
    context.verify_mode = ssl.CERT_REQUIRED
    return context


def affinity_key(body: bytes) -> bytes:
    """The opening of a request's prompt (chat messages or a completion prompt), for cache-aware
    routing; the first bytes of the body when it is not a JSON object of either."""
    try:
        parsed = json.loads(body.decode() or "{}")
    except (ValueError, UnicodeDecodeError):
        return body[:AFFINITY_BYTES]
    if not isinstance(parsed, dict):
        return body[:AFFINITY_BYTES]
    prompt = parsed.get("messages", parsed.get("prompt"))
    text = json.dumps(prompt, sort_keys=True, separators=(",", ":"), default=str)
    return text.encode()[:AFFINITY_BYTES]


class Pool:
    """Every worker, by URL and by model, and the policy that picks among a model's."""

    def __init__(self, policy: str, log=None) -> None:
        if policy not in POLICIES:
            raise ValueError(
                "the policy is one of {}, not {!r}".format(", ".join(POLICIES), policy)
            )
        self.policy = policy
        self.health_path = "/health"
        self.workers = {}  # type: Dict[str, Worker]
        self._turn = {}  # type: Dict[str, int]
        self.retired = {}  # type: Dict[str, Tuple[str, int, int]]
        """Workers removed: URL → (model, requests, failures), so their counters stay counters."""
        self._random = random.Random()
        self._log = log or _stdout_line

    # --- the worker set ------------------------------------------------------

    def add(self, worker: Worker) -> None:
        """Hold `worker` (replacing one at the same URL)."""
        old = self.workers.pop(worker.url, None)
        if old is not None:
            old.drop_connections()
            worker.processed, worker.failures = old.processed, old.failures
        elif worker.url in self.retired:
            _, worker.processed, worker.failures = self.retired.pop(worker.url)
        self.workers[worker.url] = worker
        self._log(
            "Added worker with URL {} for model {}{}".format(
                worker.url, worker.model, " (its certificate pinned)" if worker.cert else ""
            )
        )

    def remove(self, url: str) -> bool:
        """Forget the worker at `url`; False when none is held there."""
        worker = self.workers.pop(url, None)
        if worker is None:
            return False
        worker.drop_connections()
        self.retired[url] = (worker.model, worker.processed, worker.failures)
        self._log("Removed worker with URL {} (model {})".format(url, worker.model))
        return True

    def split(self, model: Optional[str]) -> bool:
        """True when some worker of `model` is a prefill worker: its requests go there first."""
        return any(w.role == "prefill" and w.serves(model) for w in self.workers.values())

    def bootstrapped(self, model: Optional[str]) -> bool:
        """True when a prefill worker of `model` has a bootstrap port: an SGLang split, whose
        requests go to a prefill and a decode worker at once (`pd.bootstrap`)."""
        return any(
            w.role == "prefill" and w.bootstrap_port is not None and w.serves(model)
            for w in self.workers.values()
        )

    def models(self) -> List[str]:
        """The models and adapters some worker serves, sorted."""
        return sorted({name for worker in self.workers.values() for name in worker.served()})

    def parents(self) -> Dict[str, str]:
        """Each adapter some worker serves → the model it adapts."""
        return {name: worker.model for worker in self.workers.values() for name in worker.adapters}

    def base_of(self, model: Optional[str]) -> Optional[str]:
        """The model a request for `model` is served by: its parent for an adapter."""
        if model is None:
            return None
        return self.parents().get(model, model)

    def failed(self, worker: Worker, why: str) -> None:
        """A connection to `worker` failed: out of rotation until its health answers again."""
        worker.failures += 1
        worker.drop_connections()
        if worker.healthy:
            worker.healthy = False
            self._log("Worker {} is out of rotation: {}".format(worker.url, why))

    # --- choosing ------------------------------------------------------------

    def choose(
        self,
        model: Optional[str],
        body: bytes,
        tried: Tuple[str, ...] = (),
        role: Optional[str] = None,
    ) -> Optional[Worker]:
        """The worker for a request for `model` (any model when None), not one of `tried`;
        None when no healthy worker is left. A prefill worker is chosen only when asked for
        (`role`): it answers no client itself."""
        candidates = [
            w
            for w in self.workers.values()
            if w.healthy
            and w.url not in tried
            and w.serves(model)
            and (w.role == role if role == "prefill" else w.role != "prefill")
        ]
        if not candidates:
            return None
        candidates.sort(key=lambda w: w.url)
        if self.policy == "round_robin":
            turn = self._turn.get(model or "", 0)
            self._turn[model or ""] = turn + 1
            return candidates[turn % len(candidates)]
        if self.policy == "power_of_two":
            if len(candidates) == 1:
                return candidates[0]
            first, second = self._random.sample(candidates, 2)
            return first if first.in_flight <= second.in_flight else second
        key = affinity_key(body)
        chosen = max(candidates, key=lambda w: hashlib.blake2b(key + w.url.encode()).digest())
        least = min(candidates, key=lambda w: w.in_flight)
        if (
            chosen.in_flight - least.in_flight > BALANCE_ABS
            and chosen.in_flight > BALANCE_REL * least.in_flight
        ):
            return least
        return chosen

    # --- health --------------------------------------------------------------

    async def check_health(self) -> None:
        """Ask every worker's `/health` once, together; bring back or take out each."""
        await asyncio.gather(*(self._check(w) for w in list(self.workers.values())))

    async def _check(self, worker: Worker) -> None:
        try:
            status = await asyncio.wait_for(
                _health_status(worker, self.health_path), HEALTH_TIMEOUT_S
            )
        except (OSError, ssl.SSLError, asyncio.TimeoutError, asyncio.IncompleteReadError) as exc:
            if self.workers.get(worker.url) is worker:
                self.failed(worker, "its health check failed ({})".format(_why(exc)))
            return
        if self.workers.get(worker.url) is not worker:
            return
        if status == 200 and not worker.healthy:
            worker.healthy = True
            self._log("Worker {} is back in rotation".format(worker.url))
        elif status != 200 and worker.healthy:
            worker.healthy = False
            self._log(
                "Worker {} is out of rotation: /health answered {}".format(worker.url, status)
            )

    async def read_loads(self, said, key_of) -> None:
        """Read every healthy worker's `/metrics` once, together (with its engines' key,
        `key_of(model)`: llama-server keeps its metrics behind it), and hand each engine's
        running and waiting requests to `said(worker, running, waiting, now)`; a worker whose
        read fails or takes over `METRICS_TIMEOUT_S`, or whose engine publishes neither
        gauge, is passed over."""
        workers = [w for w in self.workers.values() if w.healthy]
        texts = await asyncio.gather(
            *(
                asyncio.wait_for(_metrics_text(w, key_of(w.model)), METRICS_TIMEOUT_S)
                for w in workers
            ),
            return_exceptions=True,
        )
        now = time.monotonic()
        for worker, text in zip(workers, texts):
            if not isinstance(text, str) or self.workers.get(worker.url) is not worker:
                continue
            running, waiting = gauges(text)
            if running is not None and waiting is not None:
                said(worker, running, waiting, now)

    async def watch(self) -> None:
        """Check every worker's health every `HEALTH_INTERVAL_S`, forever."""
        while True:
            await asyncio.sleep(HEALTH_INTERVAL_S)
            await self.check_health()

    # --- what it counted -----------------------------------------------------

    def metrics_text(self) -> str:
        """Per worker: requests sent, connection failures, requests in flight, health."""
        lines = [
            "# HELP llmgw_gateway_worker_requests_total Requests the front sent each worker.",
            "# TYPE llmgw_gateway_worker_requests_total counter",
        ]
        ordered = sorted(self.workers.values(), key=lambda w: w.url)
        gone = sorted(self.retired.items())
        for w in ordered:
            lines.append(_sample("llmgw_gateway_worker_requests_total", w, w.processed))
        for url, (model, processed, _) in gone:
            lines.append(_counted("llmgw_gateway_worker_requests_total", url, model, processed))
        lines += [
            "# HELP llmgw_gateway_worker_failures_total Requests each worker failed: connections "
            "refused or reset, handshakes that did not verify its engine, answers of 5xx.",
            "# TYPE llmgw_gateway_worker_failures_total counter",
        ]
        for w in ordered:
            lines.append(_sample("llmgw_gateway_worker_failures_total", w, w.failures))
        for url, (model, _, failures) in gone:
            lines.append(_counted("llmgw_gateway_worker_failures_total", url, model, failures))
        lines += [
            "# HELP llmgw_gateway_worker_in_flight Requests each worker holds now.",
            "# TYPE llmgw_gateway_worker_in_flight gauge",
        ]
        for w in ordered:
            lines.append(_sample("llmgw_gateway_worker_in_flight", w, w.in_flight))
        lines += [
            "# HELP llmgw_gateway_worker_healthy Whether each worker is in rotation (1) or not (0).",
            "# TYPE llmgw_gateway_worker_healthy gauge",
        ]
        for w in ordered:
            lines.append(_sample("llmgw_gateway_worker_healthy", w, 1 if w.healthy else 0))
        return "\n".join(lines) + "\n"


def _sample(name: str, worker: Worker, value: int) -> str:
    return _counted(name, worker.url, worker.model, value)


def _counted(name: str, url: str, model: str, value: int) -> str:
    return '{}{{worker="{}",model="{}"}} {}'.format(name, _label(url), _label(model), value)


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _why(exc: BaseException) -> str:
    text = str(exc).strip()
    return "{}: {}".format(type(exc).__name__, text) if text else type(exc).__name__


async def _own_connection(
    worker: Worker,
) -> Tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection to the worker outside its pool of kept ones (its pin checked as ever)."""
    return await asyncio.open_connection(
        worker.host,
        worker.port,
        ssl=worker.context,
        server_hostname=ENGINE_NAME if worker.context else None,
    )


async def _health_status(worker: Worker, path: str) -> int:
    """The status of the worker's health route, on a connection of its own."""
    reader, writer = await _own_connection(worker)
    try:
        writer.write(
            "GET {} HTTP/1.1\r\nHost: {}:{}\r\nConnection: close\r\n\r\n".format(
                path, worker.host, worker.port
            ).encode()
        )
        await writer.drain()
        line = await reader.readline()
    finally:
        writer.close()
    parts = line.split(b" ")
    if len(parts) < 2 or not parts[1].isdigit():
        raise ConnectionError("the worker's answer is not HTTP")
    return int(parts[1])


async def _metrics_text(worker: Worker, key: Optional[str]) -> str:
    """The worker's `/metrics`, on a connection of its own: read whole when its length is
    known (`relay.whole_answer`, within its bound), else at most `METRICS_BYTES` (a line cut
    there is dropped)."""
    reader, writer = await _own_connection(worker)
    try:
        keyed = "Authorization: Bearer {}\r\n".format(key) if key else ""
        writer.write(
            "GET /metrics HTTP/1.1\r\nHost: {}:{}\r\n{}Connection: close\r\n\r\n".format(
                worker.host, worker.port, keyed
            ).encode()
        )
        await writer.drain()
        head = await reader.readuntil(b"\r\n\r\n")
        if not head.startswith(b"HTTP/1.") or head[9:12] != b"200":
            raise ConnectionError("the worker's /metrics did not answer 200")
        whole = await whole_answer(head, reader, "GET")  # one of known length, read whole
        body = whole or b""
        while whole is None and len(body) < METRICS_BYTES:  # chunked, or up to the close
            more = await reader.read(METRICS_BYTES - len(body))
            if not more:
                break
            body += more
    finally:
        writer.close()
    if whole is None:
        if b"transfer-encoding: chunked" in head.lower():
            body = _unchunked(body)
        if len(body) >= METRICS_BYTES:
            body = body[: body.rfind(b"\n") + 1]
    return body.decode("utf-8", "replace")


def _unchunked(body: bytes) -> bytes:
    """A chunked body's data (what arrived of it)."""
    out, rest = [], body
    while rest:
        size_line, _, rest = rest.partition(b"\r\n")
        try:
            size = int(size_line.split(b";")[0], 16)
        except ValueError:
            break
        if size == 0:
            break
        out.append(rest[:size])
        rest = rest[size + 2 :]
    return b"".join(out)


def _stdout_line(text: str) -> None:
    sys.stdout.write("{} {}\n".format(time.strftime("%Y-%m-%dT%H:%M:%S"), text))
    sys.stdout.flush()
