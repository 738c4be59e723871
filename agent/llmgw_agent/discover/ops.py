"""The ops that read the node: `facts`, and `doctor` (the same facts, checked).

Discovery itself is imported when the first request asks for it.
"""

from __future__ import annotations

from llmgw_agent import allowed_paths, paths
from llmgw_agent.op_args import Arg, OpError
from llmgw_agent.ops import Op, operation

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Optional

MODEL_DIRS = {"model_dirs": Arg((list,), [], items=(str,))}


def collect(given: dict, replay: Optional[str]) -> dict:
    """The node's facts, its model directories (`given["model_dirs"]`) read too.

    Each model directory asked for becomes one a later request may name
    (`allowed_paths.add_model_dirs`).

    Raises:
        OpError: `bad_args` for a model directory that may not be read,
            `unavailable` without discovery, `failed` when it fails.
    """
    model_dirs = given["model_dirs"]
    for item in model_dirs:
        refusal = allowed_paths.model_dir_refusal(item)
        if refusal:
            raise OpError("bad_args", "model_dirs: {}".format(refusal))
    allowed_paths.add_model_dirs(model_dirs)
    try:
        from llmgw_agent.discover import DiscoveryError, collect_facts
    except ImportError as exc:
        raise OpError("unavailable", "discovery is not part of this agent: {}".format(exc)) from exc
    try:
        return collect_facts(replay=replay, model_dirs=tuple(model_dirs))
    except DiscoveryError as exc:
        raise OpError("failed", str(exc)) from exc


@operation(Op.FACTS, args=MODEL_DIRS)
def facts(given: dict, call: Any) -> dict:
    """`facts` `{model_dirs?}` → the node's facts (`discover.collect_facts`)."""
    return collect(given, call.replay)


@operation(Op.DOCTOR, args=MODEL_DIRS)
def doctor(given: dict, call: Any) -> dict:
    """`doctor` `{model_dirs?}` → `{checks}`: the node's facts checked, as `llmgw doctor` checks
    them (`doctor.run_checks`)."""
    found = collect(given, call.replay)
    try:
        from llmgw_agent.doctor import run_checks
    except ImportError as exc:
        raise OpError(
            "unavailable", "the doctor is not part of this agent: {}".format(exc)
        ) from exc
    return {"checks": run_checks(found, state_dir=str(paths.state_dir()))}
