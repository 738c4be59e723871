"""What a card's NVLink fabric record means: joined, degraded, unhealthy, not joined, local.

One rule for every reader (facts, doctor, the console's rack view):

- `not-joined`: the state is not `Completed`, or the status is not `Success`
  (`Insufficient Resources` arrives *with* `Completed`, and passes a naive check);
- `unhealthy`: joined, but the health summary says `Unhealthy` or a route is
  unhealthy (the summary can say so while bandwidth still reads `Full`);
- `degraded`: joined and working at reduced bandwidth (`Limited Capacity`,
  bandwidth `Degraded`, or a route recovery in progress);
- `local`: joined with an all-zero ClusterUUID: one machine's own NVSwitch
  (HGX H100/B200), which is no multi-node domain;
- `joined`: in a domain, healthy.
"""

from __future__ import annotations

from llmgw_agent.discover.fields import is_zero_uuid

TYPE_CHECKING = False  # `typing` costs ms of every agent start; annotations are strings here
if TYPE_CHECKING:
    from typing import Any, Dict, List, Optional


def fabric_verdict(fabric: Optional[Dict[str, Any]]) -> Optional[str]:
    """The verdict for one card's fabric record, or None for a card without a fabric."""
    if fabric is None:
        return None
    if (fabric.get("state") or "").lower() != "completed":
        return "not-joined"
    status = fabric.get("status")
    if status is not None and status.lower() != "success":
        return "not-joined"
    health = fabric.get("health") or {}
    summary = (health.get("summary") or "").lower()
    if summary == "unhealthy" or health.get("route_unhealthy") is True:
        return "unhealthy"
    if (
        summary == "limited capacity"
        or (health.get("bandwidth") or "").lower() == "degraded"
        or health.get("route_recovery_in_progress") is True
    ):
        return "degraded"
    if is_zero_uuid(fabric.get("cluster_uuid")):
        return "local"
    return "joined"


def nvlink_domain(fabrics: List[Optional[Dict[str, Any]]]) -> Optional[Dict[str, Any]]:
    """`{cluster_uuid, clique_id}` when every card reports the same non-zero pair, else None."""
    if not fabrics:
        return None
    pairs = set()
    for fabric in fabrics:
        if fabric is None or is_zero_uuid(fabric.get("cluster_uuid")):
            return None
        pairs.add((fabric["cluster_uuid"], fabric.get("clique_id")))
    if len(pairs) != 1:
        return None
    cluster_uuid, clique_id = pairs.pop()
    return {"cluster_uuid": cluster_uuid, "clique_id": clique_id}
