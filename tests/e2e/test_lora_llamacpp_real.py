"""LoRA adapters on the real llama.cpp: llama-server and llama-cpp-python's server, over real SSH.

This machine is node `here`; the headless console serves the tiny GGUF
(`tiny_gguf`) with GGUF adapters written by the `gguf` package, puts the
gateway's front before it, and a client asks by each adapter's name. One
adapter changes what the model says (`write_loud_gguf_adapter`), so its
answer proves it was applied, and the bare model's answer proves it was not
applied to a request for the model itself. The adapters' memory is what
llama.cpp logs for them (`LoRA buffer size`), against the plan's line.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from lora_files import TINY_GGUF, write_gguf_adapter, write_loud_gguf_adapter
from test_llamacpp_real import free_port, needs_llama_cpp
from this_machine import run_script_on_this_machine
from tiny_gguf import REPLY, write_tiny_llama_gguf

pytestmark = [pytest.mark.slow, needs_llama_cpp]

LORA_BUFFER = re.compile(r"llama_adapter_lora_init_impl: +(\S+) LoRA buffer size = +([0-9.]+) MiB")


def _steps(results: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in results.splitlines() if line.startswith("{")]


def _ask(base: str, model: str) -> str:
    with httpx.Client(timeout=60) as client:
        answer = client.post(
            base + "/v1/chat/completions",
            json={"model": model, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8},
        )
    assert answer.status_code == 200, answer.text
    return answer.json()["choices"][0]["message"]["content"].strip()


def _logged_lora_mib(argv: list[str]) -> float:
    """The LoRA buffers llama-server logs when started with the replica's own command (on a
    port of its own, at the verbosity that prints them), in MiB."""
    argv = list(argv)
    argv[argv.index("--port") + 1] = str(free_port())
    for flag in ("--ssl-cert-file", "--ssl-key-file"):
        if flag in argv:
            at = argv.index(flag)
            del argv[at : at + 2]
    process = subprocess.Popen(
        [*argv, "--verbosity", "4"], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True
    )
    found: list[float] = []
    deadline = time.monotonic() + 60
    try:
        assert process.stderr is not None
        for line in process.stderr:
            match = LORA_BUFFER.search(line)
            if match:
                found.append(float(match[2]))
            if "listening on" in line or time.monotonic() > deadline:
                break
    finally:
        process.kill()
        process.wait()
    assert found, "llama-server logged no LoRA buffer"
    return sum(found)


def test_llama_server_serves_adapters_by_name_behind_the_gateway(tmp_path: Path):
    from llamacpp_truth import llama_server

    server = llama_server()
    if not server:
        pytest.skip(
            "no llama-server here (.ci/install-llama-server builds one; LLMGW_LLAMA_SERVER names one)"
        )
    model_dir = tmp_path / "models"
    base = write_tiny_llama_gguf(model_dir / "tiny" / "tiny.gguf")
    loud = write_loud_gguf_adapter(tmp_path / "adapters" / "loud.gguf", rank=512)
    quiet = write_gguf_adapter(tmp_path / "adapters" / "quiet.gguf", TINY_GGUF, rank=256)
    adapters = f"[{{name: loud, source: {loud}}}, {{name: quiet, source: {quiet}}}]"
    port = free_port()
    steps = (
        f"  - plan: {{model: {base}, context: 256, adapters: {adapters}}}\n"
        f"  - serve: {{model: {base}, engine: llama.cpp, context: 256, name: lora, "
        f"adapters: {adapters}, timeout: 120}}\n"
        f"  - gateway: {{name: lorafront, node: here, port: {port}}}\n"
    )
    done, _ = run_script_on_this_machine(
        tmp_path, steps, model_dir, "nothing names this", engines={"llama.cpp": {"bin": server}}
    )
    try:
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        planned, served, _gateway = (s["result"] for s in _steps(done.stdout))
        best = planned["best"]
        (shard,) = served["replica"]["shards"]
        argv = shard["argv"]
        assert argv[argv.index("--lora-scaled") + 1] == f"{loud}:0,{quiet}:0"
        front = f"http://127.0.0.1:{port}"
        with httpx.Client(timeout=30) as client:
            listed = client.get(front + "/v1/models").json()["data"]
        parents = {card["id"]: card["parent"] for card in listed}
        assert parents == {"tiny": None, "loud": "tiny", "quiet": "tiny"}
        # The loud adapter changes the answer; the model asked for itself is the bare model's.
        assert _ask(front, "tiny") == REPLY
        assert _ask(front, "loud") != REPLY
        assert _ask(front, "quiet") == REPLY
        assert _ask(front, "tiny") == REPLY
        logged = _logged_lora_mib(argv)
        planned_mib = best["adapters_gib"] * 1024
        print(f"LoRA buffers: llama-server logged {logged:.2f} MiB, the plan {planned_mib:.2f} MiB")
        assert abs(logged - planned_mib) <= max(0.02 * logged, 8.0)
        assert abs(logged - planned_mib) <= 0.02 * logged  # and within 2 % at this size
    finally:
        stopped, left_running = run_script_on_this_machine(
            tmp_path,
            "  - stop: {gateway: lorafront}\n  - stop: {replica: lora}\n",
            model_dir,
            str(base),
        )
    assert stopped.returncode == 0, stopped.stdout[-2000:]
    assert list(left_running.values()) == []


def test_llama_cpp_python_applies_its_one_adapter_to_every_request(tmp_path: Path):
    model_dir = tmp_path / "models"
    base = write_tiny_llama_gguf(model_dir / "tiny" / "tiny.gguf")
    loud = write_loud_gguf_adapter(tmp_path / "adapters" / "loud.gguf")
    port = free_port()
    steps = (
        f"  - serve: {{model: {base}, engine: llama.cpp, context: 256, name: lora-py, "
        f"adapters: [{{name: loud, source: {loud}}}], timeout: 120}}\n"
        f"  - gateway: {{name: pyfront, node: here, port: {port}, health_path: /openapi.json}}\n"
    )
    done, _ = run_script_on_this_machine(tmp_path, steps, model_dir, "nothing names this")
    try:
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        served = _steps(done.stdout)[0]["result"]
        (shard,) = served["replica"]["shards"]
        assert shard["argv"][shard["argv"].index("--lora_path") + 1] == str(loud)
        front = f"http://127.0.0.1:{port}"
        with httpx.Client(timeout=30) as client:
            listed = client.get(front + "/v1/models").json()["data"]
            bare = client.post(
                front + "/v1/chat/completions",
                json={"model": "tiny", "messages": [{"role": "user", "content": "hi"}]},
            )
        # The engine cannot serve the bare model beside its adapter: only the adapter is routed.
        assert {card["id"]: card["parent"] for card in listed} == {"loud": "tiny"}
        assert bare.status_code == 404
        assert _ask(front, "loud") != REPLY
    finally:
        stopped, left_running = run_script_on_this_machine(
            tmp_path,
            "  - stop: {gateway: pyfront}\n  - stop: {replica: lora-py}\n",
            model_dir,
            str(base),
        )
    assert stopped.returncode == 0, stopped.stdout[-2000:]
    assert list(left_running.values()) == []
