"""Fuzzing the wire: every bad line gets one error, and the agent keeps serving."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

if TYPE_CHECKING:
    from agent_process import AgentClient

# Ops that are safe to throw random arguments at (nothing starts or stops).
SAFE_OPS = ["ping", "claims", "shard.list", "shard.logs", "shard.stop", "shard.forget", "cancel"]

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=12,
)

bad_requests = st.one_of(
    # not JSON at all (no newline inside: one line is one request)
    st.binary(min_size=1, max_size=200).filter(lambda b: b"\n" not in b and b.strip()),
    # JSON, but not a request object
    json_values.filter(lambda value: not isinstance(value, dict)).map(
        lambda value: json.dumps(value).encode()
    ),
    # objects with missing or wrong ids, ops and args
    st.fixed_dictionaries(
        {},
        optional={
            "id": st.none() | st.booleans() | st.floats() | st.lists(st.integers(), max_size=2),
            "op": json_values,
            "args": json_values,
        },
    ).map(lambda value: json.dumps(value).encode()),
    # well-formed requests to unknown ops, or safe ops with random args
    st.tuples(
        st.text(max_size=12) | st.sampled_from(SAFE_OPS),
        st.dictionaries(
            st.sampled_from(["shard_id", "tail", "follow", "target", "timeout_s", "x"]),
            json_values,
            max_size=3,
        ),
    ).map(lambda pair: json.dumps({"id": "fuzz", "op": pair[0], "args": pair[1]}).encode()),
)


def _is_error_or_answer(message: dict) -> bool:
    return message.get("ok") is True or (
        message.get("ok") is False and {"code", "message"} <= set(message["error"])
    )


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(line=bad_requests)
def test_every_bad_line_is_answered_and_a_ping_still_answers(
    agent: AgentClient, line: bytes
) -> None:
    agent.send_line(line)
    ping = agent.send("ping")
    assert agent.answer(ping)["ok"] is True
    # The bad line was answered once: either unaddressed (no usable id) or as "fuzz".
    answers = []
    while not agent.unaddressed.empty():
        answers.append(agent.unaddressed.get())
    fuzz_queue = agent._queue("fuzz")
    while len(answers) < 1:
        answers.append(fuzz_queue.get(timeout=20))
    while not fuzz_queue.empty():
        answers.append(fuzz_queue.get())
    assert len(answers) == 1, answers
    assert _is_error_or_answer(answers[0]), answers[0]
