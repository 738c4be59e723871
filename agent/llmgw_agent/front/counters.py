"""What the gateway's front counts, and the errors it answers itself, in OpenAI's shape.

`Counters` are served as Prometheus text on the front's control socket
(docs/monitoring.md names every family): requests per key id and outcome,
answered requests per model or adapter, the tokens the engines' usage
counted, the requests a key's own limit refused, and the budgets. Key ids,
never keys.
"""

from __future__ import annotations

import json

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, Dict, List, Mapping, Optional, Tuple

    from llmgw_agent.front.quota import Refused


class Counters:
    """Requests per key id and outcome, tokens and refusals by a key's limits, as Prometheus
    counters."""

    def __init__(self) -> None:
        self.counts: Dict[Tuple[str, str], int] = {}  # (key id, outcome) → count
        self.by_model: Dict[Tuple[str, str, str], int] = {}  # (key id, model, parent) → answered
        self.tokens: Dict[Tuple[str, str, str], int] = {}  # (key id, model, kind) → tokens
        self.limited: Dict[Tuple[str, str], int] = {}  # (key id, limit) → requests refused

    def add(self, key_id: str, outcome: str) -> None:
        self.counts[(key_id, outcome)] = self.counts.get((key_id, outcome), 0) + 1

    def answered(self, key_id: str, model: Optional[str], parent: Optional[str]) -> None:
        """One request of `key_id` answered for `model` (an adapter of `parent`, or a model)."""
        if model is None:
            return
        found = (key_id, model, parent or "")
        self.by_model[found] = self.by_model.get(found, 0) + 1

    def used(self, key_id: str, model: Optional[str], prompt: int, completion: int) -> None:
        """The tokens one answer of `key_id` used, as its engine's `usage` said."""
        for kind, count in (("prompt", prompt), ("completion", completion)):
            found = (key_id, model or "", kind)
            self.tokens[found] = self.tokens.get(found, 0) + count

    def refused(self, key_id: str, limit: str) -> None:
        self.add(key_id, "limited")
        self.limited[(key_id, limit)] = self.limited.get((key_id, limit), 0) + 1

    def text(self) -> str:
        return "".join(
            (
                _family(
                    "llmgw_gateway_requests_total",
                    "counter",
                    "Requests at the gateway's front by client key id and outcome (answered, "
                    "no_key, bad_key, model_refused, no_such_model, router_unreachable, limited; "
                    "refused before a key is known, under key none: bad_request, too_large, "
                    "timeout, not_found, evicted, busy).",
                    ("key", "outcome"),
                    self.counts,
                ),
                _family(
                    "llmgw_gateway_model_requests_total",
                    "counter",
                    "Requests answered by client key id and the model or LoRA adapter asked for "
                    "(parent: the model an adapter adapts, empty for a model).",
                    ("key", "model", "parent"),
                    self.by_model,
                ),
                _family(
                    "llmgw_gateway_tokens_total",
                    "counter",
                    "Tokens of the answers the engines' usage counted, by client key id, model "
                    "or adapter asked for, and kind (prompt, completion).",
                    ("key", "model", "kind"),
                    self.tokens,
                ),
                _family(
                    "llmgw_gateway_limited_total",
                    "counter",
                    "Requests refused with 429 by a client key's limit (requests_per_s, "
                    "concurrent, tokens_per_min, budget), or with 503 by a fair front's queue "
                    "(queue_full, queue_timeout).",
                    ("key", "limit"),
                    self.limited,
                ),
            )
        )

    def budgets_text(self, budgets: List[Tuple[str, str, int, int]]) -> str:
        """Each budget's tokens used in its period, and the budget."""
        if not budgets:
            return ""
        used = {(key_id, period): used for key_id, period, used, _ in budgets}
        limits = {(key_id,): budget for key_id, _, _, budget in budgets}
        return _family(
            "llmgw_gateway_budget_used_tokens",
            "gauge",
            "Tokens a client key used of its budget in the current period (UTC day or month).",
            ("key", "period"),
            used,
        ) + _family(
            "llmgw_gateway_budget_tokens",
            "gauge",
            "A client key's budget of tokens per period.",
            ("key",),
            limits,
        )


def _family(
    name: str, kind: str, helped: str, labels: Tuple[str, ...], samples: Mapping[Any, int]
) -> str:
    """One family in Prometheus's text format: its help, its type, a sample per label set."""
    lines = ["# HELP {} {}".format(name, helped), "# TYPE {} {}".format(name, kind)]
    for values, count in sorted(samples.items()):
        shown = ",".join('{}="{}"'.format(n, _label(v)) for n, v in zip(labels, values))
        lines.append("{}{{{}}} {}".format(name, shown, count))
    return "\n".join(lines) + "\n"


def _label(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def error_body(status: int, message: str, kind: str, code: Optional[str]) -> Tuple[int, bytes]:
    """OpenAI's error body."""
    body = {"error": {"message": message, "type": kind, "param": None, "code": code}}
    return status, json.dumps(body).encode()


def no_key() -> Tuple[int, bytes]:
    return error_body(
        401,
        "You didn't provide an API key. Send it as 'Authorization: Bearer YOUR_KEY'.",
        "invalid_request_error",
        None,
    )


def bad_key() -> Tuple[int, bytes]:
    return error_body(
        401, "Incorrect API key provided.", "invalid_request_error", "invalid_api_key"
    )


def over_limit(refused: Refused) -> Tuple[int, bytes]:
    """OpenAI's 429: `rate_limit_exceeded`, or `insufficient_quota` for a used-up budget."""
    return error_body(429, refused.message, refused.kind, refused.kind)


def overloaded(message: str) -> Tuple[int, bytes]:
    """503, as OpenAI answers when its engines are overloaded."""
    return error_body(503, message, "server_error", "overloaded")


def no_model(model: str) -> Tuple[int, bytes]:
    return error_body(
        404,
        "The model `{}` does not exist or you do not have access to it.".format(model),
        "invalid_request_error",
        "model_not_found",
    )
