"""The front in prefill/decode mode: a request to a prefill worker first, then to a decode worker.

When the workers of a model include prefill workers (a disaggregated
service), a completion goes through two of them, as vllm-router's and
vLLM's own disaggregation proxy send it for the NixlConnector:

1. to a prefill worker, as the client sent it but answered whole and one
   token long (`stream` off, `max_tokens` 1), with `kv_transfer_params`
   asking it to keep the prompt's KV for a remote decode
   (`do_remote_decode`);
2. its answer's `kv_transfer_params` (where that KV is: the engine, its
   blocks, host and port) put into the client's request, which then goes to a
   decode worker like any request, streamed or not: the decode worker pulls
   the KV and writes the answer.

The prefill leg is the front's own request: its answer is never shown to
the client, its tokens are not counted (the decode worker's answer counts
the prompt too), and a prefill worker that will not connect is out of
rotation like any worker. An answer of the prefill worker other than 200 is
the client's answer (a request the engine refused is refused there first).

An SGLang split (its prefill workers joined with their bootstrap port) is
sent as sglang-router's PD mode and SGLang's `mini_lb` send it (`bootstrap`):
the client's request goes to a prefill and a decode worker at once, each with
`bootstrap_host` and `bootstrap_port` (the prefill worker's address and
handshake port) and a random 63-bit `bootstrap_room` added. The decode worker
finds the prefill worker by them and waits for that room's KV. The decode
worker's answer is the client's; the prefill leg runs beside it, unstreamed
(its answer is read whole and dropped, never shown).
"""

from __future__ import annotations

import asyncio
import json
import random
import ssl

from llmgw_agent.front.relay import whole_answer

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import List, Optional, Set, Tuple

    from llmgw_agent.front.routing import Pool, Worker

PD_ROUTES = ("/v1/chat/completions", "/v1/completions")
"""The routes a prefill worker takes part in (the others go to a decode worker alone)."""

PREFILL_TIMEOUT_S = 600.0
"""How long a prefill may take (a long prompt on a busy worker)."""

ROOMS = 1 << 63
"""SGLang's bootstrap rooms are drawn from 0 to 2**63 - 1, as its router draws them."""

_legs: Set[asyncio.Task] = set()
"""The SGLang prefill legs running beside their decode legs (held so none is collected)."""


def prefill_body(body: bytes) -> Optional[bytes]:
    """The request as the prefill worker gets it; None when the body is no JSON object."""
    try:
        parsed = json.loads(body.decode())
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(parsed, dict):
        return None
    parsed["kv_transfer_params"] = {
        "do_remote_decode": True,
        "do_remote_prefill": False,
        "remote_engine_id": None,
        "remote_block_ids": None,
        "remote_host": None,
        "remote_port": None,
    }
    parsed["stream"] = False
    parsed.pop("stream_options", None)
    parsed["max_tokens"] = 1
    if "max_completion_tokens" in parsed:
        parsed["max_completion_tokens"] = 1
    return json.dumps(parsed).encode()


def decode_body(body: bytes, prefill_answer: bytes) -> Optional[bytes]:
    """The client's request with the prefill worker's `kv_transfer_params`; None when its
    answer carries none (the decode worker would then compute the prompt again)."""
    try:
        params = json.loads(prefill_answer.decode()).get("kv_transfer_params")
        parsed = json.loads(body.decode())
    except (ValueError, UnicodeDecodeError, AttributeError):
        return None
    if not isinstance(params, dict) or not isinstance(parsed, dict):
        return None
    parsed["kv_transfer_params"] = params
    return json.dumps(parsed).encode()


async def _exchange(
    worker: Worker, head: bytes, body: bytes
) -> Tuple[bytes, Optional[bytes], asyncio.StreamReader, asyncio.StreamWriter]:
    """One request sent to `worker` and its answer read: (status head, whole body, reader,
    writer)."""
    reader, writer = await worker.open()
    try:
        writer.write(head + body)
        status_head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), PREFILL_TIMEOUT_S)
        whole = await asyncio.wait_for(whole_answer(status_head, reader, "POST"), PREFILL_TIMEOUT_S)
    except BaseException:
        writer.close()
        raise
    return status_head, whole, reader, writer


async def prefill(
    pool: Pool,
    model: Optional[str],
    target: str,
    headers: List[Tuple[str, str]],
    body: bytes,
    upstream_key: Optional[str],
    request_id: str,
) -> Tuple[Optional[bytes], Optional[Tuple[bytes, bytes]]]:
    """The prefill leg: (the decode worker's body, None), or (None, the answer to give the
    client: a prefill worker's refusal, or a 503 when none is healthy).

    Raises:
        Nothing of the network: a prefill worker that fails is out of rotation and the next
        one is tried.
    """
    sent = prefill_body(body)
    if sent is None:
        return body, None  # not JSON: the decode worker refuses it as the engine does
    tried = ()  # type: Tuple[str, ...]
    while True:
        worker = pool.choose(model, sent, tried, role="prefill")
        if worker is None:
            message = b'{"error": "no prefill worker of the gateway is healthy"}'
            return None, (b"HTTP/1.1 503 Service Unavailable\r\n", message)
        tried += (worker.url,)
        head = worker.request_head(
            "POST", target, headers, request_id + "-prefill", upstream_key, len(sent)
        )
        worker.in_flight += 1
        worker.processed += 1
        try:
            status_head, whole, reader, writer = await _exchange(worker, head, sent)
        except (OSError, ssl.SSLError, asyncio.IncompleteReadError, asyncio.TimeoutError) as exc:
            pool.failed(worker, "it failed a prefill ({})".format(type(exc).__name__))
            continue
        finally:
            worker.in_flight -= 1
        if whole is None or b"connection: close" in status_head.lower():
            writer.close()
        else:
            worker.keep(reader, writer)
        if status_head[9:12] != b"200" or whole is None:
            first = status_head.split(b"\r\n", 1)[0] + b"\r\n"
            return None, (first, whole or b"{}")
        return decode_body(body, whole) or body, None


def bootstrap_body(body: bytes, host: str, port: int, room: int) -> Optional[bytes]:
    """The client's request with SGLang's bootstrap fields added; None when the body is no
    JSON object (the decode worker then refuses it as the engine does)."""
    try:
        parsed = json.loads(body.decode())
    except (ValueError, UnicodeDecodeError):
        return None
    if not isinstance(parsed, dict):
        return None
    parsed["bootstrap_host"] = "[{}]".format(host) if ":" in host else host
    parsed["bootstrap_port"] = port
    parsed["bootstrap_room"] = room
    return json.dumps(parsed).encode()


def unstreamed(body: bytes) -> bytes:
    """A JSON request with its stream turned off: what the prefill leg is sent, read whole."""
    parsed = json.loads(body.decode())
    parsed["stream"] = False
    parsed.pop("stream_options", None)
    return json.dumps(parsed).encode()


async def bootstrap(
    pool: Pool,
    model: Optional[str],
    target: str,
    headers: List[Tuple[str, str]],
    body: bytes,
    upstream_key: Optional[str],
    request_id: str,
) -> Tuple[Optional[bytes], Optional[Tuple[bytes, bytes]]]:
    """SGLang's two legs: the prefill leg sent and left running, and (the decode worker's body,
    None); or (None, a 503 when no prefill worker is healthy).

    Raises:
        Nothing of the network: a prefill worker that will not connect is out of rotation and
        the next one is tried; one that fails after the request was sent is out of rotation
        too (its decode worker then waits for a room that never fills, and says so).
    """
    tried = ()  # type: Tuple[str, ...]
    while True:
        worker = pool.choose(model, body, tried, role="prefill")
        if worker is None:
            message = b'{"error": "no prefill worker of the gateway is healthy"}'
            return None, (b"HTTP/1.1 503 Service Unavailable\r\n", message)
        tried += (worker.url,)
        sent = bootstrap_body(
            body, worker.host, int(worker.bootstrap_port or 0), random.randrange(ROOMS)
        )
        if sent is None:
            return body, None
        try:
            reader, writer = await worker.open()
        except (OSError, ssl.SSLError, asyncio.TimeoutError) as exc:
            pool.failed(worker, "it would not connect ({})".format(type(exc).__name__))
            continue
        leg = unstreamed(sent)
        head = worker.request_head(
            "POST", target, headers, request_id + "-prefill", upstream_key, len(leg)
        )
        worker.in_flight += 1
        worker.processed += 1
        writer.write(head + leg)
        task = asyncio.ensure_future(_prefill_leg(pool, worker, reader, writer))
        _legs.add(task)
        task.add_done_callback(_legs.discard)
        return sent, None


async def _prefill_leg(
    pool: Pool, worker: Worker, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    """Read the prefill worker's answer whole and drop it; its connection kept when it can be."""
    try:
        status_head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), PREFILL_TIMEOUT_S)
        whole = await asyncio.wait_for(whole_answer(status_head, reader, "POST"), PREFILL_TIMEOUT_S)
    except (OSError, ssl.SSLError, asyncio.IncompleteReadError, asyncio.TimeoutError) as exc:
        writer.close()
        pool.failed(worker, "it failed a prefill ({})".format(type(exc).__name__))
        return
    finally:
        worker.in_flight -= 1
    if whole is None or b"connection: close" in status_head.lower():
        writer.close()
    else:
        worker.keep(reader, writer)
