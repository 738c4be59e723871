"""Discovery of N loopback nodes over OpenSSH, next to a plain `ssh HOST true` fan-out.

    .venv/bin/python tests/benchmarks/bench_discovery.py [N ...]   (default 8 32 64)

For each N it starts ceil(N / 16) OpenSSH sshd's (an sshd listens on 16
ports at most) on 127.0.0.1, one port per node, and prints:

* cold: connect + deploy the agent (upload) + start it + facts, every node ready;
* warm: the same with the agent already there (the usual case);
* ssh true: `ssh -p PORT 127.0.0.1 true` for every node at once (OpenSSH's client);
* the ratio warm / ssh true;

then one node's cost, phase by phase, and the agent's memory. Prints figures,
asserts nothing. Needs `sshd` (apt-get install openssh-server).
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import math
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import asyncssh

from llmgw_agent.sim.profiles import write_profile
from llmgw_core.fleet.client import AgentClient
from llmgw_core.fleet.deploy import agent_command, ensure_agent
from llmgw_core.fleet.fleet import Fleet
from llmgw_core.fleet.ssh import SshConnector, SshSettings, SshTarget
from llmgw_core.inventory import parse_inventory

PORTS_PER_SSHD = 16
SSHD = shutil.which("sshd") or "/usr/sbin/sshd"


def free_port() -> int:
    with contextlib.closing(socket.socket()) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_sshd(
    folder: Path, ports: list[int], public_key: str, host_key: Path
) -> subprocess.Popen[bytes]:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "home").mkdir(exist_ok=True)
    (folder / "authorized_keys").write_text(public_key)
    config = folder / "sshd_config"
    config.write_text(
        "".join(f"ListenAddress 127.0.0.1:{port}\n" for port in ports)
        + f"HostKey {host_key}\nAuthorizedKeysFile {folder / 'authorized_keys'}\n"
        + f"PidFile {folder / 'pid'}\nStrictModes no\nUsePAM no\nPasswordAuthentication no\n"
        + "KbdInteractiveAuthentication no\nSubsystem sftp internal-sftp\n"
        + "MaxStartups 200:30:400\nMaxSessions 20\nLogLevel ERROR\n"
        + f"SetEnv HOME={folder / 'home'}\n"
    )
    if os.geteuid() == 0:
        Path("/run/sshd").mkdir(exist_ok=True)
    process = subprocess.Popen([SSHD, "-D", "-e", "-f", str(config)], stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if all(_listening(port) for port in ports):
            return process
        time.sleep(0.02)
    raise SystemExit(f"sshd on {ports} did not start")


def _listening(port: int) -> bool:
    with contextlib.closing(socket.socket()) as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


async def discover(inventory_text: str, known_hosts: Path) -> tuple[float, dict[str, int]]:
    inventory = parse_inventory(inventory_text)
    settings = SshSettings(
        known_hosts=known_hosts, config_paths=(), use_ssh_agent=False, max_handshakes=64
    )
    fleet = Fleet(inventory, SshConnector(settings))
    started = time.perf_counter()
    await fleet.start()
    snapshot = await fleet.wait_settled(300)
    elapsed = time.perf_counter() - started
    await fleet.close()
    return elapsed, snapshot.counts()


async def ssh_true_fanout(ports: list[int], key: Path, known_hosts: Path) -> float:
    async def one(port: int) -> int:
        process = await asyncio.create_subprocess_exec(
            "ssh", "-p", str(port), "-i", str(key), "-o", f"UserKnownHostsFile={known_hosts}",
            "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes", "-F", "/dev/null",
            f"{getpass.getuser()}@127.0.0.1", "true",
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        return await process.wait()

    started = time.perf_counter()
    codes = await asyncio.gather(*(one(port) for port in ports))
    elapsed = time.perf_counter() - started
    if any(codes):
        print(f"  (ssh true failed on {sum(1 for c in codes if c)} of {len(codes)} hosts)")
    return elapsed


async def one_node_phases(
    port: int, known_hosts: Path, key: Path, capture: Path, work_dir: Path
) -> dict[str, float]:
    settings = SshSettings(known_hosts=known_hosts, config_paths=(), use_ssh_agent=False)
    connector = SshConnector(settings)
    target = SshTarget(node="n", host="127.0.0.1", port=port, identity_file=str(key))
    phases: dict[str, float] = {}
    mark = time.perf_counter()
    connection = await connector.connect(target)
    phases["connect + auth"] = time.perf_counter() - mark
    mark = time.perf_counter()
    deployment = await ensure_agent(connection, "n")
    phases["probe (python, agent present)"] = time.perf_counter() - mark
    mark = time.perf_counter()
    client = await AgentClient.start(
        "n", connection, agent_command(deployment, replay=str(capture), state_dir=str(work_dir))
    )
    phases["agent start to hello"] = time.perf_counter() - mark
    mark = time.perf_counter()
    await client.request("facts", timeout_s=60)
    phases["facts (HGX H100 replay)"] = time.perf_counter() - mark
    rtts = []
    for _ in range(50):
        mark = time.perf_counter()
        await client.request("ping", timeout_s=10)
        rtts.append(time.perf_counter() - mark)
    phases["ping round trip (median of 50)"] = statistics.median(rtts)
    pid = client.hello.get("pid")
    with contextlib.suppress(OSError, TypeError):
        status = Path(f"/proc/{pid}/status").read_text()
        rss_kib = next(
            int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")
        )
        phases["agent RSS (MiB)"] = rss_kib / 1024
    await client.close()
    connection.close()
    return phases


def write_keys(root: Path) -> tuple[asyncssh.SSHKey, Path, Path, str]:
    """A client key and a host key under `root`: the client key, its file, the host key's file
    and the host key's public line (for known_hosts)."""
    key = asyncssh.generate_private_key("ssh-ed25519")
    key_file = root / "client_key"
    key_file.write_bytes(key.export_private_key())
    key_file.chmod(0o600)
    host_key = asyncssh.generate_private_key("ssh-ed25519")
    host_key_file = root / "host_key"
    host_key_file.write_bytes(host_key.export_private_key())
    host_key_file.chmod(0o600)
    return key, key_file, host_key_file, host_key.export_public_key().decode().strip()


def run(counts: list[int]) -> None:
    if not Path(SSHD).exists():
        raise SystemExit("sshd is not installed: apt-get install openssh-server")
    root = Path(tempfile.mkdtemp(prefix="llmgw-bench-"))
    try:
        key, key_file, host_key_file, host_public = write_keys(root)
        capture = write_profile("hgx-h100", root / "capture")
        print(
            f"discovery over OpenSSH on 127.0.0.1, {os.cpu_count()} CPUs, Python {sys.version.split()[0]}"
        )
        print(
            f"{'N':>4} {'cold s':>8} {'warm s':>8} {'ssh true s':>11} {'warm/ssh':>9} {'ms/node warm':>13}"
        )
        for count in counts:
            ports = [free_port() for _ in range(count)]
            known_hosts = root / f"known_hosts-{count}"
            known_hosts.write_text("".join(f"[127.0.0.1]:{port} {host_public}\n" for port in ports))
            servers = []
            for index in range(math.ceil(count / PORTS_PER_SSHD)):
                chunk = ports[index * PORTS_PER_SSHD : (index + 1) * PORTS_PER_SSHD]
                servers.append(
                    start_sshd(
                        root / f"sshd-{count}-{index}",
                        chunk,
                        key.export_public_key().decode(),
                        host_key_file,
                    )
                )
            try:
                text = (
                    "nodes:\n"
                    + "".join(
                        f"  - {{name: n{i}, host: 127.0.0.1, port: {port}, user: {getpass.getuser()}, "
                        f"identity_file: {key_file}, replay: {capture}, work_dir: {root / f'state-{count}-{i}'}}}\n"
                        for i, port in enumerate(ports)
                    )
                    + f"known_hosts: {known_hosts}\n"
                )
                cold, cold_counts = asyncio.run(discover(text, known_hosts))
                warm, warm_counts = asyncio.run(discover(text, known_hosts))
                fanout = asyncio.run(ssh_true_fanout(ports, key_file, known_hosts))
                if cold_counts != {"ready": count} or warm_counts != {"ready": count}:
                    print(f"  (not all ready: cold {cold_counts}, warm {warm_counts})")
                print(
                    f"{count:>4} {cold:>8.2f} {warm:>8.2f} {fanout:>11.2f} {warm / fanout:>9.2f} {1000 * warm / count:>13.1f}"
                )
                if count == counts[0]:
                    phases = asyncio.run(
                        one_node_phases(
                            ports[0], known_hosts, key_file, capture, root / "state-phases"
                        )
                    )
            finally:
                for server in servers:
                    server.terminate()
                    server.wait(10)
        print("one node, phase by phase (agent already deployed):")
        for name, value in phases.items():
            shown = f"{value:.1f} MiB" if "MiB" in name else f"{1000 * value:.1f} ms"
            print(f"  {name:<34} {shown}")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    run([int(arg) for arg in sys.argv[1:]] or [8, 32, 64])
