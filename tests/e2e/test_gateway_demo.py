"""The gateway on the demo fleet: the agent's own front, supervised as a shard, over real SSH.

Two replicas of one model (and one of another) are sim engines started by
the real agents; the front runs on the CPU node and is reached, like the
engines, through an SSH tunnel. One demo fleet for the module; the tests run
in order and share what they started.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kept_demo import example_on_a_free_port
from serve_demo_harness import Demo, open_console

from llmgw_core.errors import BadInput, LlmgwError
from llmgw_core.gateway.run import router_workers, start_gateway

pytestmark = [
    pytest.mark.slow,
]

REPO = Path(__file__).resolve().parents[2]
LLAMA_8B = "catalog:meta-llama/Llama-3.1-8B-Instruct"
QWEN_7B = "catalog:Qwen/Qwen2.5-7B-Instruct"


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Demo]:
    running = Demo(tmp_path_factory.mktemp("gateway-demo"))
    try:
        yield running
    finally:
        running.close()


def _serve(demo: Demo, name: str, model: str = LLAMA_8B) -> dict:
    outcome = demo.step("serve", model=model, context=8192, gpu_class="h100-80g", name=name)
    assert outcome.ok, outcome.error
    return outcome.result


def _gateway_shards(demo: Demo) -> list[dict]:
    async def read() -> list[dict]:
        answer = await demo.fleet.request("cpu-01", "shard.list")
        return [s for s in answer["shards"] if (s.get("spec") or {}).get("kind") == "llmgw-gateway"]

    return demo.loop.run(read())


def _router_pids(demo: Demo) -> list[int]:
    return [int(s["main_pid"]) for s in _gateway_shards(demo) if s["phase"] == "running"]


def test_a_gateway_with_no_ready_replica_is_refused_and_nothing_starts(demo: Demo):
    with pytest.raises(BadInput) as refused:
        demo.step("gateway", name="front")
    assert refused.value.exit_code == 2
    assert (
        refused.value.sentence()
        == "no replica is ready for gateway front to front: serve one first"
    )
    assert _gateway_shards(demo) == []


def test_a_gateway_on_a_node_that_does_not_exist_is_refused(demo: Demo):
    _serve(demo, "llama-a")
    with pytest.raises(BadInput) as refused:
        demo.step("gateway", name="front", node="nowhere-01")
    assert refused.value.sentence().startswith("no node is named 'nowhere-01' in the inventory")
    assert _gateway_shards(demo) == []


def test_a_key_variable_that_is_unset_is_refused_before_anything_starts(demo: Demo):
    os.environ.pop("LLMGW_TEST_UNSET_KEY", None)
    with pytest.raises(BadInput) as refused:
        demo.step("gateway", name="front", api_key_env="LLMGW_TEST_UNSET_KEY")
    assert refused.value.message == (
        "the variable LLMGW_TEST_UNSET_KEY holding the gateway's key is not set"
    )
    assert _gateway_shards(demo) == []


def test_two_replicas_behind_the_gateway_both_get_traffic(demo: Demo):
    _serve(demo, "llama-b")
    started = demo.step("gateway", name="front", port=30400)
    assert started.ok
    gateway = started.result
    assert gateway["node"] == "cpu-01" and gateway["address"] == "cpu-01:30400"
    assert gateway["adopted"] is False
    (shard,) = [s for s in _gateway_shards(demo) if s["phase"] == "running"]
    assert [c["name"] for c in shard["commands"]] == ["front"]  # no router process beside it
    assert sorted(w["replica"] for w in gateway["workers"]) == ["llama-a", "llama-b"]
    assert {w["model"] for w in gateway["workers"]} == {"meta-llama/Llama-3.1-8B-Instruct"}

    answer = demo.step("ask", gateway="front", prompt="Say hello.")
    assert "meta-llama/Llama-3.1-8B-Instruct" in answer.result["text"]
    figures = demo.step("bench", gateway="front", requests=40, concurrency=4).result
    assert figures["requests"] == 40 and figures["requests_per_s"] > 0
    split = figures["split"]
    assert len(split) == 2 and sum(split.values()) == 40
    assert all(taken >= 10 for taken in split.values()), split
    print(f"through the gateway: {figures['requests_per_s']} requests/s, split {split}")


def test_the_gateways_log_is_read_like_an_engines(demo: Demo):
    logs = demo.step("logs", gateway="front", lines=50).result["lines"]
    assert logs and all(line.startswith("[gateway cpu-01] ") for line in logs)
    assert any("llmgw front on 0.0.0.0:30400" in line for line in logs), logs
    assert sum("Added worker with URL http" in line for line in logs) == 2, logs


def test_a_port_in_use_is_refused(demo: Demo):
    with pytest.raises(BadInput) as refused:
        demo.step("gateway", name="second", port=30400)
    assert (
        refused.value.sentence() == "port 30400 on cpu-01 is in use: give the gateway another port"
    )


def test_the_gateway_refuses_a_client_without_its_key_and_keeps_the_key_off_disk(demo: Demo):
    secret = "sk-gateway-test-4c1d9e"
    os.environ["LLMGW_TEST_GATEWAY_KEY"] = secret
    try:
        started = demo.step(
            "gateway", name="keyed", port=30500, api_key_env="LLMGW_TEST_GATEWAY_KEY"
        )
        # `ask` presents the key of the variable the gateway was started with.
        assert demo.step("ask", gateway="keyed", prompt="Hi.").result["text"]
    finally:
        del os.environ["LLMGW_TEST_GATEWAY_KEY"]
    with pytest.raises(BadInput, match="LLMGW_TEST_GATEWAY_KEY holding the key to present"):
        demo.step("ask", gateway="keyed", prompt="Hi.")
    refused = demo.step(
        "ask", gateway="keyed", prompt="Hi.", api_key_env="none", expect="refused"
    ).result
    assert refused["refused"] is True
    assert secret not in json.dumps(started.result)
    assert started.result["api_key_env"] == "LLMGW_TEST_GATEWAY_KEY"
    (shard,) = [s for s in _gateway_shards(demo) if s["spec"]["gateway"]["name"] == "keyed"]
    pid = int(shard["main_pid"])  # the front
    assert secret.encode() not in Path(f"/proc/{pid}/cmdline").read_bytes()
    assert secret.encode() in Path(f"/proc/{pid}/environ").read_bytes()  # the user's alone
    assert secret not in json.dumps(shard)
    written = [
        path
        for path in demo.demo.root.rglob("*")
        if path.is_file() and secret.encode() in path.read_bytes()
    ]
    assert written == []
    demo.step("stop", gateway="keyed")


def test_a_second_model_is_routed_by_its_name_and_the_worker_list_follows_a_serve(demo: Demo):
    served = _serve(demo, "qwen", model=QWEN_7B)
    (follow,) = served["gateways"]
    assert follow["name"] == "front" and len(follow["added"]) == 1
    qwen = demo.step("ask", gateway="front", model="Qwen/Qwen2.5-7B-Instruct", prompt="Hi.")
    assert "Qwen/Qwen2.5-7B-Instruct" in qwen.result["text"]
    llama = demo.step(
        "ask", gateway="front", model="meta-llama/Llama-3.1-8B-Instruct", prompt="Hi."
    )
    assert "Llama-3.1-8B" in llama.result["text"]
    with pytest.raises(BadInput) as unnamed:
        demo.step("ask", gateway="front", prompt="Hi.")
    assert unnamed.value.message == "gateway front serves 2 models"


def test_the_openai_sdk_gets_from_the_gateway_what_vllm_would_answer(demo: Demo):
    """The ten ordinary calls of a client, through the gateway fronting two models."""
    import openai

    from llmgw_core.serve.http import EngineReach

    llama, qwen = "meta-llama/Llama-3.1-8B-Instruct", "Qwen/Qwen2.5-7B-Instruct"
    reach = EngineReach(demo.fleet)
    try:
        tunnel = demo.loop.run(reach.tunnel("cpu-01", 30400))
        base, http = tunnel.url, tunnel.sync_client(timeout=30)
        client = openai.OpenAI(base_url=base + "/v1", api_key="unused", http_client=http)
        hello = [{"role": "user", "content": "Say hello"}]
        # 1. every model behind the gateway is listed
        assert sorted(m.id for m in client.models.list()) == sorted([llama, qwen])
        # 2. a model nobody serves is a 404 from the gateway itself
        with pytest.raises(openai.NotFoundError):
            client.chat.completions.create(model="gpt-4o", messages=hello)
        # 3. routing by model
        assert (
            qwen
            in client.chat.completions.create(model=qwen, messages=hello).choices[0].message.content
        )
        # 4. n choices
        assert len(client.chat.completions.create(model=llama, messages=hello, n=2).choices) == 2
        # 5. max_tokens cuts with finish_reason length
        cut = client.chat.completions.create(model=llama, messages=hello, max_tokens=3)
        assert cut.choices[0].finish_reason == "length" and cut.usage.completion_tokens == 3
        # 6. streaming text, 7. the usage chunk of a stream
        chunks = list(
            client.chat.completions.create(
                model=llama, messages=hello, stream=True, stream_options={"include_usage": True}
            )
        )
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert text.startswith("Hello from the simulated vllm engine")
        assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == len(
            text.split()
        )
        # 8. legacy completions
        legacy = client.completions.create(model=qwen, prompt="Once upon a time", max_tokens=5)
        assert legacy.choices[0].finish_reason == "length"
        # 9. a body that is not JSON is a 400
        broken = http.post(
            base + "/v1/chat/completions",
            content=b"{not json",
            headers={"Content-Type": "application/json"},
        )
        assert broken.status_code == 400
        # 10. a stop sequence
        stopped = client.chat.completions.create(model=llama, messages=hello, stop=["simulated"])
        assert stopped.choices[0].message.content.rstrip().endswith("the")
    finally:
        demo.loop.run(reach.close())


def test_a_keys_file_limits_each_key_to_its_models_and_counts_per_key(demo: Demo, tmp_path: Path):
    import openai

    from llmgw_core.gateway.run import find_gateway, front_call
    from llmgw_core.serve.http import EngineReach

    team, ops = "sk-team-a-0123456789abcdef", "sk-ops-fedcba9876543210"
    keys = tmp_path / "keys.yaml"
    keys.write_text(
        f"keys:\n  - {{id: team-a, key: {team}, models: [meta-llama/Llama-3.1-8B-Instruct]}}\n"
        f"  - {{id: ops, key: {ops}}}\n"
    )
    keys.chmod(0o644)
    with pytest.raises(
        BadInput, match=r"can be read by other users of this machine \(-rw-r--r--\)"
    ):
        demo.step("gateway", name="keys", port=30600, keys_file=str(keys))
    keys.chmod(0o600)
    started = demo.step("gateway", name="keys", port=30600, keys_file=str(keys)).result
    assert team not in json.dumps(started) and ops not in json.dumps(started)
    gateway = demo.loop.run(find_gateway(demo.fleet, "keys"))
    reach = EngineReach(demo.fleet)
    try:
        tunnel = demo.loop.run(reach.tunnel("cpu-01", 30600))
        base, http = tunnel.url, tunnel.sync_client(timeout=30)
        chat = base + "/v1/chat/completions"
        llama = {
            "model": "meta-llama/Llama-3.1-8B-Instruct",
            "messages": [{"role": "user", "content": "Hi"}],
        }
        qwen = {**llama, "model": "Qwen/Qwen2.5-7B-Instruct"}

        def auth(key: str) -> dict[str, str]:
            return {"Authorization": f"Bearer {key}"}

        none = http.post(chat, json=llama)
        assert none.status_code == 401 and none.json()["error"]["type"] == "invalid_request_error"
        wrong = http.post(chat, json=llama, headers=auth("sk-not-a-key-at-all-000"))
        assert (wrong.status_code, wrong.json()["error"]["code"]) == (401, "invalid_api_key")
        assert http.post(chat, json=llama, headers=auth(team)).status_code == 200
        limited = http.post(chat, json=qwen, headers=auth(team))
        assert (limited.status_code, limited.json()["error"]["code"]) == (404, "model_not_found")
        assert http.post(chat, json=qwen, headers=auth(ops)).status_code == 200
        nobody = http.post(chat, json={**llama, "model": "gpt-4o"}, headers=auth(ops))
        assert (nobody.status_code, nobody.json()["error"]["code"]) == (404, "model_not_found")
        listed = http.get(base + "/v1/models", headers=auth(team)).json()["data"]
        assert [card["id"] for card in listed] == ["meta-llama/Llama-3.1-8B-Instruct"]
        # The router's worker API is not reachable through the network port.
        admin = http.post(base + "/workers", json={"url": "http://evil:1", "model_id": "x"})
        assert admin.status_code == 404
        assert http.get(base + "/health").status_code == 200  # no key: load balancers probe it
        # A real OpenAI client, streaming through the front.
        client = openai.OpenAI(base_url=base + "/v1", api_key=ops, http_client=http)
        stream = client.chat.completions.create(
            model="Qwen/Qwen2.5-7B-Instruct",
            messages=[{"role": "user", "content": "Hi"}],
            stream=True,
            stream_options={"include_usage": True},
        )
        chunks = list(stream)
        assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0
        text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
        assert "Qwen/Qwen2.5-7B-Instruct" in text
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(
                base_url=base + "/v1", api_key="sk-wrong-wrong-wrong", http_client=http
            ).models.list()
        status, counted = demo.loop.run(front_call(demo.fleet, gateway, "GET", "/metrics"))
        assert status == 200
    finally:
        demo.loop.run(reach.close())
    for line in (
        'llmgw_gateway_requests_total{key="team-a",outcome="answered"} 2',
        'llmgw_gateway_requests_total{key="team-a",outcome="model_refused"} 1',
        'llmgw_gateway_requests_total{key="ops",outcome="no_such_model"} 1',
        'llmgw_gateway_requests_total{key="none",outcome="no_key"} 1',
        'llmgw_gateway_requests_total{key="unknown",outcome="bad_key"} 2',
    ):
        assert line in counted, counted
    assert team not in counted and ops not in counted
    demo.step("stop", gateway="keys")


def test_a_keys_limits_answer_429_with_retry_after_and_its_budget_outlives_a_restart(
    demo: Demo, tmp_path: Path
):
    """Three keys with limits, through the gateway with the OpenAI SDK: a rate, a budget
    that outlives the gateway, tokens counted from the engines' usage as the metrics say."""
    import openai

    from llmgw_core.gateway.run import find_gateway, front_call
    from llmgw_core.serve.http import EngineReach

    fast, thrifty, metered = (
        "sk-fast-0123456789abcdef",
        "sk-thrifty-0123456789abcd",
        "sk-metered-0123456789abcd",
    )
    keys = tmp_path / "keys.yaml"
    keys.write_text(
        f"keys:\n  - {{id: fast, key: {fast}, limits: {{requests_per_s: 1}}}}\n"
        f"  - {{id: thrifty, key: {thrifty}, limits: {{budget_tokens: 60, budget_per: day}}}}\n"
        f"  - {{id: metered, key: {metered}, limits: {{tokens_per_min: 100000}}, weight: 2}}\n"
    )
    keys.chmod(0o600)
    llama = "meta-llama/Llama-3.1-8B-Instruct"
    hello = [{"role": "user", "content": "Say hello"}]
    seen: dict[str, int] = {"thrifty": 0, "metered": 0}

    def exchange(reach: EngineReach) -> tuple[int, str]:
        tunnel = demo.loop.run(reach.tunnel("cpu-01", 30650))
        base, http = tunnel.url, tunnel.sync_client(timeout=30)

        def sdk(key: str) -> openai.OpenAI:
            return openai.OpenAI(
                base_url=base + "/v1", api_key=key, http_client=http, max_retries=0
            )

        # Over its requests per second: 429, OpenAI's body, Retry-After in whole seconds.
        answers = [
            http.post(
                base + "/v1/chat/completions",
                json={"model": llama, "messages": hello, "max_tokens": 2},
                headers={"Authorization": f"Bearer {fast}"},
            )
            for _ in range(3)
        ]
        assert answers[0].status_code == 200
        limited = [a for a in answers if a.status_code == 429]
        assert limited, [a.status_code for a in answers]
        assert limited[0].headers["retry-after"] == "1"
        assert limited[0].json()["error"]["code"] == "rate_limit_exceeded"
        with pytest.raises(openai.RateLimitError):
            for _ in range(3):
                sdk(fast).chat.completions.create(model=llama, messages=hello, max_tokens=2)
        # A budget: answered until used up, then refused until the next UTC day.
        client = sdk(thrifty)
        refused = None
        for _ in range(20):
            try:
                answer = client.chat.completions.create(model=llama, messages=hello)
            except openai.RateLimitError as exc:
                refused = exc
                break
            seen["thrifty"] += answer.usage.prompt_tokens + answer.usage.completion_tokens
        assert refused is not None and seen["thrifty"] >= 60
        assert refused.code == "insufficient_quota"
        retry = int(refused.response.headers["retry-after"])
        assert 0 < retry <= 24 * 3600
        # A stream whose client did not ask for usage: counted, and none reaches the client.
        chunks = list(
            sdk(metered).chat.completions.create(model=llama, messages=hello, stream=True)
        )
        assert chunks and all(c.choices and c.usage is None for c in chunks)
        text = "".join(c.choices[0].delta.content or "" for c in chunks)
        asked = sdk(metered).chat.completions.create(model=llama, messages=hello)
        # The sim streams a token a word; the stream's prompt is the same as the request's.
        streamed = asked.usage.prompt_tokens + len(text.split())
        seen["metered"] = streamed + asked.usage.prompt_tokens + asked.usage.completion_tokens
        gateway = demo.loop.run(find_gateway(demo.fleet, "limits"))
        return demo.loop.run(front_call(demo.fleet, gateway, "GET", "/metrics"))

    # With fair shares kept (the engines are never full here: nothing waits at the front).
    started = demo.step("gateway", name="limits", port=30650, keys_file=str(keys), fair={})
    assert started.result["fair"] is True
    reach = EngineReach(demo.fleet)
    try:
        status, counted = exchange(reach)
    finally:
        demo.loop.run(reach.close())
    assert status == 200
    assert 'llmgw_gateway_fair_tokens{key="metered"}' in counted
    assert f'llmgw_gateway_queued{{model="{llama}"}} 0' in counted
    from llmgw_core.gateway.run import gateways_now, queued_at_fronts

    fronts = demo.loop.run(gateways_now(demo.fleet))
    assert demo.loop.run(queued_at_fronts(demo.fleet, fronts, {llama})) == 0
    for key in ("thrifty", "metered"):
        total = sum(
            float(line.rsplit(" ", 1)[1])
            for line in counted.splitlines()
            if line.startswith(f'llmgw_gateway_tokens_total{{key="{key}",')
        )
        assert total == seen[key], (key, counted)
    # The access log's lines, summed by the `usage` step, say what the counters say.
    used = demo.step("usage", gateway="limits").result
    for key in ("thrifty", "metered"):
        total = used["totals"][key]
        assert total["prompt_tokens"] + total["completion_tokens"] == seen[key], used
    assert used["totals"]["thrifty"]["requests"] == used["totals"]["thrifty"]["answered"] + 1
    assert {row["model"] for row in used["usage"]} == {llama}
    assert 'llmgw_gateway_limited_total{key="thrifty",limit="budget"} 1' in counted
    assert 'llmgw_gateway_limited_total{key="fast",limit="requests_per_s"}' in counted
    assert 'llmgw_gateway_budget_used_tokens{key="thrifty",' in counted
    assert fast not in counted and thrifty not in counted

    # The gateway stopped and started again under its name: the budget is still spent.
    demo.step("stop", gateway="limits")
    demo.step("gateway", name="limits", port=30650, keys_file=str(keys))
    reach = EngineReach(demo.fleet)
    try:
        tunnel = demo.loop.run(reach.tunnel("cpu-01", 30650))
        again = tunnel.sync_client(timeout=30).post(
            tunnel.url + "/v1/chat/completions",
            json={"model": llama, "messages": hello},
            headers={"Authorization": f"Bearer {thrifty}"},
        )
    finally:
        demo.loop.run(reach.close())
    assert again.status_code == 429, again.text
    assert again.json()["error"]["type"] == "insufficient_quota"
    assert len(again.headers["x-request-id"]) == 32
    # The access log went on too: one request more, refused.
    after = demo.step("usage", gateway="limits").result["totals"]["thrifty"]
    assert after["requests"] == used["totals"]["thrifty"]["requests"] + 1
    demo.step("stop", gateway="limits")


def _certificates(folder: Path) -> tuple[Path, Path, Path]:
    """A CA, and a certificate it signed for 127.0.0.1 (the demo's nodes), as PEM files."""
    import datetime

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    now = datetime.datetime.now(datetime.timezone.utc)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "llmgw test CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    import ipaddress

    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "cpu-01")]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    (folder / "ca.pem").write_bytes(ca.public_bytes(pem))
    (folder / "cert.pem").write_bytes(cert.public_bytes(pem) + ca.public_bytes(pem))
    (folder / "key.pem").write_bytes(
        key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    (folder / "key.pem").chmod(0o600)
    return folder / "ca.pem", folder / "cert.pem", folder / "key.pem"


def test_a_gateway_speaks_https_with_the_operators_certificate_checked_by_ask(
    demo: Demo, tmp_path: Path
):
    import httpx

    from llmgw_core.serve.http import EngineReach

    ca, cert, key = _certificates(tmp_path)
    tls = {"cert": str(cert), "key": str(key)}
    key.chmod(0o644)
    with pytest.raises(BadInput, match=r"can be read by other users of this machine"):
        demo.step("gateway", name="tls", port=30700, tls=tls)
    key.chmod(0o600)
    started = demo.step("gateway", name="tls", port=30700, tls=tls).result
    assert started["tls"] is True and started["url"] == "https://cpu-01:30700/v1"
    llama = "meta-llama/Llama-3.1-8B-Instruct"
    answer = demo.step("ask", gateway="tls", model=llama, prompt="Hi.", ca_file=str(ca)).result
    assert answer["text"]
    # Checked against the system's CAs, the operator's own CA is unknown: refused, said.
    with pytest.raises(LlmgwError, match="CERTIFICATE_VERIFY_FAILED"):
        demo.step("ask", gateway="tls", model=llama, prompt="Hi.")
    reach = EngineReach(demo.fleet)
    try:
        tunnel = demo.loop.run(reach.tunnel("cpu-01", 30700))
        with pytest.raises(httpx.HTTPError), tunnel.sync_client(timeout=5) as plain:
            plain.get(tunnel.url + "/v1/models").raise_for_status()  # plain HTTP: no answer
    finally:
        demo.loop.run(reach.close())
    secret = key.read_bytes().split(b"\n")[1]
    written = [
        path for path in demo.demo.root.rglob("*") if path.is_file() and secret in path.read_bytes()
    ]
    assert written == []
    demo.step("stop", gateway="tls")


def test_the_worker_list_follows_a_stop(demo: Demo):
    stopped = demo.step("stop", replica="qwen")
    (follow,) = stopped.result["gateways"]
    assert len(follow["removed"]) == 1
    assert {w["replica"] for w in follow["workers"]} == {"llama-a", "llama-b"}


def test_killing_one_engine_leaves_requests_succeeding_through_the_other(demo: Demo):
    async def head_pid() -> int:
        answer = await demo.fleet.request("h100-a-01", "shard.list")
        (shard,) = [
            s for s in answer["shards"] if s["replica"] == "llama-a" and s["phase"] == "running"
        ]
        return int(shard["main_pid"])

    os.kill(demo.loop.run(head_pid()), signal.SIGKILL)
    answers = [demo.step("ask", gateway="front", prompt=f"question {i}") for i in range(12)]
    assert all(a.ok and a.result["text"] for a in answers)


def test_a_later_console_adopts_the_running_gateway(demo: Demo):
    pids = _router_pids(demo)
    assert len(pids) == 1

    async def adopt() -> dict:
        from llmgw_core.gateway.spec import GatewayArgs
        from llmgw_core.serve.http import EngineReach, close_quietly

        fleet = await open_console(demo.demo)
        reach = EngineReach(fleet)
        try:
            adopted = await start_gateway(fleet, reach, GatewayArgs(name="front"))
            workers = await router_workers(reach, (await _find(fleet)))
        finally:
            await close_quietly(reach)
            await fleet.close()
        return {"adopted": adopted, "workers": workers}

    async def _find(fleet):
        from llmgw_core.gateway.run import find_gateway

        return await find_gateway(fleet, "front")

    found = demo.loop.run(adopt())
    assert found["adopted"]["adopted"] is True
    # llama-a's engine was killed: the replica failed, so the gateway dropped it.
    assert [w["replica"] for w in found["adopted"]["workers"]] == ["llama-b"]
    assert len(found["workers"]) == 1
    assert _router_pids(demo) == pids


def test_stopping_the_gateway_leaves_nothing_running(demo: Demo):
    (pid,) = _router_pids(demo)
    stopped = demo.step("stop", gateway="front")
    assert stopped.result["stopped"] is True
    deadline = time.monotonic() + 10
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not Path(f"/proc/{pid}").exists()
    assert _gateway_shards(demo) == []
    with pytest.raises(LlmgwError):
        demo.step("ask", gateway="front", prompt="Hi.")
    for name in ("llama-a", "llama-b"):
        demo.step("stop", replica=name)
    assert demo.claims() == {}


def test_the_demo_script_serves_two_replicas_fronts_them_and_survives_one_stopping(
    tmp_path: Path,
):
    env = {**os.environ, "HOME": str(tmp_path), "XDG_CONFIG_HOME": str(tmp_path / "config")}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "llmgw_tui.cli",
            "--demo",
            "--run",
            str(example_on_a_free_port(REPO / "examples" / "demo-gateway.yaml", tmp_path)),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=400,
        env=env,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    by_step = [(line.get("step"), line) for line in lines]
    bench = next(line for name, line in by_step if name == "bench")
    assert len(bench["result"]["split"]) == 2
    asks = [line for name, line in by_step if name == "ask"]
    assert len(asks) == 2 and all(a["result"]["text"] for a in asks)
