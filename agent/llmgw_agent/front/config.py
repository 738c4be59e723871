"""The front's configuration: its client keys and their limits, the engines' keys, its TLS.

It comes as JSON in `LLMGW_FRONT_CONFIG` (see `server.py`), put there by the
agent from the shard's `secret_env` and taken out of the environment at start.
"""

from __future__ import annotations

import hmac
import os
import re
from pathlib import Path

from llmgw_agent.front.fair import Shares
from llmgw_agent.front.http import Limits
from llmgw_agent.front.quota import Quotas

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Optional, Tuple

_STORE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


class Config:
    """The client keys (id, key, models or None for all) and the engines' keys by model."""

    def __init__(self, raw: dict) -> None:
        self.keys = []  # type: List[Tuple[str, bytes, Optional[frozenset]]]
        limited = {}  # type: Dict[str, dict]
        shares_of = {}  # type: Dict[str, Tuple[float, str]]
        for entry in raw.get("keys") or []:
            if entry.get("limits") is not None:
                limited[str(entry["id"])] = entry["limits"]
            shares_of[str(entry["id"])] = (
                entry.get("weight", 1.0),
                entry.get("priority", "normal"),
            )
            models = entry.get("models")
            self.keys.append(
                (
                    str(entry["id"]),
                    str(entry["key"]).encode(),
                    frozenset(models) if models is not None else None,
                )
            )
        self.upstream = {str(k): str(v) for k, v in (raw.get("upstream") or {}).items()}
        self.upstream_default = raw.get("upstream_default")
        tls = raw.get("tls")
        self.tls = (str(tls["cert"]), str(tls["key"])) if tls else None
        self.limits = Limits(raw.get("limits"))
        store = raw.get("store")
        if store is not None and not _STORE_NAME.match(str(store)):
            raise ValueError("store is not a gateway's name")
        # What outlives the front, under the gateway's name in the agent's state folder
        # (0700): the budgets' counts and the access log. None: the front's own folder.
        self.folder: Optional[str] = None
        if store is not None:
            from llmgw_agent import paths

            kept = paths.state_subdir("gateways") / str(store)
            kept.mkdir(mode=0o700, exist_ok=True)
            self.folder = str(kept)
        budgets = os.path.join(self.folder, "budgets.json") if self.folder else None
        self.quotas = Quotas(limited, Path(budgets) if budgets else None)
        fair = raw.get("fair")
        self.shares = Shares(fair, shares_of) if fair is not None else None
        """Fair shares between the keys while the engines are saturated (`fair.py`; the
        front gives it its pool; None: requests go through as they come)."""

    @property
    def open(self) -> bool:
        """No client key configured: every request passes (the gateway was started without one)."""
        return not self.keys

    def who(self, authorization: str) -> Optional[Tuple[str, Optional[frozenset]]]:
        """The key id and its models for an `Authorization` value, None when it is no key of ours.

        Every key is compared, in constant time, whichever matches: how long
        the check takes says nothing of which key was near.
        """
        given = (
            authorization[7:].strip().encode() if authorization[:7].lower() == "bearer " else b""
        )
        found = None
        for key_id, key, models in self.keys:
            if hmac.compare_digest(given, key) and found is None:
                found = (key_id, models)
        return found

    def upstream_key(self, model: Optional[str]) -> Optional[str]:
        """The key the engines serving `model` demand (None: they demand none)."""
        if model is not None and model in self.upstream:
            return self.upstream[model]
        return self.upstream_default


def tls_context(cert_pem: str, key_pem: str):  # -> ssl.SSLContext
    """A server context from PEM text, loaded through in-memory files (never the node's disk).

    Raises:
        ValueError: this system has no `memfd_create`, or the PEM is not a
            certificate and its key.
    """
    import ssl

    if not hasattr(os, "memfd_create"):
        raise ValueError("this system cannot hold the certificate in memory (no memfd_create)")
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    descriptors = []
    try:
        for text in (cert_pem, key_pem):
            fd = os.memfd_create("llmgw-front-tls")
            descriptors.append(fd)
            os.write(fd, text.encode())
        cert_path, key_path = ("/proc/self/fd/{}".format(fd) for fd in descriptors)
        context.load_cert_chain(cert_path, key_path)
    except ssl.SSLError as exc:
        raise ValueError("the certificate or its key is not usable: {}".format(exc)) from None
    finally:
        for fd in descriptors:
            os.close(fd)
    return context
