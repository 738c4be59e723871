"""`gateway.call`: one request on a gateway shard's control socket (`front/control.py`).

Only the operator's processes can open that socket (it lies in the shard's
0700 folder); this op is how the console reaches it over the agent's channel.
"""

from __future__ import annotations

from llmgw_agent.op_args import Arg, OpError
from llmgw_agent.ops import Op, operation

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

METHODS = ("GET", "POST", "DELETE")


@operation(
    Op.GATEWAY_CALL,
    args={
        "shard_id": Arg((str,)),
        "method": Arg((str,)),
        "path": Arg((str,)),
        "body": Arg((dict,), None),
    },
)
def gateway_call(given: dict, _call: Any) -> dict:
    """`gateway.call` `{shard_id, method, path, body?}` → `{status, body}`: one request on a
    gateway shard's control socket (its workers, its counters)."""
    if given["method"] not in METHODS or not given["path"].startswith("/"):
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
