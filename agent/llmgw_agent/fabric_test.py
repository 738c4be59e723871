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
allows (see `fabric_replay`).
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
from typing import Any, Callable, Dict, List, Optional, Tuple

from llmgw_agent.op_args import OpError, arg, number_arg
from llmgw_agent.ports import listening_ports

Emit = Callable[[Dict[str, Any]], None]

PERFTEST = "ib_write_bw"
DEFAULT_OOB_PORT = 18515
"""perftest's default out-of-band TCP port; the console gives each concurrent rail its own."""
DEFAULT_SIZE_BYTES = 8 * 1024 * 1024
"""Large messages: small ones under-report (perftest issues #252, #318)."""
DEFAULT_DURATION_S = 5.0
DEFAULT_QPS = 2
DEFAULT_ACCEPT_TIMEOUT_S = 60.0
LISTEN_WAIT_S = 15.0
"""How long the server half waits for ib_write_bw to open its port before giving up."""
OUTPUT_LIMIT_BYTES = 512 * 1024
TCP_BUFFER_BYTES = 1024 * 1024

_SYSFS_IB = Path("/sys/class/infiniband")


# --- what this node can run ---------------------------------------------------


def fabric_probe(args: Dict[str, Any], replay: Optional[str] = None) -> Dict[str, Any]:
    """What this node can run: `{"ib_write_bw": bool, "numactl": bool, "replay": bool}`.

    A simulated node "has" perftest when its profile has RDMA adapters.
    """
    if replay is not None:
        from llmgw_agent.fabric_replay import replay_adapters

        return {
            "ib_write_bw": bool(replay_adapters(replay)),
            "numactl": False,
            "replay": True,
        }
    return {
        "ib_write_bw": shutil.which(PERFTEST) is not None,
        "numactl": shutil.which("numactl") is not None,
        "replay": False,
    }


# --- arguments ----------------------------------------------------------------


class HalfOptions:
    """The options of one half, checked; the same for both halves except the address."""

    def __init__(self, args: Dict[str, Any], side: str) -> None:
        self.side = side
        self.method = arg(args, "method", (str,), PERFTEST)
        if self.method not in (PERFTEST, "tcp"):
            raise OpError("bad_args", "method must be 'ib_write_bw' or 'tcp'")
        default_port = DEFAULT_OOB_PORT if self.method == PERFTEST else 0
        self.port = int(number_arg(args, "port", default_port, maximum=65535))
        self.duration_s = float(number_arg(args, "duration_s", DEFAULT_DURATION_S, 0.1, 600.0))
        iterations = number_arg(args, "iterations", None, 1, 10_000_000)
        self.iterations = int(iterations) if iterations is not None else None
        self.size_bytes = int(number_arg(args, "size_bytes", DEFAULT_SIZE_BYTES, 2, 2**31))
        self.qps = int(number_arg(args, "qps", DEFAULT_QPS, 1, 64))
        self.accept_timeout_s = float(
            number_arg(args, "accept_timeout_s", DEFAULT_ACCEPT_TIMEOUT_S, 0.1, 3600.0)
        )
        self.device = arg(args, "device", (str,), None)
        if self.method == PERFTEST and not self.device:
            raise OpError("bad_args", "argument 'device' is required for ib_write_bw")
        if self.device is not None and not _safe_token(self.device):
            raise OpError("bad_args", "device {!r} is not an adapter name".format(self.device))
        self.ib_port = int(number_arg(args, "ib_port", 1, 1, 16))
        gid = number_arg(args, "gid_index", None, 0, 1024)
        self.gid_index = int(gid) if gid is not None else None
        numa = number_arg(args, "numa_node", None, 0, 1024)
        self.numa_node = int(numa) if numa is not None else None
        self.server_address = arg(args, "server_address", (str,), None)
        if side == "client" and not self.server_address:
            raise OpError("bad_args", "argument 'server_address' is required for a client")
        if self.server_address is not None and not _safe_token(self.server_address):
            raise OpError(
                "bad_args", "server_address {!r} is not an address".format(self.server_address)
            )
        self.bind_address = arg(args, "bind_address", (str,), None)

    @property
    def expected_run_s(self) -> float:
        """How long the tool should take once connected (iterations: a generous guess)."""
        return self.duration_s if self.iterations is None else 60.0


def _safe_token(text: str) -> bool:
    """An adapter name or an address: letters, digits and `._:-%` only (it reaches argv).

    Never a leading `-`: `-h` would be read as an option of ib_write_bw, not a host.
    """
    return (
        bool(text)
        and not text.startswith("-")
        and all(ch.isascii() and (ch.isalnum() or ch in "._:-%") for ch in text)
    )


def ib_write_bw_argv(options: HalfOptions, numactl: bool) -> List[str]:
    """The command line of one half (the client's ends with the server's address)."""
    argv: List[str] = []
    if numactl and options.numa_node is not None:
        node = str(options.numa_node)
        argv += ["numactl", "--cpunodebind=" + node, "--membind=" + node]
    argv += [PERFTEST, "-d", str(options.device), "-i", str(options.ib_port)]
    if options.gid_index is not None:
        argv += ["-x", str(options.gid_index)]
    argv += ["-p", str(options.port), "--report_gbits", "-s", str(options.size_bytes)]
    if options.iterations is not None:
        argv += ["-n", str(options.iterations)]
    else:
        argv += ["-D", str(max(1, round(options.duration_s)))]
    argv += ["-q", str(options.qps), "-F"]
    if options.side == "client":
        argv.append(str(options.server_address))
    return argv


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
        from llmgw_agent.fabric_replay import sim_server

        return sim_server(options, emit, cancelled, replay)
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
        from llmgw_agent.fabric_replay import sim_client

        return sim_client(options, cancelled, replay)
    return _perftest_half(options, emit, cancelled)


def half_result(options: HalfOptions, **values: Any) -> Dict[str, Any]:
    """The answer of one half: method, side, device and port, plus `values`."""
    result = {
        "method": options.method,
        "side": options.side,
        "device": options.device,
        "port": options.port,
    }
    result.update(values)
    return result


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


def listening_event(options: HalfOptions, address: Optional[str]) -> Dict[str, Any]:
    """The event a server half sends once a client may connect."""
    return {"listening": True, "method": options.method, "port": options.port, "address": address}


# --- TCP over the management network ---------------------------------------------------


def tcp_server(
    options: HalfOptions, emit: Emit, cancelled: threading.Event, replay: Optional[str] = None
) -> Dict[str, Any]:
    """Accept one client and count what it sends, for the test's duration.

    Binds `bind_address` (default: every interface; loopback on a simulated
    node, where every node is this machine) on `port` (0: any free port,
    announced in the `listening` event).
    """
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
        listener.listen(1)
        options.port = listener.getsockname()[1]
        emit(listening_event(options, bind if bind not in ("0.0.0.0", "::") else _mgmt_address()))
        connection = accept_one(listener, cancelled, options.accept_timeout_s)
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
    """Send a fixed buffer to the server half for the test's duration."""
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


def accept_one(
    listener: socket.socket, cancelled: threading.Event, timeout_s: float
) -> Optional[socket.socket]:
    """The first connection within `timeout_s`, or None when none came or the test was cancelled."""
    listener.settimeout(0.2)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and not cancelled.is_set():
        try:
            connection, _peer = listener.accept()
        except socket.timeout:
            continue
        connection.settimeout(0.5)
        return connection
    return None


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


def stop_reason(cancelled: threading.Event) -> Optional[str]:
    """`cancelled` when the console cancelled the request, else None."""
    return "cancelled" if cancelled.is_set() else None


def _mgmt_address() -> Optional[str]:
    from llmgw_agent.discover.host import management_interface

    return management_interface()[0]
