"""LoRA adapters changed in a running replica: `apply` of a service whose `adapters:` changed.

vLLM (started with `VLLM_ALLOW_RUNTIME_LORA_UPDATING`) and SGLang load and
unload adapters while they serve (`POST /v1/load_lora_adapter`,
`/v1/unload_lora_adapter`; SGLang's without `/v1`), so the base model is
never restarted and no request is dropped: the new adapters are loaded
first, the gateways then route by the new list, and the adapters dropped are
unloaded once the gateways have stopped sending them requests. llama.cpp
loads its adapters at start only: there, and for an adapter of a rank above
the one the engine's slots were made for, the replica is rolled instead.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import httpx

from llmgw_agent.ops import Op
from llmgw_core.engines.environment import RUNTIME_LORA_VARIABLE
from llmgw_core.errors import LlmgwError
from llmgw_core.memory.adapters import LoraSlots, default_vllm_rank
from llmgw_core.serve.http import EngineReach, engine_tls
from llmgw_core.serve.view import ReplicaView

REQUEST_TIMEOUT_S = 120.0
"""A load reads the adapter's weights from the node's disk: seconds, not milliseconds."""
SETTLE_S = 0.5
"""After the gateways stop routing an adapter, how long before it is unloaded (a request
routed just before may not have reached the engine yet)."""

_ROUTES = {
    "vllm": ("/v1/load_lora_adapter", "/v1/unload_lora_adapter"),
    "sglang": ("/load_lora_adapter", "/unload_lora_adapter"),
}


def wanted_adapters(base: Any) -> tuple[tuple[str, str], ...]:
    """A service's adapters as its replicas load them: (name, source), sorted."""
    slots = getattr(base, "lora", None)
    if slots is None:
        return ()
    return tuple(sorted((a.name, a.given) for a in slots.adapters))


def _launched(view: ReplicaView) -> LoraSlots | None:
    request = view.spec.get("request")
    return LoraSlots.from_record(request.get("lora")) if isinstance(request, dict) else None


def runtime_refusal(view: ReplicaView, wanted: LoraSlots | None) -> str | None:
    """Why `view`'s engine cannot take `wanted`'s adapters while it runs; None when it can."""
    engine = str(view.spec.get("engine") or "")
    if engine not in _ROUTES:
        return f"{engine or 'its engine'} loads adapters at start only"
    launched = _launched(view)
    if launched is None:
        return "it was started without adapters (its engine has no room for them)"
    if engine == "vllm":
        head = min(view.shards, key=lambda s: s.rank, default=None)
        if head is None or head.env.get(RUNTIME_LORA_VARIABLE) != "True":
            return f"its vLLM was started without {RUNTIME_LORA_VARIABLE}"
    ceiling = launched.max_lora_rank
    if engine == "vllm":
        ceiling = default_vllm_rank(ceiling)
    held = {a["name"]: a.get("origin") or a["source"] for a in view.adapters}
    for adapter in wanted.adapters if wanted else ():
        if held.get(adapter.name) != adapter.given and not adapter.given.startswith("/"):
            return f"adapter {adapter.name!r} comes from the Hub, which a start fetches"
        if adapter.rank > ceiling:
            return (
                f"adapter {adapter.name!r} has rank {adapter.rank}, above the max_lora_rank "
                f"{ceiling} its engine was started with"
            )
    return None


async def engine_request(
    reach: EngineReach,
    view: ReplicaView,
    method: str,
    path: str,
    key: str | None,
    body: dict[str, Any] | None = None,
    timeout_s: float = REQUEST_TIMEOUT_S,
) -> httpx.Response:
    """One request to rank 0's engine, through a tunnel, pinned to its certificate, with its key.

    Raises:
        LlmgwError: the engine is not ready or cannot be reached.
    """
    node, port, _ = view.ready_engine()
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    tls = engine_tls(view.tls_cert)
    try:
        tunnel = await reach.tunnel(node, port, view.http_host)
        async with tunnel.client(timeout=timeout_s, tls=tls) as client:
            return await client.request(method, tunnel.base(tls) + path, headers=headers, json=body)
    except (httpx.HTTPError, OSError) as exc:
        raise LlmgwError(
            f"{view.name}'s engine did not answer {path}: {type(exc).__name__}"
        ) from None


async def change_adapters(
    fleet: Any, reach: EngineReach, view: ReplicaView, wanted: LoraSlots | None, key: str | None
) -> dict[str, Any]:
    """Load the adapters `view` lacks, let the gateways route by the new list, then unload the
    ones it no longer serves; record the list on its shards.

    Returns:
        `{added, removed}`: the adapters' names.

    Raises:
        LlmgwError: the engine refused a load or an unload (in its words).
    """
    from llmgw_core.gateway.run import follow_all
    from llmgw_core.serve.weights import copy_to_node

    engine = str(view.spec.get("engine"))
    load, unload = _ROUTES[engine]
    held = {a["name"]: a.get("origin") or a["source"] for a in view.adapters}
    want = {a.name: a.source for a in wanted.adapters} if wanted else {}
    added = [n for n in sorted(want) if held.get(n) != want[n]]
    removed = [n for n in sorted(held) if want.get(n) != held[n]]
    changed = [n for n in added if n in held]  # a new source under a held name: out, then in
    for name in changed:
        await _call(reach, view, unload, {"lora_name": name}, key)
    nodes = sorted({s.node for s in view.live_shards()})
    for name in added:
        if Path(want[name]).exists():
            for node in nodes:
                await copy_to_node(reach, node, want[name])
        await _call(reach, view, load, {"lora_name": name, "lora_path": want[name]}, key)
    kept = {a["name"]: a for a in view.adapters}
    records = [
        {"name": n, "source": kept[n]["source"], "origin": kept[n].get("origin"), "lora_id": None}
        if n in kept and n not in added
        else {"name": n, "source": s, "lora_id": None}
        for n, s in sorted(want.items())
    ]
    for shard in view.live_shards():
        await fleet.request(
            shard.node, Op.SHARD_ADAPTERS, {"shard_id": shard.shard_id, "adapters": records}
        )
    await follow_all(fleet, reach)
    await asyncio.sleep(SETTLE_S)
    for name in (n for n in removed if n not in changed):
        await _call(reach, view, unload, {"lora_name": name}, key)
    return {"added": added, "removed": removed}


async def _call(
    reach: EngineReach, view: ReplicaView, path: str, body: dict[str, Any], key: str | None
) -> None:
    answer = await engine_request(reach, view, "POST", path, key, body)
    if answer.status_code != 200:
        raise LlmgwError(
            f"{view.name}'s engine refused {path} for {body.get('lora_name')!r}: "
            f"{answer.status_code} {answer.text[:200]}"
        )
