"""Handshake slots, and dialling a node before its handshake so a silent one gives its slot back.

A connection takes a slot of its server address's gate from the moment it
dials until it is logged in: that is what sshd's `MaxStartups` counts. The
gates that bound handshakes (all of them, and those through one bastion:
their CPU) are taken once the node's banner is in, for the handshake and
login only; dials run ahead of them by a bounded number (`DIALS_AHEAD`
times the handshake limit), so the banners of the next nodes are already
there when a slot frees, and a silent node waits for its banner without
holding a handshake slot at all. A healthy sshd sends its banner
(`SSH-2.0-…`) the moment it accepts; a node that accepts TCP and then says
nothing (a hung sshd, a black-holed port, a node in a kernel panic) would hold
its slots until the connect timeout. Here it holds them `grace_s` at most,
then waits for its banner outside the gates, up to `timeout_s`, and takes
its slots again only if the banner comes. So a hundred hung nodes cost the
fleet a second of slots each, not the whole timeout.

The dialled stream is then handed to asyncssh as its tunnel: asyncssh runs
the handshake over the very bytes we already read, nothing is dialled twice.
Its writes go out once per turn of the event loop (`CoalescedWrites`): every
node behind a bastion shares one TCP socket, and one send() per SSH packet
was the console's biggest cost at 2,048 nodes (a loopback or LAN send is a
system call that also runs the receiving side's network stack).
"""

from __future__ import annotations

import asyncio
import contextlib
from dataclasses import dataclass
from typing import Any

import asyncssh

from llmgw_core.errors import LlmgwError
from llmgw_core.fleet.lag import LoopLag

DIALS_AHEAD = 32
"""Dials in flight per handshake slot (banner waits); each is one idle TCP
connection or forwarded channel, a pre-auth sshd child on its node. Enough
that a silent node late in the inventory starts its banner wait well before
the handshakes reach it; a dialled node waits for its handshake about
(32 x limit) / handshakes-per-second, far below sshd's LoginGraceTime
(120 s) unless a bastion manages under 3 handshakes a second."""


class BannerTimeout(LlmgwError):
    """A node accepted TCP (or not even that) and sent no SSH banner in time."""


@dataclass
class ConnectStats:
    """What the gates saw: slots in use now and at most, silent nodes."""

    in_flight: int = 0
    peak_in_flight: int = 0
    waiting_for_banner: int = 0
    peak_waiting_for_banner: int = 0
    dialled: int = 0
    silent: int = 0


class Gates:
    """One slot of each semaphore, taken in a fixed order (no deadlock).

    Handshake gates are counted in `stats.in_flight`; dial gates are not.
    """

    def __init__(
        self, semaphores: list[asyncio.Semaphore], stats: ConnectStats, *, counted: bool = True
    ) -> None:
        self._semaphores = semaphores
        self.stats = stats
        self._counted = counted
        self._held = False

    async def acquire(self) -> None:
        """Take a slot of every gate (waits while any is full)."""
        taken: list[asyncio.Semaphore] = []
        try:
            for semaphore in self._semaphores:
                await semaphore.acquire()
                taken.append(semaphore)
        except BaseException:
            for semaphore in taken:
                semaphore.release()
            raise
        self._held = True
        if self._counted:
            self.stats.in_flight += 1
            self.stats.peak_in_flight = max(self.stats.peak_in_flight, self.stats.in_flight)

    def release(self) -> None:
        """Give every slot back (nothing when none is held)."""
        if not self._held:
            return
        self._held = False
        if self._counted:
            self.stats.in_flight -= 1
        for semaphore in reversed(self._semaphores):
            semaphore.release()

    async def __aenter__(self) -> Gates:
        await self.acquire()
        return self

    async def __aexit__(self, *_exc: object) -> None:
        self.release()


class CoalescedWrites:
    """A transport whose writes of one loop turn leave in one write of the transport below.

    Behind a bastion the transport below is the bastion connection's channel,
    so several of a node's SSH packets become one channel message (one
    encryption on the outer connection); on TCP they become one send().
    Everything but writing is the transport's own.
    """

    def __init__(self, transport: Any) -> None:
        self._transport = transport
        self._pending: list[bytes] = []

    def write(self, data: bytes) -> None:
        if not data:
            return
        if not self._pending:
            asyncio.get_running_loop().call_soon(self._flush)
        self._pending.append(bytes(data))

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def _flush(self) -> None:
        if not self._pending:
            return
        data = b"".join(self._pending)
        self._pending.clear()
        if not self._transport.is_closing():
            self._transport.write(data)

    def get_write_buffer_size(self) -> int:
        return int(self._transport.get_write_buffer_size()) + sum(map(len, self._pending))

    def write_eof(self) -> None:
        self._flush()
        self._transport.write_eof()

    def close(self) -> None:
        self._flush()
        self._transport.close()

    def abort(self) -> None:
        self._flush()  # a disconnect message written just before still leaves
        self._transport.abort()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._transport, name)


class DialledStream:
    """A stream to a node whose banner has arrived; asyncssh's tunnel for that node.

    It is the protocol of the TCP connection (or of the bastion's forwarded
    channel) until asyncssh asks for the connection; then it passes every
    event on to asyncssh's session, starting with the bytes already read.
    """

    def __init__(self) -> None:
        self.banner: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.transport: Any = None
        self._buffer = bytearray()
        self._session: Any = None
        self._started = False

    # --- the stream's protocol (asyncio.Protocol and asyncssh's SSHTCPSession) ---

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def session_started(self) -> None:
        if self._session is not None:
            self._session.session_started()
        else:
            self._started = True

    def data_received(self, data: bytes, datatype: Any = None) -> None:
        if self._session is not None:
            self._session.data_received(data, datatype)
            return
        self._buffer += data
        if not self.banner.done():
            self.banner.set_result(None)

    def eof_received(self) -> bool | None:
        if self._session is not None:
            return self._session.eof_received()
        self._fail(ConnectionResetError("it closed the connection before its SSH banner"))
        return False

    def connection_lost(self, exc: Exception | None = None) -> None:
        if self._session is not None:
            self._session.connection_lost(exc)
            return
        self._fail(exc or ConnectionResetError("it closed the connection before its SSH banner"))

    def pause_writing(self) -> None:
        if self._session is not None:
            self._session.pause_writing()

    def resume_writing(self) -> None:
        if self._session is not None:
            self._session.resume_writing()

    def _fail(self, exc: BaseException) -> None:
        if not self.banner.done():
            self.banner.set_exception(exc)

    # --- asyncssh's tunnel ---

    async def create_connection(self, session_factory: Any, _host: str, _port: int) -> Any:
        """Hand the open stream to asyncssh's new connection, banner bytes first."""
        session = session_factory()
        self._session = session
        transport = CoalescedWrites(self.transport)
        session.connection_made(transport)
        if self._started:
            session.session_started()
        if self._buffer:
            buffered, self._buffer = bytes(self._buffer), bytearray()
            session.data_received(buffered, None)
        return transport, session

    def abort(self) -> None:
        """Drop the stream (a node given up on)."""
        if self.transport is not None:
            with contextlib.suppress(Exception):
                self.transport.abort()


async def _dial(stream: DialledStream, via: Any, host: str, port: int) -> None:
    if via is None:
        await asyncio.get_running_loop().create_connection(lambda: stream, host, port)
    else:
        await via.create_connection(lambda: stream, host, port)
    await stream.banner


async def open_with_banner(
    via: asyncssh.SSHClientConnection | None,
    host: str,
    port: int,
    gates: Gates,
    *,
    grace_s: float,
    timeout_s: float,
    lag: LoopLag,
) -> DialledStream:
    """Dial `host:port` (through `via` when given) and wait for the node's first bytes.

    Called with `gates` held; returns with them held. After `grace_s` without
    a banner the slots are given back while it keeps waiting, and taken again
    when the banner comes. Both times leave out the console's own lateness
    (`lag`): a banner that came while the loop could not run is not late.

    Raises:
        BannerTimeout: nothing came within `timeout_s`.
        OSError, asyncssh.Error: the dial itself failed (refused, unreachable).
    """
    stream = DialledStream()
    stats = gates.stats
    stats.dialled += 1
    dial = asyncio.ensure_future(_dial(stream, via, host, port))
    try:
        if not await lag.wait_done(dial, min(grace_s, timeout_s)):
            gates.release()
            stats.waiting_for_banner += 1
            stats.peak_waiting_for_banner = max(
                stats.peak_waiting_for_banner, stats.waiting_for_banner
            )
            try:
                done = await lag.wait_done(dial, max(timeout_s - grace_s, 0.0))
            finally:
                stats.waiting_for_banner -= 1
            if not done:
                stats.silent += 1
                what = (
                    "accepted the connection but sent no SSH banner"
                    if stream.transport is not None
                    else "did not accept a connection"
                )
                raise BannerTimeout(
                    f"{what} within {timeout_s:g} s",
                    "a hung sshd or a black-holed port; it is retried with backoff",
                )
            await gates.acquire()
        dial.result()
    except BaseException:
        dial.cancel()
        with contextlib.suppress(BaseException):
            await dial
        stream.abort()
        raise
    return stream
