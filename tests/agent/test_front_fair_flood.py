"""Fair shares against a flood, with real processes: `llmgw front` before the sim engine
standing in for vLLM (`--max-num-seqs 4`, its pace slowed), one key flooding it from many
threads, another asking now and then.

The front learns the engine's capacity from its own gauges, holds the flood in a bounded
queue (refusing its excess with 503 and `Retry-After`), and the light key's requests take
the sequence kept for them at once. The benchmark (`tests/benchmarks/bench_front_fairness.py`)
sets the same arrangement beside first come, first sent, and the light key alone.
"""

from __future__ import annotations

import json
import statistics
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from agent_process import front_process
from engine_process import SIM_VLLM, serving, sim_env

from llmgw_agent.front.control import call

pytestmark = pytest.mark.timeout(120)

LIGHT, FLOOD = "sk-fair-light-0123456789", "sk-fair-flood-0123456789"
TOKEN_S = 0.05
SEQS = 4


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    folder = tmp_path_factory.mktemp("sim")
    env = sim_env(folder / "state", LLMGW_SIM_TOKEN_S=str(TOKEN_S))
    argv = [*SIM_VLLM, "/models/m", "--served-model-name", "m", "--max-num-seqs", str(SEQS)]
    with serving(argv, env, ready="/health", wait_s=60, log=folder / "sim.log") as base:
        yield base


def _config(fair: dict | None) -> dict:
    config: dict = {
        "keys": [
            {"id": "light", "key": LIGHT, "models": None},
            {"id": "flood", "key": FLOOD, "models": None},
        ],
        "upstream": {},
        "store": "fair",
    }
    if fair is not None:
        config["fair"] = fair
    return config


def _contend(
    port: int, control: str, fair: bool, seconds: float
) -> tuple[list[float], dict[int, int]]:
    """Twelve threads flooding, one light client streaming every 0.2 s: the light key's
    times to first token, and the flood's statuses."""
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
    halt = threading.Event()
    statuses: dict[int, int] = {}

    def flood() -> None:
        with httpx.Client(timeout=60) as http:
            while not halt.is_set():
                answer = http.post(url, json=body, headers={"Authorization": f"Bearer {FLOOD}"})
                statuses[answer.status_code] = statuses.get(answer.status_code, 0) + 1
                if answer.status_code != 200:
                    assert answer.status_code == 503, answer.text
                    assert answer.headers["retry-after"] == "1"
                    assert answer.json()["error"]["code"] == "overloaded"
                    halt.wait(0.2)

    threads = [threading.Thread(target=flood, daemon=True) for _ in range(12)]
    for thread in threads:
        thread.start()
    # The engine fills and says so on two reads; with `fair` the front learns its capacity
    # then, and the engine's own queue drains.
    for _ in range(100 if fair else 0):
        if "llmgw_gateway_worker_capacity{" in call(control, "GET", "/metrics")[1]:
            break
        time.sleep(0.1)
    time.sleep(1.5)
    light_s: list[float] = []
    deadline = time.monotonic() + seconds
    with httpx.Client(timeout=60) as http:
        while time.monotonic() < deadline or len(light_s) < 5:
            started = time.monotonic()
            with http.stream(
                "POST",
                url,
                json={**body, "stream": True},
                headers={"Authorization": f"Bearer {LIGHT}"},
            ) as answer:
                assert answer.status_code == 200
                first = None
                for line in answer.iter_lines():
                    if first is None and '"content": "' in line and '"content": ""' not in line:
                        first = time.monotonic() - started
                assert first is not None
                light_s.append(first)
            time.sleep(0.2)
    halt.set()
    for thread in threads:
        thread.join(60)
    return light_s, statuses


def test_a_flooding_key_is_held_at_the_front_and_the_light_key_goes_first(
    engine: str, tmp_path: Path
):
    with front_process(tmp_path, _config({"queue": 6, "reserve": 1})) as (port, control):
        call(control, "POST", "/workers", {"url": engine, "model_id": "m"})
        light_s, statuses = _contend(port, control, True, 3.0)
        metrics = call(control, "GET", "/metrics")[1]
    log = tmp_path / "state" / "gateways" / "fair" / "access.log"
    lines = [json.loads(line) for line in log.read_text().splitlines()]
    flood = [line for line in lines if line["key"] == "flood" and line["status"] == 200]
    light = [line for line in lines if line["key"] == "light"]
    # The front learnt the engine's capacity from its own gauges, and holds the flood in a
    # bounded queue: its excess refused, what it answers long in waiting.
    capacity = f'llmgw_gateway_worker_capacity{{worker="{engine}",model="m"}} '
    learnt = int(metrics.split(capacity, 1)[1].split()[0])
    assert learnt in (SEQS, SEQS + 1)  # SEQS + 1 while it probes for more
    assert statuses.get(503, 0) > 0 and statuses.get(200, 0) > 0
    refused = f'llmgw_gateway_limited_total{{key="flood",limit="queue_full"}} {statuses[503]}'
    assert refused in metrics and 'llmgw_gateway_held_total{key="flood"}' in metrics
    flood_s = statistics.median(line["duration_s"] for line in flood)
    # The light key's first token comes as if the engine were its own: a token's time and
    # the way there, a fraction of what the flood's requests take (on a loaded machine, the
    # times are compared, not set).
    flood_held = statistics.median(line["queued_s"] for line in flood)
    assert statistics.median(line["queued_s"] for line in light) < flood_held / 4
    assert statistics.median(light_s) < flood_s / 3, (light_s, flood_s)
