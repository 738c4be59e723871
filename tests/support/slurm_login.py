"""The login node of the suite's Slurm cluster: this machine behind asyncssh's server on
loopback, its sessions given the cluster's `SLURM_CONF` as a site's login node has its own,
reached by the console through an ~/.ssh/config alias with its host key in known_hosts."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import asyncssh
from this_machine import sshd_in_a_thread

from llmgw_core.fleet.loopback import LoopbackSshd

LOGIN_ALIAS = "slurm-login"


def write_captures(root: Path, profiles: dict[str, str]) -> Path:
    """A folder of hardware captures, one per Slurm node name (`{"h100-1": "hgx-h100"}`): the
    cluster entry's `replay`, so each node's agent replays a simulated node of its own."""
    from llmgw_agent.sim.profiles import write_profile

    for node, profile in profiles.items():
        write_profile(profile, root / node, hostname=node)
    return root


@contextlib.contextmanager
def login_node(
    tmp_path: Path, login_env: dict[str, str], cluster_yaml: str, more_ssh_config: str = ""
) -> Iterator[tuple[str, dict[str, str]]]:
    """The console's inventory (`clusters:` as `cluster_yaml` writes it, its login the alias
    `slurm-login`) and its environment; the login node's sessions get `login_env`, and the
    console's ~/.ssh/config ends with `more_ssh_config` (`IDENTITY` in it: the client key)."""
    client_key = asyncssh.generate_private_key("ssh-ed25519")
    key_path = tmp_path / "client_key"
    key_path.write_bytes(client_key.export_private_key())
    key_path.chmod(0o600)
    server = LoopbackSshd(
        home=tmp_path / "login-home",
        host_key=asyncssh.generate_private_key("ssh-ed25519"),
        authorized_keys=client_key.export_public_key().decode(),
        env=login_env,
        allow_forwarding=True,  # the console reaches the engines' ports through tunnels
    )
    with sshd_in_a_thread(server):
        home = tmp_path / "console"
        (home / ".ssh").mkdir(parents=True)
        (home / ".ssh" / "config").write_text(
            f"Host {LOGIN_ALIAS}\n  HostName 127.0.0.1\n  Port {server.port}\n"
            f"  IdentityFile {key_path}\n" + more_ssh_config.replace("IDENTITY", str(key_path))
        )
        known_hosts = tmp_path / "known_hosts"
        known_hosts.write_text(server.known_hosts_line() + "\n")
        inventory = tmp_path / "inventory.yaml"
        inventory.write_text(f"clusters:\n{cluster_yaml}known_hosts: {known_hosts}\n")
        yield str(inventory), {"HOME": str(home), "NO_COLOR": "1"}
