"""The node's half of a fabric test: `ib_write_bw` on one adapter, or a TCP stream.

The console runs a server half on one node and a client half on the other,
rail by rail. This module runs the tool and returns what it printed, whole;
the console reads it (one parser, in the core). Three operations:

* `fabric_probe(args)` — what this node can run: perftest, numactl, replay;
* `fabric_server(args, emit, cancelled, replay)` — listen, emit
  `{"listening": true, "method", "port", "address"}` once a client can
  connect, run to the end, return the raw output;
* `fabric_client(args, emit, cancelled, replay)` — connect to a server half.

Methods:

* `ib_write_bw`: `-d DEV -i PORT [-x GID] -p TCPPORT --report_gbits -s SIZE
  (-D SECONDS | -n ITERS) -q QPS -F`, pinned to the adapter's NUMA node with
  `numactl --cpunodebind=N --membind=N` when numactl exists and the node is
  known. The same options go to both sides, as perftest requires.
* `tcp`: where perftest is missing, a plain TCP stream over the management
  network (the server counts bytes for D seconds; the client sends a fixed
  buffer). It measures that network, never the fabric, and says so.

In replay mode (a simulated node) `ib_write_bw` is not run: the two halves
meet over a real loopback socket, exchange their adapters' speeds, and print
text in ib_write_bw's own format with the figure the simulated hardware
allows (see `fabric.replay`).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from llmgw_agent.fabric import replay as fabric_replay
from llmgw_agent.fabric.half import (
    HANDSHAKES_AT_ONCE,
    LISTEN_WAIT_S,
    OUTPUT_LIMIT_BYTES,
    PERFTEST,
    TCP_BUFFER_BYTES,
    Emit,
    HalfOptions,
    accept_peer,
    half_result,
    ib_write_bw_argv,
    listening_event,
    prove_to_server,
    stop_reason,
)
from llmgw_agent.op_args import OpError
from llmgw_agent.ports import listening_ports

_SYSFS_IB = Path("/sys/class/infiniband")


# --- what this node can run ---------------------------------------------------


def fabric_probe(args: Dict[str, Any], replay: Optional[str] = None) -> Dict[str, Any]:
    """What this node can run: `{"ib_write_bw": bool, "numactl": bool, "replay": bool}`.

    A simulated node "has" perftest when its profile has RDMA adapters.
    """
    if replay is not None:
        return {
            "ib_write_bw": bool(fabric_replay.replay_adapters(replay)),
            "numactl": False,
            "replay": True,
        }
    return {
        "ib_write_bw": shutil.which(PERFTEST) is not None,
        "numactl": shutil.which("numactl") is not None,
        "replay": False,
    }


# --- arguments ----------------------------------------------------------------


# --- the halves -----------------------------------------------------------------


def fabric_server(
    args: Dict[str, Any],
    emit: Emit,
    cancelled: Optional[threading.Event] = None,
    replay: Optional[str] = None,
) -> Dict[str, Any]:
    """Run the server half; emits `listening` once a client may connect."""
    options = HalfOptions(args, "server")
    cancelled = cancelled or threading.Event()
    if options.method == "tcp":
        return tcp_server(options, emit, cancelled, replay)
    if replay is not None:
        return fabric_replay.sim_server(options, emit, cancelled, replay)
    return _perftest_half(options, emit, cancelled)


def fabric_client(
    args: Dict[str, Any],
    emit: Emit,
    cancelled: Optional[threading.Event] = None,
    replay: Optional[str] = None,
) -> Dict[str, Any]:
    """Run the client half against a server half already listening."""
    options = HalfOptions(args, "client")
    cancelled = cancelled or threading.Event()
    if options.method == "tcp":
        return tcp_client(options, emit, cancelled)
    if replay is not None:
        return fabric_replay.sim_client(options, cancelled, replay)
    return _perftest_half(options, emit, cancelled)


# --- ib_write_bw for real ---------------------------------------------------------


def adapter_numa_node(device: str) -> Optional[int]:
    """The NUMA node of an adapter from sysfs, or None (-1 means the kernel does not know)."""
    try:
        value = int((_SYSFS_IB / device / "device" / "numa_node").read_text().strip())
    except (OSError, ValueError):
        return None
    return value if value >= 0 else None


def _adapter_gid_index(device: str, ib_port: int) -> Optional[int]:
    """The RoCE v2 GID index of a live Ethernet port (None on InfiniBand)."""
    from llmgw_agent.discover import ib

    port_dir = _SYSFS_IB / device / "ports" / str(ib_port)
    try:
        layer = ib.link_layer((port_dir / "link_layer").read_text())
    except OSError:
        return None
    return ib.roce_gid_index(port_dir) if layer == "Ethernet" else None


def start_tool(argv: List[str], tool: str) -> "subprocess.Popen[bytes]":
    """Start a measuring tool in a process group of its own, stdout and stderr as one pipe.

    Raises:
        OpError: `failed` when it cannot be started at all.
    """
    try:
        return subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    except OSError as exc:
        raise OpError("failed", "{} could not start: {}".format(tool, exc)) from exc


class CappedOutput:
    """A child's stdout+stderr, read on a thread, kept up to `limit_bytes`."""

    def __init__(self, stream: Any, limit_bytes: int = OUTPUT_LIMIT_BYTES) -> None:
        self._chunks: List[bytes] = []
        self._size = 0
        self._limit_bytes = limit_bytes
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream: Any) -> None:
        for chunk in iter(lambda: stream.read1(65536), b""):
            if self._size < self._limit_bytes:
                self._chunks.append(chunk)
                self._size += len(chunk)

    def text(self, join_timeout_s: float = 2.0) -> str:
        """Everything read (waits briefly for the last bytes)."""
        self._thread.join(join_timeout_s)
        return b"".join(self._chunks).decode("utf-8", errors="replace")


def _perftest_half(options: HalfOptions, emit: Emit, cancelled: threading.Event) -> Dict[str, Any]:
    if shutil.which(PERFTEST) is None:
        raise OpError("unavailable", "perftest ({}) is not installed on this node".format(PERFTEST))
    if options.numa_node is None:
        options.numa_node = adapter_numa_node(str(options.device))
    if options.gid_index is None:
        options.gid_index = _adapter_gid_index(str(options.device), options.ib_port)
    argv = ib_write_bw_argv(options, numactl=shutil.which("numactl") is not None)
    proc = start_tool(argv, PERFTEST)
    output = CappedOutput(proc.stdout)
    if options.side == "server":
        if _wait_until_listening(options.port, proc, cancelled, LISTEN_WAIT_S):
            emit(listening_event(options, None))
        deadline = time.monotonic() + options.accept_timeout_s + options.expected_run_s + 30.0
    else:
        deadline = time.monotonic() + options.expected_run_s + 60.0
    stopped = wait_or_stop(proc, cancelled, deadline)
    return half_result(
        options,
        argv=argv,
        exit_code=proc.returncode,
        output=output.text(),
        numa_node=options.numa_node,
        gid_index=options.gid_index,
        stopped=stopped,
        simulated=False,
    )


def wait_or_stop(
    proc: "subprocess.Popen[bytes]", cancelled: threading.Event, deadline: float
) -> Optional[str]:
    """Wait for the child; kill its group on cancel or past the deadline (and say which)."""
    while True:
        try:
            proc.wait(timeout=0.2)
            return None
        except subprocess.TimeoutExpired:
            pass
        reason = (
            "cancelled"
            if cancelled.is_set()
            else ("timeout" if time.monotonic() > deadline else None)
        )
        if reason is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return reason


def _wait_until_listening(
    port: int, proc: "subprocess.Popen[bytes]", cancelled: threading.Event, wait_s: float
) -> bool:
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline and not cancelled.is_set():
        if proc.poll() is not None:
            return False
        if port in listening_ports():
            return True
        time.sleep(0.05)
    return False


# --- TCP over the management network ---------------------------------------------------


def tcp_server(
    options: HalfOptions, emit: Emit, cancelled: threading.Event, replay: Optional[str] = None
) -> Dict[str, Any]:
    """Accept the test's client (it proves it holds the secret) and count what it sends.

    Binds `bind_address` (default: every interface; loopback on a simulated
    node, where every node is this machine) on `port` (0: any free port,
    announced in the `listening` event).
    """
    secret = options.required_secret()
    bind = options.bind_address or ("127.0.0.1" if replay is not None else "0.0.0.0")
    family = socket.AF_INET6 if ":" in bind else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            listener.bind((bind, options.port))
        except OSError as exc:
            raise OpError(
                "busy", "cannot listen on {}:{}: {}".format(bind, options.port, exc)
            ) from exc
        listener.listen(HANDSHAKES_AT_ONCE)
        options.port = listener.getsockname()[1]
        emit(listening_event(options, bind if bind not in ("0.0.0.0", "::") else _mgmt_address()))
        connection = accept_peer(listener, cancelled, options.accept_timeout_s, secret)
        if connection is None:
            return half_result(
                options, bytes=0, seconds=0.0, gbps=0.0, stopped=stop_reason(cancelled)
            )
        with connection:
            received, seconds, stopped = _count_bytes(
                connection, cancelled, options.duration_s + 10.0
            )
    return half_result(
        options,
        bytes=received,
        seconds=seconds,
        gbps=_gbps(received, seconds),
        address=bind,
        stopped=stopped,
    )


def tcp_client(options: HalfOptions, emit: Emit, cancelled: threading.Event) -> Dict[str, Any]:
    """Send a fixed buffer to the server half for the test's duration, once each side has
    proved it holds the test's secret (the clock starts after)."""
    secret = options.required_secret()
    address = str(options.server_address)
    try:
        connection = socket.create_connection((address, options.port), timeout=10.0)
    except OSError as exc:
        raise OpError(
            "failed", "cannot reach {}:{} over TCP: {}".format(address, options.port, exc)
        ) from exc
    buffer = b"\0" * TCP_BUFFER_BYTES
    sent = 0
    with connection:
        connection.settimeout(10.0)
        prove_to_server(connection, secret, "{}:{}".format(address, options.port))
        started = time.monotonic()
        end = started + options.duration_s
        try:
            while time.monotonic() < end and not cancelled.is_set():
                connection.sendall(buffer)
                sent += len(buffer)
            seconds = time.monotonic() - started
            connection.shutdown(socket.SHUT_WR)
            connection.recv(1)  # the server closes once it has counted everything
        except OSError as exc:
            raise OpError("failed", "the TCP stream to {} broke: {}".format(address, exc)) from exc
    return half_result(
        options,
        bytes=sent,
        seconds=seconds,
        gbps=_gbps(sent, seconds),
        address=address,
        stopped=stop_reason(cancelled),
    )


def _count_bytes(
    connection: socket.socket, cancelled: threading.Event, limit_s: float
) -> Tuple[int, float, Optional[str]]:
    """Bytes received until the peer closes; seconds from the first byte to the last."""
    buffer = bytearray(TCP_BUFFER_BYTES)
    received = 0
    first = last = None
    deadline = time.monotonic() + limit_s
    while True:
        if cancelled.is_set():
            return received, _span(first, last), "cancelled"
        if time.monotonic() > deadline:
            return received, _span(first, last), "timeout"
        try:
            count = connection.recv_into(buffer)
        except socket.timeout:
            continue
        except OSError:
            return received, _span(first, last), "broken"
        if count == 0:
            return received, _span(first, last), None
        last = time.monotonic()
        if first is None:
            first = last
        received += count


def _span(first: Optional[float], last: Optional[float]) -> float:
    return (last - first) if first is not None and last is not None else 0.0


def _gbps(byte_count: int, seconds: float) -> float:
    return byte_count * 8 / seconds / 1e9 if seconds > 0 else 0.0


def _mgmt_address() -> Optional[str]:
    from llmgw_agent.discover.host import management_interface

    return management_interface()[0]
