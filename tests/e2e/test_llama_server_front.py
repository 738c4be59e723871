"""The tests' llama-server stand-in: llama-cpp-python answering `/health` as llama-server does.

`llama_server_front` is what the gateway test's node runs as its llama.cpp
program; these check it on its own, as a process started from its launcher
script: the flags it takes, the health answers, the tokens. Skips where
llama-cpp-python's server is absent.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import httpx
from llama_server_front import LOADING_BODY, READY_BODY, launcher_script
from test_llamacpp_real import free_port, needs_llama_cpp
from tiny_gguf import REPLY, write_tiny_llama_gguf

LOAD_TIMEOUT_S = 60.0


def _health_until_ready(base: str, process: subprocess.Popen[str]) -> list[tuple[int, dict]]:
    """Every `/health` answer, polled until the first 200 (connection refusals left out)."""
    answers: list[tuple[int, dict]] = []
    deadline = time.monotonic() + LOAD_TIMEOUT_S
    while time.monotonic() < deadline and process.poll() is None:
        try:
            answered = httpx.get(f"{base}/health", timeout=5)
        except httpx.TransportError:
            time.sleep(0.05)
            continue
        answers.append((answered.status_code, answered.json()))
        if answered.status_code == 200:
            break
        time.sleep(0.05)
    return answers


@needs_llama_cpp
def test_the_stand_in_answers_health_as_llama_server_does_and_serves_the_tiny_model(
    tmp_path: Path,
):
    model = write_tiny_llama_gguf(tmp_path / "tiny.gguf")
    port = free_port()
    argv = [str(launcher_script(tmp_path / "bin")), "--model", str(model), "--alias", "tiny"]
    argv += ["--host", "127.0.0.1", "--port", str(port), "--ctx-size", "256"]
    process = subprocess.Popen([*argv, "--n-gpu-layers", "0"], stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        answers = _health_until_ready(base, process)
        chat = httpx.post(
            f"{base}/v1/chat/completions",
            json={"model": "tiny", "messages": [{"role": "user", "content": "Hi"}]},
            timeout=30,
        ).json()
    finally:
        process.terminate()
        _, log = process.communicate(timeout=30)

    # 503 "Loading model" for as long as it loads (if a probe got there in time), then 200.
    assert answers and answers[-1] == (200, READY_BODY), answers
    assert all(answer == (503, LOADING_BODY) for answer in answers[:-1]), answers
    assert chat["model"] == "tiny"
    assert chat["choices"][0]["message"]["content"].strip() == REPLY
    assert f"model loaded: {model} as tiny" in log


@needs_llama_cpp
def test_the_stand_in_refuses_a_flag_llama_cpp_python_cannot_honour(tmp_path: Path):
    flags = ["--model", "m.gguf", "--alias", "m", "--port", "1", "--ctx-size", "256"]
    refused = subprocess.run(
        [str(launcher_script(tmp_path / "bin")), *flags, "--parallel", "4"],
        capture_output=True,
        text=True,
        timeout=60,
    )

    assert refused.returncode == 2
    assert refused.stderr.strip().splitlines()[-1] == (
        "llama-server (llama-cpp-python stand-in): error: llama-cpp-python's server "
        "answers one sequence at a time: --parallel 1 only"
    )
    assert refused.stdout == ""


@needs_llama_cpp
def test_given_the_replicas_certificate_the_stand_in_serves_https_only_its_pin_trusts(
    tmp_path: Path,
):
    from llmgw_agent.shards import memfiles
    from llmgw_core.engines.identity import (
        CERT_PLACEHOLDER,
        KEY_PLACEHOLDER,
        EngineIdentity,
        pinned_context,
    )

    identity = EngineIdentity.make("tiny")
    model = write_tiny_llama_gguf(tmp_path / "tiny.gguf")
    port = free_port()
    argv = [str(launcher_script(tmp_path / "bin")), "--model", str(model), "--alias", "tiny"]
    argv += ["--host", "127.0.0.1", "--port", str(port), "--ctx-size", "256"]
    argv += ["--ssl-cert-file", CERT_PLACEHOLDER, "--ssl-key-file", KEY_PLACEHOLDER]
    held = memfiles.hold(argv, {**os.environ, **identity.secret_env()})
    try:
        process = subprocess.Popen(
            held.argv, env=held.env, pass_fds=held.fds, stderr=subprocess.PIPE, text=True
        )
    finally:
        held.close()
    base = f"https://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + LOAD_TIMEOUT_S
        while True:
            try:
                status = httpx.get(f"{base}/health", verify=pinned_context(identity.cert_pem))
                if status.status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert process.poll() is None and time.monotonic() < deadline, "never ready"
            time.sleep(0.05)
        stranger = pinned_context(EngineIdentity.make().cert_pem)
        try:
            httpx.get(f"{base}/health", verify=stranger)
            raise AssertionError("a client pinning another certificate was answered")
        except httpx.ConnectError as refused:
            assert "CERTIFICATE_VERIFY_FAILED" in str(refused)
    finally:
        process.terminate()
        process.communicate(timeout=30)
