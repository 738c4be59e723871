"""The agent's operations, each declared once: its name, its arguments and its handler.

An op is a function beside the state it touches (`shards/ops.py`,
`fabric/ops.py`, …), registered with its wire name and its argument table:

    @operation(Op.SHARD_STOP, args={"shard_id": Arg((str,)), "timeout_s": ...})
    def shard_stop(given, call):
        \"\"\"`shard.stop` `{shard_id, timeout_s?}` → `{shard_id, phase, exit_code, killed}`.\"\"\"

The handler's docstring is the op's description, and only there. The channel
(`protocol.py`) checks a request's args against the table (`op_args.checked`)
before the handler sees them, so an op reads `given[...]` already typed and
in range; an op declared without a table (`args=None`) takes a whole spec and
checks it in its own module. `call` is the request as the op sees it: `emit`
(one event of a stream), `cancelled` (set when the stream is cancelled),
`replay` and `connection` (what the console's connection holds until it ends).

`Op` names every op: the core sends `Op.SHARD_LIST`, never a bare string.
This module imports nothing but the standard library's `threading`, so the
core may import it for the names.
"""

from __future__ import annotations

import threading

from llmgw_agent.op_args import checked

TYPE_CHECKING = False  # `typing` costs ms of every agent start; annotations are strings here
if TYPE_CHECKING:
    from typing import Any, Callable, Dict, List, Optional

    from llmgw_agent.op_args import Arg


class Op:
    """Every op's wire name: the agent registers its handlers under these, the core sends them."""

    PING = "ping"
    CANCEL = "cancel"
    FACTS = "facts"
    DOCTOR = "doctor"
    CLAIMS = "claims"
    SHARD_START = "shard.start"
    SHARD_STOP = "shard.stop"
    SHARD_LIST = "shard.list"
    SHARD_FORGET = "shard.forget"
    SHARD_LOGS = "shard.logs"
    SHARD_NCCL = "shard.nccl"
    SHARD_HEAD = "shard.head"
    SHARD_DRAIN = "shard.drain"
    SHARD_ADAPTERS = "shard.adapters"
    LEASE_TAKE = "lease.take"
    LEASE_RENEW = "lease.renew"
    LEASE_RELEASE = "lease.release"
    LEASE_LIST = "lease.list"
    SERVICE_COUNT = "service.count"
    SERVICE_COUNTS = "service.counts"
    PORT_FREE = "port.free"
    DOWNLOAD_WATCH = "download.watch"
    GATEWAY_CALL = "gateway.call"
    FABRIC_PROBE = "fabric.probe"
    FABRIC_SERVER = "fabric.server"
    FABRIC_CLIENT = "fabric.client"
    FABRIC_ALL_REDUCE = "fabric.all_reduce"
    FABRIC_RECORD = "fabric.record"
    FABRIC_VERDICTS = "fabric.verdicts"


OP_NAMES = frozenset(value for name, value in vars(Op).items() if name.isupper())
"""Every name `Op` holds: an op registered under any other is a typo."""


class Connection:
    """One console's connection as its ops see it: the replay folder, what it holds.

    `held` keeps, per kind (`"leases"`), what an op took on this connection
    and gives back when it ends (see `at_connection_end`); `lock` guards it.
    """

    def __init__(self, replay: Optional[str]) -> None:
        self.replay = replay
        self.lock = threading.Lock()
        self.held: Dict[str, Dict[Any, Any]] = {}

    def holding(self, kind: str) -> Dict[Any, Any]:
        """What this connection holds of `kind` (take `lock` to read or change it)."""
        return self.held.setdefault(kind, {})


class Operation:
    """One op, declared: its name, its argument table, its handler, where it runs."""

    __slots__ = ("args", "handler", "inline", "name")

    def __init__(
        self,
        name: str,
        args: Optional[Dict[str, Arg]],
        handler: Callable[[dict, Any], Any],
        inline: bool,
    ) -> None:
        self.name = name
        self.args = args
        self.handler = handler
        self.inline = inline

    def __call__(self, args: dict, call: Any) -> Any:
        """Run the op on a request's raw args: checked against its table first.

        Raises:
            OpError: `bad_args` naming the first argument that is wrong, or
                whatever the handler raises.
        """
        given = checked(args, self.args) if self.args is not None else args
        return self.handler(given, call)

    @property
    def description(self) -> str:
        """The handler's docstring: what the op takes and answers."""
        return (self.handler.__doc__ or "").strip()


OPERATIONS: Dict[str, Operation] = {}
"""Every registered op by name; `protocol.py` imports the modules that fill it."""

_AT_END: List[Callable[[Connection], None]] = []


def operation(
    name: str, args: Optional[Dict[str, Arg]] = None, inline: bool = False
) -> Callable[[Callable[[dict, Any], Any]], Callable[[dict, Any], Any]]:
    """Register the decorated function as op `name`.

    Args:
        name: the wire name, one of `Op`'s.
        args: the op's arguments (`op_args.Arg` by name), checked before the
            handler runs; None for an op that checks a whole spec itself.
        inline: answer on the reading thread (a quick op whose answer should
            not wait for a thread), not on one of its own.

    Raises:
        ValueError: a name `Op` does not hold, or one already registered.
    """

    def register(handler: Callable[[dict, Any], Any]) -> Callable[[dict, Any], Any]:
        if name not in OP_NAMES:
            raise ValueError("op {!r} is not one of Op's names".format(name))
        if name in OPERATIONS:
            raise ValueError("op {!r} is registered twice".format(name))
        OPERATIONS[name] = Operation(name, args, handler, inline)
        return handler

    return register


def at_connection_end(hook: Callable[[Connection], None]) -> Callable[[Connection], None]:
    """Register `hook` to run with each connection when it ends (a lease's give-back)."""
    _AT_END.append(hook)
    return hook


def end_connection(connection: Connection) -> None:
    """Run every `at_connection_end` hook for `connection`."""
    for hook in _AT_END:
        hook(connection)
