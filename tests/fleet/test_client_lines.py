"""Whatever the agent's channel carries, the client's reader turns it into answers or errors."""

from __future__ import annotations

import asyncio
import json

from hypothesis import given, settings
from hypothesis import strategies as st

from llmgw_core.fleet.client import AgentClient, AgentError, PendingRequest

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)
replies = st.fixed_dictionaries(
    {},
    optional={
        "id": st.sampled_from([1, 2, True, "1", None, 1.0]),
        "ok": json_values,
        "result": json_values,
        "event": json_values,
        "error": json_values,
    },
)
lines = st.one_of(st.text(max_size=200), replies.map(json.dumps), json_values.map(json.dumps))


@settings(max_examples=300, deadline=None)
@given(st.lists(lines, max_size=8))
def test_no_line_from_the_agent_crashes_the_reader_and_a_good_answer_still_lands(
    received: list[str],
):
    async def scenario() -> None:
        client = AgentClient("n1", process=None)  # the reader's logic needs no channel
        loop = asyncio.get_running_loop()
        one = loop.create_future()
        two = loop.create_future()
        client._pending[1] = PendingRequest(op="facts", future=one)
        client._pending[2] = PendingRequest(op="shard.logs", future=two, events=asyncio.Queue())
        for line in received:
            client._dispatch(line + "\n")
        answered_before = one.done()
        client._dispatch('{"id": 1, "ok": true, "result": "fine"}\n')
        if not answered_before:
            assert one.result() == "fine"
        for future in (one, two):
            if future.done() and future.exception() is not None:
                assert isinstance(future.exception(), AgentError)
                assert future.exception().message.startswith("n1: ")

    asyncio.run(scenario())
