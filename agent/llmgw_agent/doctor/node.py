"""The doctor's checks of what the node holds for llmgw: model folders, engines, the router,
keeping shards alive, the agent's state folder.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Dict, List, Optional

from llmgw_agent import paths
from llmgw_agent.doctor.check import Check, check


def _model_dir_checks(facts: Dict[str, Any]) -> List[Check]:
    checks = []
    for path, entry in sorted((facts.get("model_dirs") or {}).items()):
        state = entry.get("state")
        where = "{} ({}{})".format(
            path, entry.get("fs_type") or "?", ", shared" if entry.get("shared") else ""
        )
        if state == "missing":
            checks.append(
                check(
                    "model_dirs",
                    "fail",
                    "{} does not exist".format(path),
                    "create it or fix model_dirs in the inventory",
                )
            )
        elif state == "unreadable":
            checks.append(
                check(
                    "model_dirs",
                    "fail",
                    "{} cannot be read".format(path),
                    "give the SSH user read access (chmod/chgrp)",
                )
            )
        elif state == "partial":
            partial = [m["name"] for m in entry.get("models", []) if m.get("state") == "partial"]
            checks.append(
                check(
                    "model_dirs",
                    "warn",
                    "{}: half-downloaded: {}".format(where, ", ".join(partial[:5])),
                    "finish or delete the download; a partial model is not used",
                )
            )
        else:
            count = len(entry.get("models") or [])
            checks.append(
                check("model_dirs", "pass", "{}: {} complete model(s)".format(where, count))
            )
    return checks


def _router_checks(facts: Dict[str, Any]) -> List[Check]:
    """The gateway's router (vllm-router) and its version, where this node has one.

    Most nodes need none (a gateway runs on one node), so its absence is not a
    warning here; the `gateway` step names the install command when the node
    it was given lacks one.
    """
    router = (facts.get("engines") or {}).get("vllm-router")
    if not router:
        return []
    return [
        check(
            "router",
            "pass",
            "vllm-router {} at {}".format(
                router.get("version") or "(version unknown)", router.get("path") or "?"
            ),
        )
    ]


def _engine_checks(facts: Dict[str, Any]) -> List[Check]:
    engines = {
        name: entry
        for name, entry in (facts.get("engines") or {}).items()
        if name not in ("vllm-router", "ray")
    }
    if not engines:
        return [
            check(
                "engines",
                "fail",
                "no inference engine found (vLLM, SGLang, llama.cpp)",
                "install one: `pip install vllm` (GPU nodes) or build llama.cpp's llama-server; "
                "set LLMGW_ENGINE_PREFIXES to a virtualenv outside the usual places",
            )
        ]
    listed = ", ".join(
        "{} {}".format(name, (entry or {}).get("version") or "(version unknown)")
        for name, entry in sorted(engines.items())
    )
    return [check("engines", "pass", listed)]


def _keepalive_checks(facts: Dict[str, Any]) -> List[Check]:
    keepalive = facts.get("keepalive")
    if not keepalive:
        return []
    if keepalive.get("method") is None:
        return [
            check(
                "keepalive",
                "fail",
                "no way to keep a shard running after the SSH session ends",
                keepalive.get("reason") or "",
            )
        ]
    return [
        check(
            "keepalive",
            "pass",
            "shards detach with {}: {}".format(keepalive["method"], keepalive.get("reason") or ""),
        )
    ]


def _state_checks(state_dir: Optional[Path]) -> List[Check]:
    if state_dir is None:
        return []
    probe = state_dir / ".doctor-probe"
    try:
        probe.write_text("ok")
        probe.unlink()
    except OSError as exc:
        return [
            check(
                "state",
                "fail",
                "the agent's state dir {} is not writable: {}".format(state_dir, exc),
                "fix its permissions or set LLMGW_AGENT_STATE to a writable directory",
            )
        ]
    mode = state_dir.stat().st_mode & 0o777
    if mode & 0o077:
        return [
            check(
                "state",
                "warn",
                "the agent's state dir {} is open to other users of this node ({:04o}): "
                "its shard records and engine logs can be read".format(state_dir, mode),
                "chmod 700 {} (the agent could not: is it another user's?)".format(state_dir),
            )
        ]
    note = paths.tightened(state_dir)
    if note is not None:
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(float(note.get("at") or 0)))
        return [
            check(
                "state",
                "warn",
                "the agent found its state dir {} open to other users ({}) and closed it "
                "(0700) at {}: what it held before may have been read".format(
                    state_dir, note.get("was"), when
                ),
                "rotate any key or token used on this node before then; "
                "remove {} to clear this".format(state_dir / paths.TIGHTENED_NOTE),
            )
        ]
    return [check("state", "pass", "state dir {} (0700, this user's only)".format(state_dir))]


def node_checks(facts: Dict[str, Any], state_dir: Optional[Path]) -> List[Check]:
    """Every check of the node's setup (the state dir's only when it is given)."""
    checks: List[Check] = []
    checks += _model_dir_checks(facts)
    checks += _engine_checks(facts)
    checks += _router_checks(facts)
    checks += _keepalive_checks(facts)
    checks += _state_checks(state_dir)
    return checks
