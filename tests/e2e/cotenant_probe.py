"""What a hostile second user of a node tries, run as that user (stdlib only, `python3 -I`).

Read from stdin: a JSON object with `mode` and what it needs; the secrets
to look for come this way too (never argv, which every user can read).
Printed on stdout: one JSON object of what was seen. Nothing is asserted
here; the test holds the observations to the rules.

Modes:
    survey: every Unix socket of the machine whose path names llmgw or lies
        under `root`, connected to; every TCP port of `ports` asked, in plain
        HTTP and in TLS trusting anything, what vllm-router's admin API and
        OpenAI's routes answer; every file under `root` read where it can be;
        every process's command line and environment read where they can be.
    squat: bind `port` on `host` (waiting for it to come free) for
        `seconds`, answer each connection as an engine would, and report what
        each sent.
"""

import json
import os
import socket
import ssl
import sys
import time

ADMIN_PROBES = (
    ("GET", "/workers", None),
    ("POST", "/workers", {"url": "http://127.0.0.1:9", "model_id": "stolen"}),
    ("POST", "/add_worker?url=http://127.0.0.1:9", None),
    ("GET", "/list_workers", None),
    ("GET", "/get_loads", None),
    ("GET", "/v1/models", None),
    (
        "POST",
        "/v1/chat/completions",
        {"model": "any", "messages": [{"role": "user", "content": "hi"}]},
    ),
)


def _http(port, method, path, body, tls):
    """The status line's code of one request (0: no HTTP answer), and the answer's first bytes."""
    raw = json.dumps(body).encode() if body is not None else b""
    head = "{} {} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Length: {}\r\nConnection: close\r\n"
    if body is not None:
        head += "Content-Type: application/json\r\n"
    request = (head.format(method, path, port, len(raw)) + "\r\n").encode() + raw
    try:
        sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    except OSError as exc:
        return 0, type(exc).__name__
    try:
        if tls:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
            sock = context.wrap_socket(sock, server_hostname="llmgw-engine")
        sock.sendall(request)
        answer = b""
        while len(answer) < 65536:
            chunk = sock.recv(65536)
            if not chunk:
                break
            answer += chunk
    except (OSError, ssl.SSLError) as exc:
        return 0, type(exc).__name__
    finally:
        sock.close()
    if not answer.startswith(b"HTTP/1."):
        return 0, answer[:40].decode("latin-1")
    return int(answer.split(b" ", 2)[1]), answer[:300].decode("latin-1")


def _unix_paths(root):
    paths = set()
    with open("/proc/net/unix") as table:
        next(table)
        for line in table:
            fields = line.split()
            if len(fields) >= 8 and fields[7].startswith("/"):
                path = fields[7]
                if "llmgw" in path or path.startswith(root):
                    paths.add(path)
    return sorted(paths)


def _connect_unix(path):
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(3)
    try:
        sock.connect(path)
    except OSError as exc:
        return type(exc).__name__
    finally:
        sock.close()
    return "connected"


def _files(root, secrets):
    readable, denied, leaked = 0, [], []
    for folder, _dirs, names in os.walk(root, onerror=lambda exc: denied.append(exc.filename)):
        for name in names:
            path = os.path.join(folder, name)
            if os.path.islink(path) or not os.path.isfile(path):
                continue
            try:
                with open(path, "rb") as handle:
                    data = handle.read(8 * 1024 * 1024)
            except OSError:
                denied.append(path)
                continue
            readable += 1
            for label, text in secrets.items():
                if text.encode() in data:
                    leaked.append([label, path])
    return {"readable": readable, "denied": sorted(denied), "leaked": leaked}


def _processes(secrets, pids):
    leaked, environ = [], {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        for part in ("cmdline", "environ"):
            try:
                with open(f"/proc/{entry}/{part}", "rb") as handle:
                    data = handle.read()
            except OSError as exc:
                if int(entry) in pids and part == "environ":
                    environ[entry] = type(exc).__name__
                continue
            if int(entry) in pids and part == "environ":
                environ[entry] = "read"
            for label, text in secrets.items():
                if text.encode() in data:
                    leaked.append([label, entry, part])
    return {"leaked": leaked, "environ": environ}


def survey(given):
    secrets = given["secrets"]
    sockets = {path: _connect_unix(path) for path in _unix_paths(given["root"])}
    ports = {}
    for port in given["ports"]:
        for tls in (False, True):
            for method, path, body in ADMIN_PROBES:
                status, said = _http(port, method, path, body, tls)
                ports["{} {} {} {}".format(port, "tls" if tls else "plain", method, path)] = [
                    status,
                    said,
                ]
    return {
        "uid": os.getuid(),
        "sockets": sockets,
        "ports": ports,
        "files": _files(given["root"], secrets),
        "processes": _processes(secrets, set(given["pids"])),
    }


def squat(given):
    deadline = time.monotonic() + given["wait_s"]
    while True:
        try:
            listener = socket.create_server((given["host"], given["port"]))
            break
        except OSError:
            if time.monotonic() > deadline:
                return {"bound": False}
            time.sleep(0.005)
    sys.stdout.write("bound\n")
    sys.stdout.flush()
    listener.settimeout(0.2)
    received = []
    end = time.monotonic() + given["seconds"]
    while time.monotonic() < end:
        try:
            connection, _ = listener.accept()
        except OSError:
            continue
        connection.settimeout(2)
        data = b""
        try:
            data = connection.recv(65536)
            connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
        except OSError:
            pass
        connection.close()
        received.append(
            {
                "first": data[:1].hex(),
                "http": b"HTTP/1.1" in data,
                "authorization": b"authorization" in data.lower(),
                "leaked": [k for k, t in given["secrets"].items() if t.encode() in data],
            }
        )
    listener.close()
    return {"bound": True, "received": received}


def main():
    given = json.loads(sys.stdin.read())
    seen = survey(given) if given["mode"] == "survey" else squat(given)
    sys.stdout.write(json.dumps(seen) + "\n")


if __name__ == "__main__":
    main()
