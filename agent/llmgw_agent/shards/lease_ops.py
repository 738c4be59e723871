"""The lease ops (a service's one keeper at a time) and the services' scale counters.

See `shards/leases.py` for what a lease is. The leases taken on a connection
are given back when it ends: their holder is gone.
"""

from __future__ import annotations

import contextlib

from llmgw_agent.op_args import Arg, OpError
from llmgw_agent.ops import Op, at_connection_end, operation

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from llmgw_agent.ops import Connection

TTL_S = Arg((int, float), 30.0, 0.05, 86_400)
HELD = "leases"
"""What a connection holds of leases (`Connection.holding`): name → token."""


@operation(Op.LEASE_TAKE, args={"name": Arg((str,)), "holder": Arg((str,)), "ttl_s": TTL_S})
def lease_take(given: dict, call: Any) -> dict:
    """`lease.take` `{name, holder, ttl_s?=30}` → `{name, holder, since, expires_at, token}`,
    or `held` naming who holds it and since when."""
    from llmgw_agent.shards import leases

    taken = leases.take(leases.checked_name(given["name"]), given["holder"], given["ttl_s"])
    connection = call.connection
    with connection.lock:
        connection.holding(HELD)[taken["name"]] = taken["token"]
    return taken


@operation(Op.LEASE_RENEW, args={"name": Arg((str,)), "token": Arg((str,)), "ttl_s": TTL_S})
def lease_renew(given: dict, _call: Any) -> dict:
    """`lease.renew` `{name, token, ttl_s?=30}` → the lease, or `lost`."""
    from llmgw_agent.shards import leases

    return leases.renew(leases.checked_name(given["name"]), given["token"], given["ttl_s"])


@operation(Op.LEASE_RELEASE, args={"name": Arg((str,)), "token": Arg((str,))})
def lease_release(given: dict, call: Any) -> dict:
    """`lease.release` `{name, token}` → `{name, released}`."""
    from llmgw_agent.shards import leases

    released = leases.release(leases.checked_name(given["name"]), given["token"])
    connection = call.connection
    with connection.lock:
        held = connection.holding(HELD)
        if held.get(given["name"]) == given["token"]:
            del held[given["name"]]
    return released


@operation(Op.LEASE_LIST, args={})
def lease_list(_given: dict, _call: Any) -> dict:
    """`lease.list` → `{leases}` (see `shards/leases.py`)."""
    from llmgw_agent.shards.leases import list_leases

    return {"leases": list_leases()}


@operation(Op.SERVICE_COUNT, args={"name": Arg((str,)), "direction": Arg((str,))})
def service_count(given: dict, _call: Any) -> dict:
    """`service.count` `{name, direction}` → `{name, direction, total}`: one scale event of a
    service counted (`out` or `in`)."""
    from llmgw_agent.shards import leases

    return leases.count_scale(leases.checked_name(given["name"]), given["direction"])


@operation(Op.SERVICE_COUNTS, args={})
def service_counts(_given: dict, _call: Any) -> dict:
    """`service.counts` → `{counts: {name: {out, in}}}`: every service's scale events so far
    (a Prometheus counter's source)."""
    from llmgw_agent.shards.leases import scale_counts

    return {"counts": scale_counts()}


@at_connection_end
def give_back_leases(connection: Connection) -> None:
    """Release every lease taken on `connection`: its holder is gone."""
    with connection.lock:
        held = list(connection.holding(HELD).items())
        connection.holding(HELD).clear()
    if not held:
        return
    from llmgw_agent.shards import leases

    for name, token in held:
        with contextlib.suppress(OSError, OpError):
            leases.release(name, token)
