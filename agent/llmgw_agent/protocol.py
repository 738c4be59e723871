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

Operations (args → result):

* `ping` → `{pong, time}`;
* `facts` `{model_dirs?}` → the node's facts; `doctor` `{model_dirs?}` → `{checks}`;
* `claims` → `{claims: [{gpu, shard_id, replica, rank, claimed_at}]}`;
* `shard.start` (a resolved spec, see `shards/spec.py`; `secret_env` goes only into
  the shard's environment, never its records) → `{shard_id, pid, phase}`;
* `shard.stop` `{shard_id, timeout_s?}` → `{shard_id, phase, exit_code, killed}`;
* `shard.list` → `{shards: [...]}` (see `shards.judge_shard`);
* `shard.forget` `{shard_id}` → `{shard_id, forgotten}` (a finished shard only);
* `shard.logs` `{shard_id, tail?=200, follow?=false}` → events `{lines}`, then
  `{lines_sent, cancelled, phase}`;
* `shard.nccl` `{shard_id, limit?=400}` → `{lines, truncated}`: the first NCCL
  INFO/WARN lines of the shard's kept log (what transport NCCL chose);
* `shard.drain` `{shard_id}` → `{shard_id, draining_since}`: marks a shard
  draining (gateways take its replica out of rotation; `shard.list` shows it);
* `lease.take` `{name, holder, ttl_s?=30}` → `{name, holder, since, expires_at,
  token}`, or `held` naming who holds it and since when; `lease.renew` `{name,
  token, ttl_s?=30}` → the lease, or `lost`; `lease.release` `{name, token}` →
  `{name, released}`; `lease.list` → `{leases}` (see `shards/leases.py`). The
  leases taken on a connection are given back when it ends;
* `service.count` `{name, direction}` → `{name, direction, total}`: one scale
  event of a service counted (`out` or `in`); `service.counts` → `{counts:
  {name: {out, in}}}`: every service's so far (a Prometheus counter's source);
* `port.free` `{start, count?=1, avoid?=[]}` → `{ports, listening}`: the first
  ports from `start` nothing listens on here and a bind takes (`ports.py`);
* `gateway.call` `{shard_id, method, path, body?}` → `{status, body}`: one request
  on a gateway shard's control socket (its workers, its counters; `front/control.py`),
  which only the operator's processes can open;
* `download.watch` `{path, interval_s?=2}` → events `{bytes, files, exists,
  last_moved_at}` until cancelled, then the last one with `cancelled`;
* `fabric.probe`, `fabric.server` (stream), `fabric.client` — `fabric_test.py`;
* `fabric.record` `{rails: [{peer, adapter, verdict, rail?, ratio?, measured_gbps?,
  rated_gbps?, measured_at?}]}` → `{recorded, rails}`; `fabric.verdicts` →
  `{rails}`: the fabric verdicts this node keeps (`fabric/verdicts.py`; the
  facts carry them too, as `rail_verdicts`).

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
from llmgw_agent import PROTOCOL_VERSION, __version__, allowed_paths, paths
from llmgw_agent.op_args import REQUIRED, Arg, OpError, checked

TYPE_CHECKING = False  # `typing` costs ms of every agent start; annotations are strings here
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, Optional

MAX_LINE_BYTES = 1024 * 1024
"""A request line longer than this is answered `too_large` and skipped."""

_EXIT_JOIN_S = 2.0
"""How long, after stdin ends, running requests get to finish their replies."""


class Stream:
    """What an operation sees of its request: a way to send events, a cancel flag."""

    def __init__(self, request_id: Any, channel: "Channel") -> None:
        self.request_id = request_id
        self.cancelled = threading.Event()
        self._channel = channel

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


PORT = (1, 65535)
OP_ARGS = {
    "cancel": {"target": Arg((str, int))},
    "facts": {"model_dirs": Arg((list,), [], items=(str,))},
    "doctor": {"model_dirs": Arg((list,), [], items=(str,))},
    "shard.stop": {"shard_id": Arg((str,)), "timeout_s": Arg((int, float), None, 0, 3600)},
    "shard.forget": {"shard_id": Arg((str,))},
    "shard.logs": {
        "shard_id": Arg((str,)),
        "tail": Arg((int,), 200, 0, 1_000_000),
        "follow": Arg((bool,), False),
    },
    "shard.nccl": {"shard_id": Arg((str,)), "limit": Arg((int,), 400, 1, 100_000)},
    "shard.drain": {"shard_id": Arg((str,))},
    "lease.take": {
        "name": Arg((str,)),
        "holder": Arg((str,)),
        "ttl_s": Arg((int, float), 30.0, 0.05, 86_400),
    },
    "lease.renew": {
        "name": Arg((str,)),
        "token": Arg((str,)),
        "ttl_s": Arg((int, float), 30.0, 0.05, 86_400),
    },
    "lease.release": {"name": Arg((str,)), "token": Arg((str,))},
    "service.count": {"name": Arg((str,)), "direction": Arg((str,))},
    "port.free": {
        "start": Arg((int,), REQUIRED, *PORT),
        "count": Arg((int,), 1, 1, 64),
        "avoid": Arg((list,), [], items=(int,)),
    },
    "download.watch": {"path": Arg((str,)), "interval_s": Arg((int, float), 2.0, 0.05, 3600)},
    "gateway.call": {
        "shard_id": Arg((str,)),
        "method": Arg((str,)),
        "path": Arg((str,)),
        "body": Arg((dict,), None),
    },
}
"""Each simple op's arguments, declared (`op_args.checked` reads them); the ops that take a
whole spec (`shard.start`, the fabric tests) check it in their own module, with the same
`arg`/`number_arg` rules."""


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
        self._leases: Dict[str, str] = {}
        """The leases taken on this connection (name → token): given back when it ends."""
        self.ops: Dict[str, Handler] = {
            "ping": self._op_ping,
            "facts": self._op_facts,
            "doctor": self._op_doctor,
            "claims": _op_claims,
            "shard.start": self._op_shard_start,
            "shard.stop": _op_shard_stop,
            "shard.list": _op_shard_list,
            "shard.forget": _op_shard_forget,
            "shard.logs": _op_shard_logs,
            "shard.nccl": _op_shard_nccl,
            "shard.drain": _op_shard_drain,
            "lease.take": self._op_lease_take,
            "lease.renew": self._op_lease_renew,
            "lease.release": self._op_lease_release,
            "lease.list": _op_lease_list,
            "service.count": _op_service_count,
            "service.counts": _op_service_counts,
            "port.free": _op_port_free,
            "download.watch": _op_download_watch,
            "gateway.call": _op_gateway_call,
            "fabric.probe": self._op_fabric_probe,
            "fabric.server": self._op_fabric_server,
            "fabric.client": self._op_fabric_client,
            "fabric.all_reduce": self._op_fabric_all_reduce,
            "fabric.record": _op_fabric_record,
            "fabric.verdicts": _op_fabric_verdicts,
        }

    def hello(self) -> dict:
        """The first line the agent writes: who it is and what it can do."""
        return {
            "hello": {
                "agent_version": __version__,
                "protocol": PROTOCOL_VERSION,
                "python": "{}.{}.{}".format(*sys.version_info[:3]),
                "capabilities": sorted([*self.ops, "cancel"]),
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
        if op == "cancel":
            self.channel.send(self._outcome(request_id, self._cancel, args, None))
            return
        handler = self.ops.get(op)
        if handler is None:
            known = ", ".join(sorted([*self.ops, "cancel"]))
            self.error(request_id, "unknown_op", "unknown op {!r}; known: {}".format(op, known))
            return
        stream = Stream(request_id, self.channel)
        with self._lock:
            if request_id in self._in_flight:
                self.error(
                    request_id, "bad_request", "id {!r} is already in flight".format(request_id)
                )
                return
            self._in_flight[request_id] = stream
        if op == "ping":
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
        target = checked(args, OP_ARGS["cancel"])["target"]
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
        self._give_back_leases()

    def _give_back_leases(self) -> None:
        """Release every lease taken on this connection: its holder is gone."""
        with self._lock:
            held = list(self._leases.items())
            self._leases.clear()
        if not held:
            return
        from llmgw_agent.shards import leases

        for name, token in held:
            with contextlib.suppress(OSError, OpError):
                leases.release(name, token)

    # --- operations -------------------------------------------------------

    def _op_ping(self, _args: dict, _stream: Stream) -> dict:
        return {"pong": True, "time": time.time()}

    def _collect(self, args: dict) -> dict:
        model_dirs = checked(args, OP_ARGS["facts"])["model_dirs"]
        for item in model_dirs:
            refusal = allowed_paths.model_dir_refusal(item)
            if refusal:
                raise OpError("bad_args", "model_dirs: {}".format(refusal))
        allowed_paths.add_model_dirs(model_dirs)
        try:
            from llmgw_agent.discover import DiscoveryError, collect_facts
        except ImportError as exc:
            raise OpError(
                "unavailable", "discovery is not part of this agent: {}".format(exc)
            ) from exc
        try:
            return collect_facts(replay=self.replay, model_dirs=tuple(model_dirs))
        except DiscoveryError as exc:
            raise OpError("failed", str(exc)) from exc

    def _op_facts(self, args: dict, _stream: Stream) -> dict:
        return self._collect(args)

    def _op_doctor(self, args: dict, _stream: Stream) -> dict:
        facts = self._collect(args)
        try:
            from llmgw_agent.doctor import run_checks
        except ImportError as exc:
            raise OpError(
                "unavailable", "the doctor is not part of this agent: {}".format(exc)
            ) from exc
        return {"checks": run_checks(facts, state_dir=str(paths.state_dir()))}

    def _op_fabric_probe(self, args: dict, _stream: Stream) -> dict:
        from llmgw_agent.fabric import run as fabric_test

        return fabric_test.fabric_probe(args, self.replay)

    def _op_fabric_server(self, args: dict, stream: Stream) -> dict:
        from llmgw_agent.fabric import run as fabric_test

        return fabric_test.fabric_server(args, stream.emit, stream.cancelled, self.replay)

    def _op_fabric_client(self, args: dict, stream: Stream) -> dict:
        from llmgw_agent.fabric import run as fabric_test

        return fabric_test.fabric_client(args, stream.emit, stream.cancelled, self.replay)

    def _op_fabric_all_reduce(self, args: dict, stream: Stream) -> dict:
        from llmgw_agent.fabric import allreduce as fabric_allreduce

        return fabric_allreduce.all_reduce(args, stream.emit, stream.cancelled, self.replay)

    def _op_lease_take(self, args: dict, _stream: Stream) -> dict:
        given = checked(args, OP_ARGS["lease.take"])
        from llmgw_agent.shards import leases

        taken = leases.take(leases.checked_name(given["name"]), given["holder"], given["ttl_s"])
        with self._lock:
            self._leases[taken["name"]] = taken["token"]
        return taken

    def _op_lease_renew(self, args: dict, _stream: Stream) -> dict:
        given = checked(args, OP_ARGS["lease.renew"])
        from llmgw_agent.shards import leases

        return leases.renew(leases.checked_name(given["name"]), given["token"], given["ttl_s"])

    def _op_lease_release(self, args: dict, _stream: Stream) -> dict:
        given = checked(args, OP_ARGS["lease.release"])
        from llmgw_agent.shards import leases

        released = leases.release(leases.checked_name(given["name"]), given["token"])
        with self._lock:
            if self._leases.get(given["name"]) == given["token"]:
                del self._leases[given["name"]]
        return released

    def _op_shard_start(self, args: dict, _stream: Stream) -> dict:
        from llmgw_agent.shards.records import start_shard

        return start_shard(args, replay=self.replay)


def _op_claims(_args: dict, _stream: Stream) -> dict:
    from llmgw_agent.shards.claims import list_claims

    return {"claims": list_claims()}


def _op_shard_stop(args: dict, _stream: Stream) -> dict:
    given = checked(args, OP_ARGS["shard.stop"])
    from llmgw_agent.shards.records import stop_shard

    return stop_shard(given["shard_id"], given["timeout_s"])


def _op_shard_list(_args: dict, _stream: Stream) -> dict:
    from llmgw_agent.shards.records import list_shards

    return {"shards": list_shards()}


def _op_shard_forget(args: dict, _stream: Stream) -> dict:
    shard_id = checked(args, OP_ARGS["shard.forget"])["shard_id"]
    from llmgw_agent.shards.records import forget_shard

    return forget_shard(shard_id)


def _op_shard_logs(args: dict, stream: Stream) -> dict:
    given = checked(args, OP_ARGS["shard.logs"])
    from llmgw_agent.shards.logs import stream_shard_log

    return stream_shard_log(
        given["shard_id"], given["tail"], given["follow"], stream.emit, stream.cancelled
    )


def _op_shard_nccl(args: dict, _stream: Stream) -> dict:
    given = checked(args, OP_ARGS["shard.nccl"])
    from llmgw_agent.shards.nccl import nccl_lines

    return nccl_lines(given["shard_id"], given["limit"])


def _op_shard_drain(args: dict, _stream: Stream) -> dict:
    shard_id = checked(args, OP_ARGS["shard.drain"])["shard_id"]
    from llmgw_agent.shards.records import drain_shard

    return drain_shard(shard_id)


def _op_lease_list(_args: dict, _stream: Stream) -> dict:
    from llmgw_agent.shards.leases import list_leases

    return {"leases": list_leases()}


def _op_service_count(args: dict, _stream: Stream) -> dict:
    given = checked(args, OP_ARGS["service.count"])
    from llmgw_agent.shards import leases

    return leases.count_scale(leases.checked_name(given["name"]), given["direction"])


def _op_service_counts(_args: dict, _stream: Stream) -> dict:
    from llmgw_agent.shards.leases import scale_counts

    return {"counts": scale_counts()}


def _op_fabric_record(args: dict, _stream: Stream) -> dict:
    from llmgw_agent.fabric.verdicts import record_verdicts

    return record_verdicts(args)


def _op_fabric_verdicts(_args: dict, _stream: Stream) -> dict:
    from llmgw_agent.fabric.verdicts import read_verdicts

    return {"rails": read_verdicts()}


def _op_port_free(args: dict, _stream: Stream) -> dict:
    given = checked(args, OP_ARGS["port.free"])
    from llmgw_agent.ports import free_ports

    return free_ports(given["start"], given["count"], given["avoid"])


def _op_gateway_call(args: dict, _stream: Stream) -> dict:
    given = checked(args, OP_ARGS["gateway.call"])
    if given["method"] not in ("GET", "POST", "DELETE") or not given["path"].startswith("/"):
        raise OpError("bad_args", "gateway.call takes GET, POST or DELETE of a /path")
    from llmgw_agent.front.control import call, control_socket
    from llmgw_agent.shards.records import shard_directory

    shard_directory(given["shard_id"])  # not_found for a shard that is not here
    try:
        status, body = call(
            control_socket(given["shard_id"]), given["method"], given["path"], given["body"]
        )
    except (OSError, ValueError) as exc:
        raise OpError("failed", "the gateway's front does not answer: {}".format(exc)) from None
    return {"status": status, "body": body}


def _op_download_watch(args: dict, stream: Stream) -> dict:
    given = checked(args, OP_ARGS["download.watch"])
    path, interval_s = given["path"], given["interval_s"]
    refusal = allowed_paths.refusal(path)
    if refusal:
        raise OpError("refused", "path {}".format(refusal))
    from llmgw_agent.downloads import watch_download

    return watch_download(path, interval_s, stream.emit, stream.cancelled)


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
