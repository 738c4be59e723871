"""Every replica's engine serves HTTPS with a certificate of its own, which its callers pin.

The builders write each engine's own certificate and key flags with the
placeholders the agent fills with `/dev/fd/N` paths of in-memory files; the
PEM texts travel only in the serving shard's `secret_env`; its health URL is
`https://` and names the certificate to pin. A real process checks what
matters: the sim engine started from each built command (through the agent's
own `memfiles`, as its supervisor starts it) answers a client that pins the
replica's certificate, and refuses the handshake of one that pins another.
"""

from __future__ import annotations

import datetime
import os
import socket
import ssl
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

import httpx
import pytest
from engine_nodes import flag, h100_cards, h100_node, request, two_h100_nodes

from llmgw_agent.sim.engine.args import parse_engine_argv
from llmgw_core.engines import build_launch
from llmgw_core.engines.identity import (
    CERT_PLACEHOLDER,
    CERT_VARIABLE,
    ENGINE_NAME,
    KEY_PLACEHOLDER,
    KEY_VARIABLE,
    EngineIdentity,
    pinned_context,
)

IDENTITY = EngineIdentity.make("llama-70b")
AGENT_ROOT = Path(__file__).resolve().parents[3] / "agent"
SGLANG = ("/opt/llm/venv/bin/python3", "-m", "sglang.launch_server")
LLAMA_SERVER = ("/opt/llama.cpp/bin/llama-server",)
LLAMA_CPP_PYTHON = ("/opt/llm/venv/bin/python3", "-m", "llama_cpp.server")
SPELLINGS = {
    "vllm": ("--ssl-certfile", "--ssl-keyfile"),
    "sglang": ("--ssl-certfile", "--ssl-keyfile"),
    "llama-server": ("--ssl-cert-file", "--ssl-key-file"),
    "llama-cpp-python": ("--ssl_certfile", "--ssl_keyfile"),
}
ENGINES = [
    ("vllm", ("/opt/llm/venv/bin/vllm",), "vllm"),
    ("sglang", SGLANG, "sglang"),
    ("llama.cpp", LLAMA_SERVER, "llama-server"),
    ("llama.cpp", LLAMA_CPP_PYTHON, "llama-cpp-python"),
]


def _shard(engine: str, program: tuple[str, ...], tls: EngineIdentity | None = IDENTITY):
    node = h100_node(gpus=h100_cards(1), program=program, engine_version=None)
    source = "/models/qwen.gguf" if engine == "llama.cpp" else "/models/llama"
    built = request(nodes=(node,), engine=engine, source=source, tensor_parallel=1, tls=tls)
    plan = build_launch(built)
    (shard,) = plan.shards
    return plan, shard


def test_a_certificate_is_made_for_the_engines_name_valid_from_a_little_before_now():
    from cryptography import x509

    certificate = x509.load_pem_x509_certificate(IDENTITY.cert_pem.encode())
    assert certificate.subject.rfc4514_string() == f"OU=llama-70b,CN={ENGINE_NAME}"
    names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    assert names.value.get_values_for_type(x509.DNSName) == [ENGINE_NAME]
    made_at = datetime.datetime(2026, 12, 4, 12, 0, tzinfo=datetime.UTC)
    dated = x509.load_pem_x509_certificate(EngineIdentity.make(now=made_at).cert_pem.encode())
    # A node whose clock is an hour behind still accepts it.
    assert made_at - dated.not_valid_before_utc == datetime.timedelta(hours=1)
    assert (certificate.not_valid_after_utc - certificate.not_valid_before_utc).days == 3650
    assert "PRIVATE KEY" in IDENTITY.key_pem and "PRIVATE" not in IDENTITY.cert_pem
    assert IDENTITY.key_pem not in repr(IDENTITY)
    assert EngineIdentity.make().cert_pem != IDENTITY.cert_pem  # one per replica


def test_a_client_that_pins_the_certificate_reaches_its_holder_and_no_other():
    stranger = EngineIdentity.make("stranger")
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    key_fd = os.memfd_create("key")
    os.write(key_fd, IDENTITY.key_pem.encode())
    cert_fd = os.memfd_create("cert")
    os.write(cert_fd, IDENTITY.cert_pem.encode())
    server.load_cert_chain(f"/dev/fd/{cert_fd}", f"/dev/fd/{key_fd}")
    listener = socket.create_server(("127.0.0.1", 0))
    said: list[bytes] = []

    def serve() -> None:
        for _ in range(2):
            connection, _ = listener.accept()
            try:
                with server.wrap_socket(connection, server_side=True) as tls:
                    said.append(tls.recv(64))
            except (ssl.SSLError, OSError):
                said.append(b"(no handshake)")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    port = listener.getsockname()[1]
    with (
        socket.create_connection(("127.0.0.1", port)) as raw,
        pinned_context(IDENTITY.cert_pem).wrap_socket(raw) as tls,
    ):
        assert tls.version() in ("TLSv1.2", "TLSv1.3")
        tls.sendall(b"the request, and its key")
    with (
        socket.create_connection(("127.0.0.1", port)) as raw,
        pytest.raises(ssl.SSLCertVerificationError),
    ):
        pinned_context(stranger.cert_pem).wrap_socket(raw)
    thread.join(10)
    listener.close()
    os.close(key_fd)
    os.close(cert_fd)
    assert said == [b"the request, and its key", b"(no handshake)"]
    with pytest.raises(ValueError, match="not a PEM certificate"):
        pinned_context("not a certificate")


@pytest.mark.parametrize(("engine", "program", "spelling"), ENGINES)
def test_each_engine_gets_its_own_file_flags_and_the_pems_only_as_secrets(
    engine: str, program: tuple[str, ...], spelling: str
):
    plan, shard = _shard(engine, program)
    cert_flag, key_flag = SPELLINGS[spelling]
    argv = shard.main.argv
    assert (flag(argv, cert_flag), flag(argv, key_flag)) == (CERT_PLACEHOLDER, KEY_PLACEHOLDER)
    assert shard.secret_env == {CERT_VARIABLE: IDENTITY.cert_pem, KEY_VARIABLE: IDENTITY.key_pem}
    assert shard.health_url is not None and shard.health_url.startswith("https://")
    assert shard.health_cert == plan.tls_cert == IDENTITY.cert_pem
    written = {k: v for k, v in shard.start_args("r").items() if k != "secret_env"}
    assert written["health_cert"] == IDENTITY.cert_pem
    assert IDENTITY.key_pem not in str(written)  # shard.json is made of these
    assert "PRIVATE" not in str(written)
    parsed = parse_engine_argv("llama.cpp" if engine == "llama.cpp" else engine, list(argv))
    assert (parsed["ssl_certfile"], parsed["ssl_keyfile"]) == (CERT_PLACEHOLDER, KEY_PLACEHOLDER)


def test_without_an_identity_the_engine_speaks_plain_http_as_before():
    plan, shard = _shard("vllm", ("/opt/llm/venv/bin/vllm",), tls=None)
    assert "--ssl-certfile" not in shard.main.argv and shard.secret_env == {}
    assert shard.health_url == "http://127.0.0.1:8000/health"
    assert shard.health_cert is None and plan.tls_cert is None
    assert "health_cert" not in shard.start_args("r")


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_across_nodes_only_the_rank_that_serves_http_is_given_the_key(engine: str):
    program = SGLANG if engine == "sglang" else ("/opt/llm/venv/bin/vllm",)
    nodes = tuple(replace(node, program=program) for node in two_h100_nodes())
    plan = build_launch(request(nodes=nodes, engine=engine, tls=IDENTITY))
    head, worker = plan.shards
    assert CERT_PLACEHOLDER in head.main.argv and KEY_VARIABLE in head.secret_env
    assert all(CERT_PLACEHOLDER not in c.argv for c in worker.commands)
    assert KEY_VARIABLE not in worker.secret_env and worker.health_cert is None


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.parametrize(("engine", "program", "spelling"), ENGINES)
def test_the_sim_started_from_the_built_command_serves_https_only_its_pin_trusts(
    engine: str, program: tuple[str, ...], spelling: str, tmp_path: Path
):
    from llmgw_agent.shards import memfiles

    port = _free_port()
    _plan, shard = _shard(engine, program)
    argv = [a if a != str(shard.http_port) else str(port) for a in shard.main.argv]
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("LLMGW_")},
        "PYTHONPATH": str(AGENT_ROOT),
        "LLMGW_AGENT_STATE": str(tmp_path / "state"),
        "LLMGW_SIM_LOAD_S": "0",
        **shard.secret_env,
    }
    run = [sys.executable, "-S", "-m", "llmgw_agent", "sim-engine", "--", *argv]
    held = memfiles.hold(run, env)  # as the supervisor starts it
    try:
        process = subprocess.Popen(
            held.argv,
            env=held.env,
            pass_fds=held.fds,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    finally:
        held.close()
    health = f"https://127.0.0.1:{port}{shard.health_url.split(str(shard.http_port), 1)[1]}"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                if httpx.get(health, verify=pinned_context(IDENTITY.cert_pem)).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert process.poll() is None, "the sim engine exited"
            assert time.monotonic() < deadline, "the sim engine never became healthy"
            time.sleep(0.05)
        with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            httpx.get(health, verify=pinned_context(EngineIdentity.make().cert_pem))
        cmdline = Path(f"/proc/{process.pid}/cmdline").read_bytes()
        environ = Path(f"/proc/{process.pid}/environ").read_bytes()
        for secret in (IDENTITY.key_pem.encode(), b"PRIVATE KEY"):
            assert secret not in cmdline and secret not in environ
        assert b"/dev/fd/" in cmdline and b"LLMGW_ENGINE_TLS" not in environ
    finally:
        process.terminate()
        process.wait(10)
