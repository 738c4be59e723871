"""The agent's side of the wire: JSON lines on stdin/stdout.

The console runs `python3 agent.pyz serve` on one SSH channel and speaks this:

* first the agent writes `{"hello": {agent_version, protocol, python,
  capabilities, pid, replay, runs_from}}` (`runs_from`: `cache`, the folder
  unpacked beside the zipapp, see `zip_main.py`; `zip`; or `source`);
* a request `{"id": str|int, "op": str, "args": {...}}` gets
  `{"id", "ok": true, "result": ...}` or
  `{"id", "ok": false, "error": {"code", "message"}}`;
* a streaming op (`shard.logs`, `download.watch`, `fabric.server`) first sends
  `{"id", "event": {...}}` lines, then its final result line;
* `{"id": X, "op": "cancel", "args": {"target": Y}}` ends stream Y (which then
  sends its final result, with `"cancelled": true`) and answers X with
  `{"cancelled": bool}`.

Operations: each is declared once, beside the state it touches, with its
name, its arguments and its handler (`ops.py`: `@operation`); the handler's
docstring says what it takes and answers. This module knows only `ping` and
`cancel`, which are the channel's own, and imports the modules that declare
the rest: `discover/ops.py` (`facts`, `doctor`), `shards/ops.py` (`claims`,
`shard.*`), `shards/lease_ops.py` (`lease.*`, `service.count[s]`), `ports.py`
(`port.free`), `downloads.py` (`download.watch`), `front/ops.py`
(`gateway.call`), `fabric/ops.py` (`fabric.*`).

Requests run on their own threads, so many are in flight at once; one lock
guards stdout and every line is flushed. A bad line (not JSON, not an object,
unknown op, wrong args, more than `MAX_LINE_BYTES`) is answered with an error
(`"id": null` when the line had no usable id) and serving goes on; end of
stdin ends the agent cleanly.

Error codes: `bad_json`, `bad_request` (no id/op, or an id already in flight),
`too_large`, `unknown_op`, `bad_args`, `unavailable` (a part this agent lacks),
`not_found` (no such shard), `busy` (a GPU held; a running shard forgotten),
`exists` (that shard id is taken), `held` (a service's lease is another's),
`lost` (a lease renewed or released is no longer ours), `refused` (a path outside the agent's own
folders and the model directories, see `allowed_paths.py`), `failed`, `internal`.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import time

import llmgw_agent
from llmgw_agent import PROTOCOL_VERSION, __version__, downloads, paths, ports
from llmgw_agent.discover import ops as discover_ops
from llmgw_agent.fabric import ops as fabric_ops
from llmgw_agent.front import ops as front_ops
from llmgw_agent.op_args import Arg, OpError, checked
from llmgw_agent.ops import OPERATIONS, Connection, Op, end_connection, operation
from llmgw_agent.shards import lease_ops
from llmgw_agent.shards import ops as shard_ops

TYPE_CHECKING = False  # `typing` costs ms of every agent start; annotations are strings here
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, Optional

MAX_LINE_BYTES = 1024 * 1024
"""A request line longer than this is answered `too_large` and skipped."""

_EXIT_JOIN_S = 2.0
"""How long, after stdin ends, running requests get to finish their replies."""

DECLARING_MODULES = (discover_ops, shard_ops, lease_ops, ports, downloads, front_ops, fabric_ops)
"""The modules whose `@operation`s this agent serves (imported for that alone)."""


class Stream:
    """What an operation sees of its request: a way to send events, a cancel flag, and its
    connection (the replay folder, what it holds until it ends)."""

    def __init__(self, request_id: Any, channel: "Channel", connection: Connection) -> None:
        self.request_id = request_id
        self.cancelled = threading.Event()
        self.connection = connection
        self._channel = channel

    @property
    def replay(self) -> Optional[str]:
        """The capture this agent reads instead of the hardware (None on a real node)."""
        return self.connection.replay

    def emit(self, event: dict) -> None:
        """Send one `{"id", "event"}` line for this request."""
        self._channel.send({"id": self.request_id, "event": event})


class Channel:
    """The agent's stdout: whole JSON lines, one writer at a time, flushed."""

    def __init__(self, out) -> None:
        self._out = out
        self._lock = threading.Lock()
        self.closed = False

    def send(self, message: dict) -> None:
        """Write one message as a line; a vanished reader only closes the channel."""
        line = (json.dumps(message, separators=(",", ":"), default=str) + "\n").encode()
        with self._lock:
            if self.closed:
                return
            try:
                self._out.write(line)
                self._out.flush()
            except (BrokenPipeError, OSError, ValueError):
                self.closed = True


if TYPE_CHECKING:
    Handler = Callable[[dict, Stream], Any]


CANCEL_ARGS = {"target": Arg((str, int))}


@operation(Op.PING, args={}, inline=True)
def ping(_given: dict, _call: Any) -> dict:
    """`ping` → `{pong, time}`, answered on the reading thread: the channel is alive."""
    return {"pong": True, "time": time.time()}


OP_ARGS = {
    **{name: op.args for name, op in sorted(OPERATIONS.items()) if op.args is not None},
    Op.CANCEL: CANCEL_ARGS,
}
"""Each op's argument table, by name, as its declaration gives it (the ops that take a
whole spec, `shard.start` and the fabric tests, check it in their own module)."""


def _failure(request_id: Any, code: str, message: str) -> dict:
    return {"id": request_id, "ok": False, "error": {"code": code, "message": message}}


class Server:
    """Reads requests, runs each on a thread, answers on the channel."""

    def __init__(self, channel: Channel, replay: Optional[str]) -> None:
        self.channel = channel
        self.replay = replay
        self._in_flight: Dict[Any, Stream] = {}
        self._threads: Dict[Any, threading.Thread] = {}
        self._lock = threading.Lock()
        self.connection = Connection(replay)
        self.ops: Dict[str, Handler] = dict(OPERATIONS)
        """Each op this agent serves, by name: a handler taking a request's raw args."""
        self._inline = {name for name, op in OPERATIONS.items() if op.inline}

    def hello(self) -> dict:
        """The first line the agent writes: who it is and what it can do."""
        return {
            "hello": {
                "agent_version": __version__,
                "protocol": PROTOCOL_VERSION,
                "python": "{}.{}.{}".format(*sys.version_info[:3]),
                "capabilities": sorted([*self.ops, Op.CANCEL]),
                "pid": os.getpid(),
                "replay": self.replay is not None,
                "runs_from": llmgw_agent.RUNS_FROM,
            }
        }

    def error(self, request_id: Any, code: str, message: str) -> None:
        """Answer one request (or an unreadable line, id null) with an error."""
        self.channel.send(_failure(request_id, code, message))

    def handle_line(self, raw: bytes) -> None:
        """Parse one request line and answer it (now, or from its own thread)."""
        if not raw.strip():
            return
        try:
            request = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            self.error(None, "bad_json", "the line is not JSON: {}".format(exc))
            return
        except RecursionError:
            self.error(None, "bad_json", "the line is nested too deeply to be a request")
            return
        if not isinstance(request, dict):
            self.error(None, "bad_request", "a request is a JSON object with id, op and args")
            return
        request_id = request.get("id")
        if isinstance(request_id, bool) or not isinstance(request_id, (str, int)):
            self.error(None, "bad_request", "a request needs an id that is a string or an integer")
            return
        op = request.get("op")
        if not isinstance(op, str):
            self.error(request_id, "bad_request", "a request needs an op that is a string")
            return
        args = request.get("args", {})
        if args is None:
            args = {}
        if not isinstance(args, dict):
            self.error(request_id, "bad_args", "args must be a JSON object")
            return
        if op == Op.CANCEL:
            self.channel.send(self._outcome(request_id, self._cancel, args, None))
            return
        handler = self.ops.get(op)
        if handler is None:
            known = ", ".join(sorted([*self.ops, Op.CANCEL]))
            self.error(request_id, "unknown_op", "unknown op {!r}; known: {}".format(op, known))
            return
        stream = Stream(request_id, self.channel, self.connection)
        with self._lock:
            if request_id in self._in_flight:
                self.error(
                    request_id, "bad_request", "id {!r} is already in flight".format(request_id)
                )
                return
            self._in_flight[request_id] = stream
        if op in self._inline:
            self._run(request_id, handler, args, stream)
            return
        thread = threading.Thread(
            target=self._run, args=(request_id, handler, args, stream), daemon=True
        )
        with self._lock:
            self._threads[request_id] = thread
        thread.start()

    def _run(self, request_id: Any, handler: Handler, args: dict, stream: Stream) -> None:
        answer = None
        try:
            answer = self._outcome(request_id, handler, args, stream)
        finally:
            # The id is free before its answer is sent: a client may reuse it
            # as soon as it reads the answer.
            with self._lock:
                self._in_flight.pop(request_id, None)
                self._threads.pop(request_id, None)
            if answer is not None:
                self.channel.send(answer)

    def _outcome(self, request_id: Any, handler: Handler, args: dict, stream) -> dict:
        """The final message for one request: its result, or its error."""
        try:
            result = handler(args, stream)
        except OpError as exc:
            return _failure(request_id, exc.code, exc.message)
        except ImportError as exc:
            return _failure(request_id, "unavailable", "this agent lacks a part: {}".format(exc))
        except Exception as exc:  # the edge: report, never crash the channel
            import traceback

            traceback.print_exc(file=sys.stderr)
            return _failure(request_id, "internal", "{}: {}".format(type(exc).__name__, exc))
        return {"id": request_id, "ok": True, "result": result}

    def _cancel(self, args: dict, _stream) -> dict:
        target = checked(args, CANCEL_ARGS)["target"]
        with self._lock:
            stream = self._in_flight.get(target)
        if stream is None:
            return {"cancelled": False}
        stream.cancelled.set()
        return {"cancelled": True}

    def shutdown(self) -> None:
        """Cancel every stream and give running requests a moment to answer."""
        with self._lock:
            streams = list(self._in_flight.values())
            threads = list(self._threads.values())
        for stream in streams:
            stream.cancelled.set()
        deadline = time.monotonic() + _EXIT_JOIN_S
        for thread in threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        end_connection(self.connection)


def _private_stdio():
    """Take stdin/stdout for the protocol; point fds 0/1 elsewhere.

    Anything else that prints (a library, a child started by discovery) would
    otherwise write into the channel or read requests meant for us.
    """
    requests_in = os.fdopen(os.dup(0), "rb", buffering=65536)
    replies_out = os.fdopen(os.dup(1), "wb", buffering=0)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    os.dup2(2, 1)
    return requests_in, replies_out


def read_lines(
    requests_in, on_line: Callable[[bytes], None], on_too_large: Callable[[], None]
) -> None:
    """Feed each line of `requests_in` to `on_line` until end of input.

    A line over `MAX_LINE_BYTES` is read past in pieces (never held whole) and
    reported through `on_too_large`.
    """
    while True:
        line = requests_in.readline(MAX_LINE_BYTES + 1)
        if not line:
            return
        if len(line) > MAX_LINE_BYTES and not line.endswith(b"\n"):
            while True:
                rest = requests_in.readline(65536)
                if not rest or rest.endswith(b"\n"):
                    break
            on_too_large()
            continue
        on_line(line)


def _replay_option(argv) -> Optional[str]:
    """`--replay DIR` / `--replay=DIR` from serve's argv (argparse costs start-up time).

    Raises:
        SystemExit: 2 on anything else, with the usage.
    """
    args = list(argv)
    replay = None
    while args:
        word = args.pop(0)
        if word == "--replay" and args:
            replay = args.pop(0)
        elif word.startswith("--replay="):
            replay = word.split("=", 1)[1]
        else:
            sys.stderr.write("usage: llmgw serve [--replay DIR]\n")
            raise SystemExit(0 if word in ("-h", "--help") else 2)
    return replay


def serve_main(argv) -> int:
    """`llmgw serve [--replay DIR]`: speak the protocol until stdin ends."""
    replay_path = paths.replay_dir(_replay_option(argv))
    requests_in, replies_out = _private_stdio()
    server = Server(Channel(replies_out), str(replay_path) if replay_path else None)
    server.channel.send(server.hello())

    def too_large() -> None:
        server.error(
            None, "too_large", "a request line is limited to {} bytes".format(MAX_LINE_BYTES)
        )

    def handle(raw: bytes) -> None:
        try:
            server.handle_line(raw)
        except Exception as exc:  # the edge: one bad line never ends the agent
            server.error(None, "internal", "{}: {}".format(type(exc).__name__, exc))

    with contextlib.suppress(KeyboardInterrupt):
        read_lines(requests_in, handle, too_large)
    server.shutdown()
    return 0
