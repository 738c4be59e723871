"""Which environment variables hold a secret, by their name: the one rule, agent and console.

The console's allowlist (`llmgw_core.engines.allowlist`) refuses such a
variable on a command line and hides its value when it shows an environment;
the agent refuses one in a shard's stored `env` (`shards/spec.py`), where it
would reach the node's disk. Both read this rule.
"""

from __future__ import annotations

import re

SECRET_NAME = re.compile(
    r"(^|_)(TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIALS?|API_KEY|ACCESS_KEY|PRIVATE_KEY)(_|$)"
)
"""A variable that holds a secret (`HF_TOKEN`, `VLLM_API_KEY`, `DB_PASSWORD`), matched with
`search` on its upper-cased name."""


def is_secret_name(name: str) -> bool:
    """True for a variable that holds a secret (`HF_TOKEN`, `vllm_api_key`, `DB_PASSWORD`)."""
    return bool(SECRET_NAME.search(name.upper()))
