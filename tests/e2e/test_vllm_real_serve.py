"""The product end to end against the real vLLM, on this machine as a CPU node, over real SSH,
and on the demo's CPU node.

The node is this machine behind asyncssh's server on loopback, then behind
OpenSSH's sshd with the same home (its agent discovers it: no GPU, one NUMA
node, this RAM); its inventory names the real vLLM (`.ci/install-vllm`'s CPU
build) as the node's `vllm`. The console runs as a person runs it,
`llmgw-tui --inventory … --run … --json`, three times (the first over
asyncssh, the roll and the stop over OpenSSH):

1. `plan` (vLLM's CPU backend on the CPU node, its KV cache in whole GiB),
   `apply` of a service with a key and a tool-call parser, the `gateway` with
   a key of its own, `ask` and `bench` through it, `keep` reading the engine's
   real `/metrics`;
2. between the runs the OpenAI SDK talks to the gateway (a chat, a stream
   with usage, a tools call accepted, no key refused); then, with the SDK
   sending all along, `apply` rolls the service to another context (the old
   replica drained by the engine's own in-flight count), and everything stops,
   leaving no process behind.

The plan's KV figures are held to the lines the engine itself logged.

The second test keeps a demo fleet up with `--engine vllm=PATH`: its CPU node,
a replayed one, runs the real vLLM in place of the sim.
"""

from __future__ import annotations

import json
import re
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest
from engine_process import WEATHER_TOOL, loopback_port
from real_vllm import VLLM, make_tiny_llama, skip_without_real_vllm
from this_machine import processes_naming, run_script_on_this_machine

openai = pytest.importorskip("openai")

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

ENGINE_KEY = "sk-engine-4d1c9b2e7f"
FRONT_KEY = "sk-front-8a3e5f0c21"
SECRETS = {"TINY_KEY": ENGINE_KEY, "FRONT_KEY": FRONT_KEY}


def _service(model: Path, context: int, more: str = "") -> str:
    return (
        f"{{name: tiny, model: {model}, engine: vllm, replicas: 1, context: {context}, {more}"
        " api_key_env: TINY_KEY, timeout: 400, drain_s: 10,"
        " engine_args: {enforce_eager: true, enable_auto_tool_choice: true,"
        " tool_call_parser: hermes}}"
    )


def _results(done: Any) -> list[dict[str, Any]]:
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    return [json.loads(line)["result"] for line in done.stdout.splitlines()]


class Sender(threading.Thread):
    """Chat completions through the gateway with the OpenAI SDK, one a second, until told.

    Paced as a light client: on this two-core machine an old vLLM kept busy without a
    pause (its OpenMP threads spin between requests) starved the new one's engine-core
    process for over 400 s, even with the two bound to different cores
    (docs/memory-rules.md, "Cores").
    """

    def __init__(self, client: Any) -> None:
        super().__init__(daemon=True)
        self.client, self.ok, self.failed = client, 0, []
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            try:
                self.client.chat.completions.create(
                    model="tiny", messages=[{"role": "user", "content": "Hi"}], max_tokens=4
                )
                self.ok += 1
            except Exception as exc:  # every failure is counted, and said
                self.failed.append(f"{type(exc).__name__}: {exc}")
            self.halt.wait(1.0)


def test_the_real_vllm_is_planned_served_fronted_kept_rolled_and_stopped(tmp_path: Path):
    skip_without_real_vllm()
    models = tmp_path / "models"
    model = make_tiny_llama(models / "tiny")
    port = loopback_port()
    engines = {"vllm": {"bin": str(VLLM)}}
    first = (
        f"  - plan: {{model: {model}, context: 512}}\n"
        f"  - apply: {{service: {_service(model, 512)}}}\n"
        "  - replicas: {}\n"
        f"  - gateway: {{name: front, node: here, port: {port}, api_key_env: FRONT_KEY}}\n"
        '  - ask: {gateway: front, model: tiny, prompt: "Who are you?", max_tokens: 8}\n'
        "  - bench: {gateway: front, model: tiny, requests: 8, concurrency: 2, max_tokens: 8}\n"
        "  - keep: {service: tiny, duration_s: 5, interval_s: 1}\n"
        "  - logs: {replica: tiny-1, lines: 400}\n"
    )
    # What the first run started runs on: nothing it leaves is ended (no path named).
    done, _ = run_script_on_this_machine(
        tmp_path, first, models, "nothing names this", engines=engines, env=SECRETS, timeout=600
    )
    planned, applied, replicas, gateway, asked, benched, kept, logged = _results(done)

    (way,) = [w for w in planned["options"] if w["engine"] == "vllm"]
    assert way["on_cpu"] and way["layout"] == "vLLM in RAM, 1 NUMA node"
    assert way["cpu_kv_cache_gib"] == 1
    assert way["serve"].startswith("VLLM_CPU_KVCACHE_SPACE=1 vllm serve ")
    assert [a["action"] for a in applied["done"]] == ["start"]
    (replica,) = replicas["replicas"]
    (shard,) = replica["shards"]
    assert shard["gpus"] == [] and shard["env"]["VLLM_CPU_KVCACHE_SPACE"] == "1"
    assert shard["argv"][0] == str(VLLM) and "--enable-auto-tool-choice" in shard["argv"]
    assert (
        ENGINE_KEY not in done.stdout + done.stderr and FRONT_KEY not in done.stdout + done.stderr
    )

    # What the engine logged is what the plan said: 1 GiB of KV, its tokens and concurrency.
    lines = "\n".join(logged["lines"])
    assert "Explicitly set (1.0/" in lines
    tokens, concurrency = re.search(
        r"CPU KV cache size: ([\d,]+) tokens, Maximum concurrency for 512 tokens per request:"
        r" ([\d.]+)x",
        lines,
    ).groups()
    assert int(tokens.replace(",", "")) == way["kv_tokens"]
    assert float(concurrency) == pytest.approx(way["max_concurrency"], abs=0.01)
    # The product read the same lines into the replica's figures, and found no difference.
    figures = replica["figures"]
    assert (figures["kv_device"], figures["kv_tokens"], figures["kv_cache_gib"]) == (
        "CPU",
        way["kv_tokens"],
        1.0,
    )
    assert figures["kv_sized"] == "explicit" and replica["figure_warnings"] == []

    assert asked["text"] is not None and asked["completion_tokens"] >= 1
    assert benched["failed"] == 0 and benched["completion_tokens"] == 8 * 8
    # keep read the engine's own gauges from its real /metrics every cycle.
    assert kept["cycles"] >= 3 and kept["unread_cycles"] == 0 and kept["events"] == []

    base = f"http://127.0.0.1:{gateway['port']}/v1"  # the front listens on every address
    client = openai.OpenAI(base_url=base, api_key=FRONT_KEY, max_retries=0, timeout=60)
    chat = client.chat.completions.create(
        model="tiny", messages=[{"role": "user", "content": "Hello"}], max_tokens=6
    )
    assert chat.usage.completion_tokens >= 1
    stream = client.chat.completions.create(
        model="tiny",
        messages=[{"role": "user", "content": "Hello"}],
        max_tokens=6,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens >= 1
    tools = client.chat.completions.create(
        model="tiny",
        messages=[{"role": "user", "content": "Weather in Paris?"}],
        tools=[WEATHER_TOOL],
        max_tokens=8,
    )
    assert tools.choices[0].finish_reason in ("length", "stop", "tool_calls")
    refused = httpx.post(f"{base}/chat/completions", json={"model": "tiny", "messages": []})
    assert refused.status_code == 401

    sender = Sender(client)
    sender.start()
    time.sleep(2)
    second = f"  - apply: {{service: {_service(model, 256)}}}\n  - replicas: {{}}\n"
    try:
        done, _ = run_script_on_this_machine(
            tmp_path,
            second,
            models,
            "nothing names this",
            ssh="openssh",
            engines=engines,
            env=SECRETS,
            timeout=600,
        )
    finally:
        sender.halt.set()
        sender.join(60)
    rolled, listed = _results(done)
    third = "  - stop: {service: tiny}\n  - stop: {gateway: front}\n  - replicas: {}\n"
    # Left behind: an engine (only engines name the model's folder), or the front.
    done, left_running = run_script_on_this_machine(
        tmp_path, third, models, str(model), ssh="openssh", engines=engines, env=SECRETS,
        timeout=300,
    )  # fmt: skip
    stopped, _front_stopped, after = _results(done)
    assert stopped["stopped"] == ["tiny-2"] and after["replicas"] == []
    fronts = [p for p in processes_naming(str(tmp_path)).values() if " front " in f" {p} "]
    assert fronts == []
    [replaced] = rolled["actions"]
    assert replaced["action"] == "replace" and replaced["why"] == "context 512 → 256"
    drained = rolled["done"][0]["drained"]
    assert drained["in_flight"] is not None  # read from vLLM's own num_requests_running
    ready = [r for r in listed["replicas"] if r["phase"] == "ready"]
    assert [r["name"] for r in ready] == ["tiny-2"]
    assert sender.ok > 0 and sender.failed == []
    assert list(left_running.values()) == []
    print(
        f"\nreal vLLM: KV {way['kv_tokens']:,} tokens planned and logged; "
        f"{sender.ok} SDK requests through the roll, none failed; drain {drained}"
    )


def test_the_demos_cpu_node_runs_the_real_vllm_its_inventory_names(tmp_path: Path):
    """`llmgw-tui demo up --engine vllm=PATH`: the demo's CPU node (a replayed node, its
    hardware the capture's) runs the real vLLM on this machine in place of the sim: served
    with a key, its start-up figures read, asked and benched through a keyed gateway,
    `keep` reading its real `/metrics`, and stopped with nothing left."""
    skip_without_real_vllm()
    from kept_demo import free_port, kept_demo, run_json

    model = make_tiny_llama(tmp_path / "models" / "tiny")
    port = free_port()
    script = (
        "steps:\n"
        f"  - plan: {{model: {model}, context: 512}}\n"
        f"  - apply: {{service: {_service(model, 512, 'gpu_class: cpu, ')}}}\n"
        f"  - gateway: {{name: front, node: cpu-01, port: {port}, api_key_env: FRONT_KEY}}\n"
        '  - ask: {gateway: front, model: tiny, prompt: "Who are you?", max_tokens: 8}\n'
        "  - bench: {gateway: front, model: tiny, requests: 6, concurrency: 2, max_tokens: 8}\n"
        "  - keep: {service: tiny, duration_s: 4, interval_s: 1}\n"
        "  - replicas: {}\n"
        "  - stop: {service: tiny}\n"
        "  - stop: {gateway: front}\n"
    )
    with kept_demo(tmp_path / "demo", up_args=(f"--engine=vllm={VLLM}",)) as inventory:
        code, steps, said = run_json(inventory, script, timeout=600, env=SECRETS)
        left = [p for p in processes_naming(str(model)).values() if "vllm" in p]
    assert code == 0, json.dumps(steps)[-3000:] + said[-2000:]
    planned, applied, _gateway, asked, benched, kept, listed, _stopped, _front = (
        s["result"] for s in steps
    )
    (way,) = [w for w in planned["options"] if w["engine"] == "vllm" and w["on_cpu"]]
    assert way["cpu_kv_cache_gib"] == 1 and [a["action"] for a in applied["done"]] == ["start"]
    (replica,) = listed["replicas"]
    (shard,) = replica["shards"]
    assert shard["node"] == "cpu-01" and shard["env"]["VLLM_CPU_KVCACHE_SPACE"] == "1"
    assert shard["argv"][0] == str(VLLM)  # the real program, not the sim standing in
    # The figures are the real engine's own lines: the KV cache the plan set, in tokens.
    figures = replica["figures"]
    assert (figures["kv_device"], figures["kv_cache_gib"]) == ("CPU", 1.0)
    assert figures["kv_tokens"] == way["kv_tokens"]
    assert asked["text"] is not None and asked["completion_tokens"] >= 1
    assert benched["failed"] == 0 and benched["completion_tokens"] == 6 * 8
    assert kept["cycles"] >= 3 and kept["unread_cycles"] == 0
    assert ENGINE_KEY not in said and FRONT_KEY not in said
    assert left == []
