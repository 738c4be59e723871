"""The console's side of the agent protocol, over one SSH process channel.

One channel per node carries every request: each gets an id, replies are
matched by id, so many requests are in flight at once. A streaming op yields
its events as an async iterator and ends with its result. Anything the agent
sends that we cannot read becomes an error for the request it belongs to (or
is recorded when it belongs to none) — never a crash of the reader. When the
channel goes away, every request still waiting fails with a sentence that
says so.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import itertools
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import asyncssh

from llmgw_agent import PROTOCOL_VERSION
from llmgw_agent.ops import Op
from llmgw_core.cancelling import cancel_and_wait
from llmgw_core.errors import LlmgwError

HELLO_TIMEOUT_S = 30.0
_STDERR_LINES_KEPT = 20
_PROTOCOL_ERRORS_KEPT = 20


class AgentError(LlmgwError):
    """An operation the agent refused or failed.

    Attributes:
        code: the wire code (`busy`, `not_found`, `bad_args`, … or `timeout`).
        said: the agent's own sentence, without the node and op this error names.
    """

    def __init__(
        self, message: str, fix: str = "", *, code: str = "failed", said: str | None = None
    ) -> None:
        super().__init__(message, fix)
        self.code = code
        self.said = said if said is not None else message


class AgentAbsent(LlmgwError):
    """The node does not have this agent yet (the serve command said so instead of hello)."""


class AgentLost(LlmgwError):
    """The channel to the agent closed (node down, connection lost, agent exited)."""


@dataclass
class PendingRequest:
    """A request sent and not yet answered: its future, and its events when it streams."""

    op: str
    future: asyncio.Future[Any]
    events: asyncio.Queue[dict[str, Any]] | None = None
    done: bool = field(default=False)


class AgentStream:
    """A streaming request: `async for event in stream`, then `stream.result`."""

    def __init__(self, client: AgentClient, request_id: int, pending: PendingRequest) -> None:
        self._client = client
        self.request_id = request_id
        self._pending = pending
        self.result: Any = None

    def __aiter__(self) -> AgentStream:
        return self

    async def __anext__(self) -> dict[str, Any]:
        assert self._pending.events is not None
        events = self._pending.events
        future = self._pending.future
        while True:
            if not events.empty():
                return events.get_nowait()
            if future.done():
                self.result = future.result()  # raises the request's error, if any
                raise StopAsyncIteration
            getter = asyncio.ensure_future(events.get())
            try:
                await asyncio.wait({getter, future}, return_when=asyncio.FIRST_COMPLETED)
            finally:
                if not getter.done():
                    getter.cancel()
            if getter.done() and not getter.cancelled():
                return getter.result()

    async def cancel(self) -> Any:
        """Ask the agent to end the stream; returns its final result."""
        if not self._pending.future.done():
            with contextlib.suppress(AgentError):
                await self._client.request(Op.CANCEL, {"target": self.request_id}, timeout_s=10)
        with contextlib.suppress(AgentError, AgentLost):
            self.result = await asyncio.wait_for(asyncio.shield(self._pending.future), 10)
        return self.result


class AgentClient:
    """Requests to one node's agent over one process channel."""

    def __init__(self, node: str, process: asyncssh.SSHClientProcess[str]) -> None:
        self.node = node
        self._process = process
        self._ids = itertools.count(1)
        self._pending: dict[int, PendingRequest] = {}
        self._stderr: collections.deque[str] = collections.deque(maxlen=_STDERR_LINES_KEPT)
        self.protocol_errors: collections.deque[str] = collections.deque(
            maxlen=_PROTOCOL_ERRORS_KEPT
        )
        self.hello: dict[str, Any] = {}
        self._lost: AgentLost | None = None
        self.closed: asyncio.Future[AgentLost] = asyncio.get_running_loop().create_future()
        self._tasks: list[asyncio.Task[None]] = []
        self._first: tuple[int, PendingRequest] | None = None

    @classmethod
    async def start(
        cls,
        node: str,
        connection: asyncssh.SSHClientConnection,
        command: str,
        *,
        hello_timeout_s: float = HELLO_TIMEOUT_S,
        first: tuple[str, dict[str, Any]] | None = None,
    ) -> AgentClient:
        """Run the agent on the connection and wait for its hello.

        `first` (op, args) is sent with the command, before the hello: the
        agent reads it as soon as it has said hello, so the first answer
        (a node's facts) comes one round trip sooner. Take it with `first_answer`.

        Raises:
            AgentAbsent: the command reported the agent missing (see `deploy.serve_command`).
            AgentLost: it exited or said nothing we can read within the timeout.
            AgentError: it speaks another protocol version.
        """
        try:
            process = await connection.create_process(command, encoding="utf-8", errors="replace")
        except (OSError, asyncssh.Error) as exc:
            raise AgentLost(f"cannot start the agent on {node}: {exc}") from None
        client = cls(node, process)
        client._tasks.append(asyncio.ensure_future(client._read_stderr()))
        if first is not None:
            client._first = client._send(*first, stream=False)
        try:
            hello_line = await asyncio.wait_for(process.stdout.readline(), hello_timeout_s)
        except (asyncio.TimeoutError, asyncssh.Error, OSError):
            hello_line = ""
        hello = _parse(hello_line)
        if isinstance(hello, dict) and hello.get("absent") is True:
            await client._stop_process()
            raise AgentAbsent(f"{node} does not have this agent yet")
        if not isinstance(hello, dict) or not isinstance(hello.get("hello"), dict):
            await client._stop_process()
            said = client._last_words() or (hello_line.strip()[:200] or "nothing")
            raise AgentLost(f"the agent on {node} did not start: it said {said}")
        client.hello = hello["hello"]
        if client.hello.get("protocol") != PROTOCOL_VERSION:
            await client._stop_process()
            raise AgentError(
                f"the agent on {node} speaks protocol {client.hello.get('protocol')!r}, "
                f"this console speaks {PROTOCOL_VERSION}",
                code="protocol",
            )
        client._tasks.append(asyncio.ensure_future(client._read_replies()))
        return client

    @property
    def agent_version(self) -> str | None:
        """The version the agent announced in its hello."""
        version = self.hello.get("agent_version")
        return str(version) if version is not None else None

    @property
    def is_open(self) -> bool:
        """False once the channel has closed."""
        return self._lost is None

    def _send(
        self, op: str, args: dict[str, Any] | None, stream: bool
    ) -> tuple[int, PendingRequest]:
        if self._lost is not None:
            raise AgentLost(self._lost.message)
        request_id = next(self._ids)
        loop = asyncio.get_running_loop()
        pending = PendingRequest(
            op=op, future=loop.create_future(), events=asyncio.Queue() if stream else None
        )
        # A caller that stopped waiting (cancelled, or a `first` request never asked for)
        # leaves its answer to nobody: the agent's loss failing it is no error to report.
        pending.future.add_done_callback(_nobody_waits)
        self._pending[request_id] = pending
        line = json.dumps({"id": request_id, "op": op, "args": args or {}}) + "\n"
        try:
            self._process.stdin.write(line)
        except (OSError, asyncssh.Error) as exc:
            self._pending.pop(request_id, None)
            raise AgentLost(f"the channel to the agent on {self.node} is closed: {exc}") from None
        return request_id, pending

    async def request(
        self, op: str, args: dict[str, Any] | None = None, *, timeout_s: float | None = None
    ) -> Any:
        """Send one request and return its result.

        Raises:
            AgentError: the agent answered with an error, or did not answer in time.
            AgentLost: the channel closed before the answer came.
        """
        return await self._answer(*self._send(op, args, stream=False), timeout_s)

    async def first_answer(
        self, op: str, args: dict[str, Any] | None = None, *, timeout_s: float | None = None
    ) -> Any:
        """The answer to the `first` request sent with `start` (once), else `request(op, args)`.

        Raises:
            AgentError, AgentLost: as `request`.
        """
        first, self._first = self._first, None
        if first is None or first[1].op != op:
            return await self.request(op, args, timeout_s=timeout_s)
        return await self._answer(*first, timeout_s)

    async def _answer(
        self, request_id: int, pending: PendingRequest, timeout_s: float | None
    ) -> Any:
        try:
            return await asyncio.wait_for(asyncio.shield(pending.future), timeout_s)
        except asyncio.TimeoutError:
            self._pending.pop(request_id, None)
            raise AgentError(
                f"the agent on {self.node} did not answer {pending.op} within {timeout_s:g} s",
                code="timeout",
            ) from None

    def stream(self, op: str, args: dict[str, Any] | None = None) -> AgentStream:
        """Start a streaming request; iterate it for events, then read `.result`."""
        request_id, pending = self._send(op, args, stream=True)
        return AgentStream(self, request_id, pending)

    async def _read_replies(self) -> None:
        reason = "the agent's output ended"
        try:
            while True:
                line = await self._process.stdout.readline()
                if not line:
                    break
                self._dispatch(line)
        except (OSError, asyncssh.Error) as exc:
            reason = f"the connection was lost ({exc})"
        finally:
            # Whatever ended the reader, nobody may wait for an answer forever.
            await self._lose(reason)

    async def _read_stderr(self) -> None:
        with contextlib.suppress(OSError, asyncssh.Error):
            async for line in self._process.stderr:
                if line.strip():
                    self._stderr.append(line.rstrip())

    def _dispatch(self, line: str) -> None:
        message = _parse(line)
        if not isinstance(message, dict):
            self._protocol_error(f"not a JSON object: {line.strip()[:200]!r}")
            return
        request_id = message.get("id")
        ours = isinstance(request_id, int) and not isinstance(request_id, bool)
        pending = self._pending.get(request_id) if ours else None
        if pending is None:
            error = message.get("error")
            shown = error.get("message") if isinstance(error, dict) else line.strip()[:200]
            self._protocol_error(f"a reply to no request of ours: {shown}")
            return
        if "event" in message and pending.events is not None:
            event = message["event"]
            if isinstance(event, dict):
                pending.events.put_nowait(event)
            else:
                self._protocol_error(f"an event that is not an object for {pending.op}")
            return
        self._pending.pop(request_id, None)
        if message.get("ok") is True and "result" in message:
            pending.future.set_result(message["result"])
            return
        error = message.get("error")
        if message.get("ok") is False and isinstance(error, dict):
            code = str(error.get("code") or "failed")
            text = str(error.get("message") or "no message")
            pending.future.set_exception(
                AgentError(f"{self.node}: {pending.op} failed: {text}", code=code, said=text)
            )
            return
        pending.future.set_exception(
            AgentError(
                f"{self.node}: the agent's answer to {pending.op} is malformed: "
                f"{line.strip()[:200]!r}",
                code="malformed",
            )
        )

    def _protocol_error(self, sentence: str) -> None:
        self.protocol_errors.append(sentence)

    def _last_words(self) -> str:
        return self._stderr[-1] if self._stderr else ""

    async def _lose(self, reason: str, *, wait_for_exit: bool = True) -> None:
        if self._lost is not None:
            return
        if wait_for_exit:
            with contextlib.suppress(asyncio.TimeoutError, asyncssh.Error, OSError):
                await asyncio.wait_for(self._process.wait_closed(), 1.0)
        status = self._process.exit_status
        words = self._last_words()
        sentence = f"the agent on {self.node} stopped answering: {reason}"
        if status is not None and status >= 0:
            sentence += f"; it exited with status {status}"
        if words:
            sentence += f" (its last words: {words})"
        self._lost = AgentLost(sentence)
        for request_id, pending in list(self._pending.items()):
            self._pending.pop(request_id, None)
            if not pending.future.done():
                pending.future.set_exception(
                    AgentLost(f"{pending.op} on {self.node} got no answer: {sentence}")
                )
        if not self.closed.done():
            self.closed.set_result(self._lost)

    async def _stop_process(self, *, wait_for_exit: bool = True) -> None:
        with contextlib.suppress(OSError, asyncssh.Error):
            self._process.stdin.write_eof()
        self._process.close()
        if wait_for_exit:
            with contextlib.suppress(asyncio.TimeoutError, asyncssh.Error, OSError):
                await asyncio.wait_for(self._process.wait_closed(), 2.0)

    async def close(self, *, wait_for_exit: bool = True) -> None:
        """End the agent (end of input makes it exit) and fail what still waits.

        `wait_for_exit=False` sends the end of input and returns: the caller is
        closing the connection too and does not need the agent's exit status.
        """
        await self._stop_process(wait_for_exit=wait_for_exit)
        await self._lose("the console closed the channel", wait_for_exit=wait_for_exit)
        await cancel_and_wait(*self._tasks)

    async def events(self, op: str, args: dict[str, Any] | None = None) -> AsyncIterator[Any]:
        """Convenience: yield a stream's events; cancels the stream when left early."""
        stream = self.stream(op, args)
        finished = False
        try:
            async for event in stream:
                yield event
            finished = True
        finally:
            if not finished:
                await stream.cancel()


def _parse(line: str) -> Any:
    try:
        return json.loads(line)
    except ValueError:
        return None


def _nobody_waits(future: asyncio.Future[Any]) -> None:
    """Mark a request's failure as seen; whoever awaits the future still gets it raised."""
    if not future.cancelled():
        future.exception()
