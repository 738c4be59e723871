"""An engine's HTTP port as the operator reaches it: an SSH tunnel, then httpx.

Engines listen on their node; nothing of theirs is exposed to the network
the console is on. Every health check, question and benchmark from the
console goes through an SSH tunnel to the node, so nodes behind a bastion
work exactly as direct ones. One tunnel per node and port, opened on first
use and kept until `close`.

A tunnel's near end is a Unix socket in a folder of the operator's (mode
0700, made for this `EngineReach`), never a TCP port: the console's machine
is shared too, and a port on its loopback would hand the node's engine (or
the gateway's admin socket) to every other user of that machine.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import ssl
import statistics
import tempfile
import time
from dataclasses import dataclass
from typing import Any

import asyncssh
import httpx

from llmgw_core.engines.identity import ENGINE_NAME, pinned_context
from llmgw_core.errors import BadInput, LlmgwError

HEALTH_TIMEOUT_S = 5.0
ASK_TIMEOUT_S = 300.0


class TunnelRefused(LlmgwError):
    """The node's sshd would not forward a port to the engine."""


@dataclass(frozen=True)
class ClientTls:
    """How to speak HTTPS through the tunnel.

    To a gateway: the name its certificate is for (checked, and sent as SNI) and
    the CA file to check it against (None: the system's). To an engine: `pinned`,
    its replica's own certificate (`engines.identity`), trusted alone — a process
    that took a dead engine's port cannot complete the handshake, so it is sent
    no request and no key.
    """

    server_name: str
    ca_file: str | None = None
    pinned: str | None = None

    @classmethod
    def pin(cls, cert_pem: str) -> ClientTls:
        """HTTPS to an engine that must present exactly `cert_pem`."""
        return cls(server_name=ENGINE_NAME, pinned=cert_pem)

    def context(self) -> ssl.SSLContext:
        """The verifying context.

        Raises:
            BadInput: the CA file cannot be read as certificates, or the pinned
                certificate is not one.
        """
        if self.pinned is not None:
            try:
                return pinned_context(self.pinned)
            except ValueError as exc:
                raise BadInput(str(exc)) from None
        try:
            return ssl.create_default_context(cafile=self.ca_file)
        except (OSError, ssl.SSLError) as exc:
            raise BadInput(f"the CA file {self.ca_file} cannot be read: {exc}") from None


def engine_tls(cert_pem: str | None) -> ClientTls | None:
    """How to reach a replica's engine: pinned to its certificate, or None (plain HTTP) for
    one that has none (`ReplicaView.tls_cert`)."""
    return ClientTls.pin(cert_pem) if cert_pem else None


def _https(base: str, tls: ClientTls | None) -> str:
    return "https://" + base.removeprefix("http://") if tls is not None else base


def _verify(tls: ClientTls | None) -> ssl.SSLContext | bool:
    return tls.context() if tls is not None else True


class KeyRefused(LlmgwError):
    """The engine (or gateway) answered 401: the request lacked its key, or had another."""


@dataclass(frozen=True)
class Tunnel:
    """One tunnel's near end: a Unix socket only the operator can open, and the address it reaches.

    `url` names the far end as the node sees it (`http://HOST:PORT`); requests
    go through the socket whatever the URL says, so make clients with `client`.
    """

    path: str
    host: str
    port: int

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def base(self, tls: ClientTls | None = None) -> str:
        """`url`, as `https://…` when the far end is spoken to with `tls`."""
        return _https(self.url, tls)

    def client(
        self,
        *,
        timeout: float,
        verify: ssl.SSLContext | bool = True,
        tls: ClientTls | None = None,
        **kwargs: Any,
    ) -> httpx.AsyncClient:
        """An httpx client whose every connection goes through this tunnel (checked with
        `tls`'s context when given, else `verify`)."""
        if tls is not None:
            verify = tls.context()
        transport = httpx.AsyncHTTPTransport(uds=self.path, verify=verify)
        return httpx.AsyncClient(transport=transport, timeout=timeout, **kwargs)

    def sync_client(self, *, timeout: float, verify: ssl.SSLContext | bool = True) -> httpx.Client:
        """The same, blocking (for the OpenAI SDK's `http_client`)."""
        transport = httpx.HTTPTransport(uds=self.path, verify=verify)
        return httpx.Client(transport=transport, timeout=timeout)


class EngineReach:
    """Tunnels to engines' ports on the nodes of one fleet, over the fleet's own connections.

    Args:
        fleet: the live fleet (`Fleet.connection(name)` lends each ready node's connection).
    """

    def __init__(self, fleet: Any) -> None:
        self._fleet = fleet
        self._tunnels: dict[tuple[str, int, str], tuple[asyncssh.SSHListener, Any, Tunnel]] = {}
        self._lock = asyncio.Lock()
        self._folder: str | None = None
        self._made = 0

    @property
    def fleet(self) -> Any:
        """The live fleet these tunnels go through (its agents answer ops too)."""
        return self._fleet

    async def connection(self, node: str) -> asyncssh.SSHClientConnection:
        """The fleet's SSH connection to `node` (for tunnels and file copies; not ours to close).

        Raises:
            LlmgwError: the node is not ready.
        """
        return self._fleet.connection(node)

    def _socket_path(self) -> str:
        if self._folder is None:
            # mkdtemp makes the folder 0700: only the operator can reach a socket inside it.
            self._folder = tempfile.mkdtemp(prefix="llmgw-tunnels-")
        self._made += 1
        return os.path.join(self._folder, f"t{self._made}")

    async def tunnel(self, node: str, port: int, host: str = "127.0.0.1") -> Tunnel:
        """The tunnel reaching `host:<port>` on `node` through SSH (opened on first use).

        `host` is the address on the node the port listens on: the loopback for
        the gateway's own ports, the management address an engine is bound to.

        A tunnel is reopened when the node's connection changed (it was lost and came back).

        Raises:
            TunnelRefused: the node's sshd refuses forwarding.
            LlmgwError: the node cannot be reached.
        """
        async with self._lock:
            key = (node, port, host)
            connection = await self.connection(node)
            found = self._tunnels.get(key)
            if found is not None and found[1] is not connection:
                found[0].close()
                found = None
            if found is None:
                path = self._socket_path()
                try:
                    listener = await connection.forward_local_path_to_port(path, host, port)
                except (asyncssh.Error, OSError) as exc:
                    raise TunnelRefused(
                        f"{node} would not open a tunnel to port {port}: {exc}",
                        "allow TCP forwarding in the node's sshd (AllowTcpForwarding local)",
                    ) from None
                found = (listener, connection, Tunnel(path=path, host=host, port=port))
                self._tunnels[key] = found
        return found[2]

    async def forget(self, node: str) -> None:
        """Close the tunnels to a node (it was lost, or its replica stopped)."""
        for key in [k for k in self._tunnels if k[0] == node]:
            listener, _, tunnel = self._tunnels.pop(key)
            listener.close()
            with contextlib.suppress(OSError):
                os.unlink(tunnel.path)

    async def close(self) -> None:
        """Close every tunnel (the connections are the fleet's) and remove their folder."""
        for node in list({k[0] for k in self._tunnels}):
            await self.forget(node)
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None


async def health_status(
    reach: EngineReach,
    node: str,
    port: int,
    path: str,
    host: str = "127.0.0.1",
    tls: ClientTls | None = None,
) -> int | None:
    """The HTTP status the engine's health route answers through the tunnel; None: port not
    open, or (with `tls`) whoever answers there does not hold the pinned certificate's key.

    Raises:
        TunnelRefused: the node's sshd refuses forwarding.
    """
    try:
        tunnel = await reach.tunnel(node, port, host)
    except TunnelRefused:
        raise
    except LlmgwError:
        return None
    try:
        async with tunnel.client(timeout=HEALTH_TIMEOUT_S, verify=_verify(tls)) as client:
            response = await client.get(_https(tunnel.url, tls) + path)
    except httpx.HTTPError:
        return None
    return response.status_code


async def health_answers(
    reach: EngineReach,
    node: str,
    port: int,
    path: str,
    host: str = "127.0.0.1",
    tls: ClientTls | None = None,
) -> bool:
    """True when the engine's health route answers 200 through the tunnel."""
    return await health_status(reach, node, port, path, host, tls) == 200


@dataclass(frozen=True)
class Answer:
    """One chat completion: its text, tokens and how long it took."""

    text: str
    completion_tokens: int
    latency_s: float


async def chat(
    reach: EngineReach,
    node: str,
    port: int,
    served_name: str,
    prompt: str,
    *,
    max_tokens: int = 64,
    client: httpx.AsyncClient | None = None,
    api_key: str | None = None,
    host: str = "127.0.0.1",
    tls: ClientTls | None = None,
) -> Answer:
    """One OpenAI chat completion from the engine on `node:port`, presenting `api_key` if given.

    Raises:
        LlmgwError: the engine did not answer, or answered with an error.
    """
    tunnel = await reach.tunnel(node, port, host)
    base = _https(tunnel.url, tls)
    body = {
        "model": served_name,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
    }
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    # Through the tunnel the address is 127.0.0.1: the certificate is checked for its node's name.
    extensions = {"sni_hostname": tls.server_name} if tls is not None else {}
    url = base + "/v1/chat/completions"
    started = time.perf_counter()
    try:
        if client is None:
            async with tunnel.client(timeout=ASK_TIMEOUT_S, verify=_verify(tls)) as own:
                response = await own.post(url, json=body, headers=headers, extensions=extensions)
        else:
            response = await client.post(url, json=body, headers=headers, extensions=extensions)
    except httpx.HTTPError as exc:
        raise LlmgwError(
            f"the engine on {node} did not answer: {exc or type(exc).__name__}"
        ) from None
    latency = time.perf_counter() - started
    if response.status_code == 401:
        raise KeyRefused(
            f"the engine on {node} refused the request (401): "
            + (
                "it wants a key, and none was sent"
                if not api_key
                else "the key sent is not its key"
            ),
            "give api_key_env: the variable holding the key it was started with",
        )
    if response.status_code != 200:
        raise LlmgwError(
            f"the engine on {node} answered {response.status_code}: {response.text[:200]}"
        )
    try:
        payload = response.json()
        text = payload["choices"][0]["message"]["content"] or ""
        tokens = int((payload.get("usage") or {}).get("completion_tokens") or len(text.split()))
    except (ValueError, KeyError, IndexError, TypeError):
        raise LlmgwError(
            f"the engine on {node} sent an answer that is not a chat completion: {response.text[:200]}"
        ) from None
    return Answer(text=text, completion_tokens=tokens, latency_s=latency)


def percentile(values: list[float], share: float) -> float:
    """The `share` percentile (0–1) of `values`, nearest rank."""
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(share * (len(ordered) - 1))))
    return ordered[index]


async def bench(
    reach: EngineReach,
    node: str,
    port: int,
    served_name: str,
    *,
    requests: int,
    concurrency: int,
    max_tokens: int = 64,
    prompt: str = "Write a short paragraph about GPUs.",
    api_key: str | None = None,
    host: str = "127.0.0.1",
    tls: ClientTls | None = None,
    duration_s: float | None = None,
) -> dict[str, Any]:
    """`requests` completions (or, with `duration_s`, as many as fit in it), `concurrency` at
    a time: tokens a second, latency percentiles, and the requests that failed, counted.

    A request that gets no answer or an error is counted in `failed` (the
    first three sentences in `errors`) rather than ending the measure: a roll
    or a fault is measured by how many failed.

    Raises:
        LlmgwError: not one request was answered (the first failure's own error).
    """
    answers: list[Answer] = []
    failures: list[LlmgwError] = []

    tunnel = await reach.tunnel(node, port, host)
    async with tunnel.client(timeout=ASK_TIMEOUT_S, verify=_verify(tls)) as client:

        async def one() -> None:
            try:
                answers.append(
                    await chat(
                        reach,
                        node,
                        port,
                        served_name,
                        prompt,
                        max_tokens=max_tokens,
                        client=client,
                        api_key=api_key,
                        host=host,
                        tls=tls,
                    )
                )
            except LlmgwError as exc:
                failures.append(exc)

        started = time.perf_counter()
        if duration_s is not None:
            deadline = started + duration_s

            async def sender() -> None:
                while time.perf_counter() < deadline:
                    await one()

            await asyncio.gather(*(sender() for _ in range(concurrency)))
        else:
            gate = asyncio.Semaphore(concurrency)

            async def gated() -> None:
                async with gate:
                    await one()

            await asyncio.gather(*(gated() for _ in range(requests)))
        wall_s = time.perf_counter() - started
    if not answers:
        if failures:
            raise failures[0]
        raise LlmgwError(f"no request was sent to {node} in {duration_s or 0:g} s")
    latencies = [a.latency_s for a in answers]
    tokens = sum(a.completion_tokens for a in answers)
    figures: dict[str, Any] = {
        "requests": len(answers) + len(failures),
        "concurrency": concurrency,
        "failed": len(failures),
        "completion_tokens": tokens,
        "wall_s": round(wall_s, 3),
        "tokens_per_s": round(tokens / wall_s, 1) if wall_s > 0 else None,
        "latency_s": {
            "p50": round(percentile(latencies, 0.5), 3),
            "p90": round(percentile(latencies, 0.9), 3),
            "p99": round(percentile(latencies, 0.99), 3),
            "mean": round(statistics.fmean(latencies), 3),
        },
    }
    if failures:
        figures["errors"] = [exc.sentence() for exc in failures[:3]]
    if duration_s is not None:
        figures["duration_s"] = duration_s
    return figures


async def close_quietly(reach: EngineReach) -> None:
    """Close `reach`, whatever state its connections are in."""
    with contextlib.suppress(asyncssh.Error, OSError):
        await reach.close()
