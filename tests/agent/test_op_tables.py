"""Every op's declared arguments, fed hostile values over the real protocol.

The table (`protocol.OP_ARGS`) is the schema: for each op and each of its
arguments, a wrong type, NaN, an infinity, a number past any range, a huge
integer, an empty value or a nested one is sent as raw JSON to a real agent.
What the table refuses must come back `bad_args` naming the argument; what it
takes must come back anything but `internal`.
"""

from __future__ import annotations

import itertools
import json

import pytest
from agent_process import AgentClient, agent_env

from llmgw_agent.op_args import OpError, checked
from llmgw_agent.protocol import OP_ARGS

HOSTILE = [
    "NaN",
    "Infinity",
    "-Infinity",
    "1e400",
    "-1",
    "0",
    "1.5",
    str(10**40),
    '""',
    '"x"',
    "true",
    "[]",
    "[1, true]",
    '["a"]',
    "{}",
    "[" * 40 + "1" + "]" * 40,
]
"""Raw JSON text: NaN and Infinity as Python's json module reads them, 1e400 overflowing."""

BASE = {
    "shard_id": '"no-such-shard"',
    "start": "40000",
    "target": '"nothing"',
    "path": '"models/nothing"',
    "name": '"svc"',
    "holder": '"tester"',
    "token": '"t"',
    "direction": '"out"',
    "method": '"GET"',
    "adapters": '[{"name": "sql", "source": "/a/sql"}]',
}
"""A valid value for each required argument, for the others' cases."""

IDS = itertools.count(1000)


def _cases() -> list[tuple[str, str, str]]:
    return [
        (op, name, value)
        for op, table in sorted(OP_ARGS.items())
        for name in table
        for value in HOSTILE
    ]


def _request(op: str, name: str, value: str) -> tuple[int, str, dict]:
    """The raw request line, and the args as the agent will read them."""
    table = OP_ARGS[op]
    parts = {key: BASE[key] for key in table if key in BASE}
    parts[name] = value
    text = "{" + ", ".join(f'"{key}": {raw}' for key, raw in parts.items()) + "}"
    request_id = next(IDS)
    line = f'{{"id": {request_id}, "op": "{op}", "args": {text}}}'
    return request_id, line, json.loads(text)


@pytest.fixture(scope="module")
def one_agent(tmp_path_factory: pytest.TempPathFactory):
    """One agent for every case (each case is one request: the agent's start dominates)."""
    folder = tmp_path_factory.mktemp("op-tables")
    state = folder / "state"
    state.mkdir(mode=0o700)
    client = AgentClient(agent_env(state), stderr_path=folder / "agent.stderr")
    yield client
    client.close()


def test_a_hostile_argument_is_bad_args_or_read_never_internal(one_agent: AgentClient) -> None:
    wrong = []
    for op, name, value in _cases():
        request_id, line, args = _request(op, name, value)
        try:
            checked(args, OP_ARGS[op])
            refused = None
        except OpError as exc:
            refused = exc
        if refused is None and op == "download.watch":
            continue  # taken: it would watch until cancelled (its own tests cover it)
        one_agent.send_line(line.encode())
        reply = one_agent.answer(request_id, timeout_s=20)
        code = None if reply.get("ok") else reply["error"]["code"]
        if refused is not None and (code != "bad_args" or name not in reply["error"]["message"]):
            wrong.append((line, reply))
        if refused is None and code == "internal":
            wrong.append((line, reply))
    assert wrong == []
    assert len(_cases()) > 200
