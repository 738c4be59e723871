"""How a shard outlives the SSH session that started it, on this node.

`setsid` plus redirected stdio is enough where systemd-logind leaves a
session's processes alone. Where `KillUserProcesses=yes`, logind kills every
process in the session's scope at logout whatever setsid did; the shard must
then live in another unit (`systemd-run --user --scope`), which only outlives
the login when lingering is on for the user.
"""

from __future__ import annotations

import glob
import os

from llmgw_agent.executables import which

TYPE_CHECKING = False  # `typing` costs ms of every agent start; annotations are strings here
if TYPE_CHECKING:
    from typing import List, Optional, Sequence, Tuple

KEEPALIVE_ENV = "LLMGW_AGENT_KEEPALIVE"
"""`setsid` or `systemd-run`: overrides detection (tests, odd nodes)."""

_LOGIND_CONFS = (
    "/usr/lib/systemd/logind.conf.d/*.conf",
    "/usr/local/lib/systemd/logind.conf.d/*.conf",
    "/etc/systemd/logind.conf",
    "/etc/systemd/logind.conf.d/*.conf",
    "/run/systemd/logind.conf.d/*.conf",
)


def _logind_settings(config_globs: Sequence[str]) -> dict:
    """The `[Login]` settings of logind's config files, later files winning."""
    settings: dict = {}
    for pattern in config_globs:
        for path in sorted(glob.glob(pattern)):
            try:
                with open(path) as handle:
                    lines = handle.read().splitlines()
            except OSError:
                continue
            for line in lines:
                line = line.strip()
                if not line or line[0] in "#;[" or "=" not in line:
                    continue
                key, _, value = line.partition("=")
                settings[key.strip()] = value.strip()
    return settings


def _user_name() -> str:
    import pwd  # only where logind kills session processes

    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return str(os.getuid())


def keepalive_method(
    config_globs: Sequence[str] = _LOGIND_CONFS, linger_dir: str = "/var/lib/systemd/linger"
) -> Tuple[Optional[str], str]:
    """The way shards are kept alive here, and why: `("setsid"|"systemd-run"|None, reason)`.

    None means neither way works: logind kills session processes and the
    user manager does not outlive the login (the reason says what to run).

    Args:
        config_globs: logind's config files, in the order systemd reads them.
        linger_dir: where `loginctl enable-linger` leaves one file per user.
    """
    forced = os.environ.get(KEEPALIVE_ENV)
    if forced in ("setsid", "systemd-run"):
        return forced, "chosen by {}={}".format(KEEPALIVE_ENV, forced)
    settings = _logind_settings(config_globs)
    kill = settings.get("KillUserProcesses", "").lower()
    if kill not in ("yes", "true", "1", "on"):
        how = "set to no" if kill else "not set in logind.conf (distributions default to no)"
        return "setsid", "logind leaves session processes running (KillUserProcesses {})".format(
            how
        )
    user = _user_name()
    if user in settings.get("KillExcludeUsers", "root").split():
        return "setsid", "KillUserProcesses=yes, but user {} is excluded".format(user)
    if which("systemd-run") is None:
        return None, (
            "logind kills session processes (KillUserProcesses=yes) and systemd-run is "
            "missing: set KillUserProcesses=no in /etc/systemd/logind.conf"
        )
    if not os.path.exists(os.path.join(linger_dir, user)):
        return None, (
            "logind kills session processes (KillUserProcesses=yes) and lingering is off "
            "for {0}: run `loginctl enable-linger {0}`".format(user)
        )
    return "systemd-run", "logind kills session processes; shards run in a transient user scope"


def launch_prefix(method: Optional[str], shard_id: str) -> List[str]:
    """What to put before the supervisor's argv so it survives the session.

    Args:
        method: what `keepalive_method()` chose (None: setsid, the best left).
        shard_id: names the transient unit.
    """
    if method != "systemd-run":
        return []
    return ["systemd-run", "--user", "--scope", "--quiet", "--unit", "llmgw-" + shard_id]
