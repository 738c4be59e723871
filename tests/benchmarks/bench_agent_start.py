"""The deployed agent's start on a node: CPU from exec to its first `facts` answer (printed, never asserted).

    .venv/bin/python tests/benchmarks/bench_agent_start.py [--runs N] [--python /usr/bin/python3]
        [--agent-source DIR]

The agent runs exactly as the console starts it over SSH: `deploy.serve_command`
under `/bin/sh`, in a clean environment (HOME, PATH; no PYTHONDONTWRITEBYTECODE),
from `~/.cache/llmgw/agent-<sha12>.pyz`, with a replay capture of an 8-GPU node.
Each run waits for the hello, asks `facts`, reads the answer, closes stdin
and takes the child's CPU seconds from `wait4` (so exit is counted too).

Rows:
- `python3 -c pass`: the floor, one bare interpreter start;
- from the zip: no folder, and `PYTHONDONTWRITEBYTECODE=1` so none is made:
  every module of the agent is compiled from the zip at every start (what
  every start cost before the cache; the standard library's bytecode is used
  as always);
- first start: the folder is made by this start (removed before each run);
- from the cache: the folder and its `__pycache__` are there (every start
  after the first on a node);
- 8 at once, from the zip and from the cache: 8 agents started together on
  this machine's cores, as 8 nodes' agents on one host would be; per-agent
  CPU (median) and the wall time until the last facts answer.

Medians of `--runs` runs (default 9); the machine's load is printed, since
a shared host slows every row. `--agent-source` measures another copy of the
`llmgw_agent` folder (e.g. `git archive <commit> agent` of an older agent,
whose zipapp always ran from the zip: one without `zip_main.py` gets the old
three-line `__main__.py`).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from llmgw_agent.sim.profiles import write_profile
from llmgw_core.fleet.deploy import (
    REMOTE_CACHE,
    ZIP_MAIN_SOURCE,
    AgentBundle,
    agent_bundle,
    build_bundle,
    serve_command,
)

_OLD_ZIP_MAIN = "import sys\nfrom llmgw_agent.__main__ import main\nsys.exit(main())\n"


class Node:
    """A fake node's home: the agent in its cache, a capture, a state dir."""

    def __init__(self, root: Path, bundle: AgentBundle) -> None:
        self.bundle = bundle
        self.home = root / "home"
        self.cache = self.home / REMOTE_CACHE
        self.cache.mkdir(parents=True)
        (self.cache / bundle.file_name).write_bytes(bundle.payload)
        self.folder = self.cache / bundle.file_name[: -len(".pyz")]
        self.replay = write_profile("hgx-h100", root / "capture")
        self.state = root / "state"

    def env(self, zip_only: bool = False) -> dict[str, str]:
        """What sshd gives the agent: a home, a PATH, a locale (and no bytecode for `zip_only`)."""
        env = {"HOME": str(self.home), "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
        if zip_only:
            env["PYTHONDONTWRITEBYTECODE"] = "1"
        return env

    def command(self) -> str:
        """The console's serve command for this node."""
        return serve_command(self.bundle, replay=str(self.replay), state_dir=str(self.state))


def _spawn(node: Node, python: str, zip_only: bool = False) -> subprocess.Popen:
    command = node.command()
    if python != "python3":
        command = command.replace("python3 ", f"{python} ", 1)
    return subprocess.Popen(
        ["/bin/sh", "-c", command],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        env=node.env(zip_only),
        cwd=node.home,
    )


def _converse(process: subprocess.Popen) -> dict:
    """Hello, one facts request, its answer; returns the hello."""
    assert process.stdin is not None and process.stdout is not None
    hello = json.loads(process.stdout.readline())["hello"]
    process.stdin.write(b'{"id": 1, "op": "facts"}\n')
    process.stdin.flush()
    answer = json.loads(process.stdout.readline())
    if not answer.get("ok") or len(answer["result"]["gpus"]) != 8:
        raise SystemExit(f"the agent's facts answer is not the 8-GPU node's: {answer}")
    process.stdin.close()
    return hello


def _cpu_s(process: subprocess.Popen) -> float:
    _pid, _status, usage = os.wait4(process.pid, 0)
    process.returncode = 0
    return usage.ru_utime + usage.ru_stime


def one_start(node: Node, python: str, zip_only: bool = False) -> tuple[float, float, str]:
    """(cpu_s, wall_s, where the hello says it runs from) of one agent start to facts."""
    started = time.perf_counter()
    process = _spawn(node, python, zip_only)
    hello = _converse(process)
    wall_s = time.perf_counter() - started
    return _cpu_s(process), wall_s, str(hello.get("runs_from", "?"))


def many_starts(nodes: list[Node], python: str, zip_only: bool) -> tuple[list[float], float]:
    """Start one agent per node at once; (each one's cpu_s, wall_s to the last facts)."""
    started = time.perf_counter()
    processes = [_spawn(node, python, zip_only) for node in nodes]
    for process in processes:
        _converse(process)
    wall_s = time.perf_counter() - started
    return [_cpu_s(process) for process in processes], wall_s


def bare_python(python: str) -> tuple[float, float]:
    """(cpu_s, wall_s) of `python3 -c pass` in the same clean environment."""
    started = time.perf_counter()
    process = subprocess.Popen([python, "-c", "pass"], env={"PATH": "/usr/bin:/bin"})
    cpu_s = _cpu_s(process)
    return cpu_s, time.perf_counter() - started


def _drop_folder(node: Node) -> None:
    if node.folder.exists():
        shutil.rmtree(node.folder)


def _row(label: str, cpu: list[float], wall: list[float], where: set[str]) -> None:
    shown = "/".join(sorted(where)) if where else "-"
    print(
        f"  {label:<34} cpu {statistics.median(cpu) * 1000:6.1f} ms"
        f"   wall {statistics.median(wall) * 1000:6.1f} ms   runs from {shown}"
    )


def bundle_of(source: Path | None, scratch: Path) -> AgentBundle:
    """This checkout's agent, or the one in `source` (an old one gets its old `__main__.py`)."""
    if source is None:
        return agent_bundle()
    copy = scratch / "llmgw_agent"
    shutil.copytree(source, copy, ignore=shutil.ignore_patterns("__pycache__"))
    if not (copy / ZIP_MAIN_SOURCE).exists():
        (copy / ZIP_MAIN_SOURCE).write_text(_OLD_ZIP_MAIN)
    return build_bundle(copy)


def main(argv: list[str] | None = None) -> int:
    """Print the agent's start figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--runs", type=int, default=9)
    parser.add_argument("--agents", type=int, default=8)
    parser.add_argument("--python", default="/usr/bin/python3")
    parser.add_argument("--agent-source", type=Path, default=None)
    options = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bench-agent-start-") as temporary:
        root = Path(temporary)
        bundle = bundle_of(options.agent_source, root)
        node = Node(root / "n0", bundle)
        nodes = [node] + [Node(root / f"n{index}", bundle) for index in range(1, options.agents)]
        version = subprocess.run(
            [options.python, "-V"], capture_output=True, text=True, check=True
        ).stdout.strip()
        print(
            f"agent {bundle.file_name}, {version} ({options.python}), "
            f"load {os.getloadavg()[0]:.2f}, {os.cpu_count()} cpus, {options.runs} runs"
        )
        figures: dict[str, tuple[list[float], list[float], set[str]]] = {
            name: ([], [], set()) for name in ("bare", "zip", "first", "cache")
        }
        for _ in range(options.runs):
            cpu_s, wall_s = bare_python(options.python)
            figures["bare"][0].append(cpu_s)
            figures["bare"][1].append(wall_s)
            for name in ("zip", "first", "cache"):
                if name in ("zip", "first"):
                    _drop_folder(node)
                if name == "cache" and not node.folder.exists():
                    one_start(node, options.python)  # the first start makes it
                cpu_s, wall_s, where = one_start(node, options.python, name == "zip")
                figures[name][0].append(cpu_s)
                figures[name][1].append(wall_s)
                figures[name][2].add(where)
        print("one agent, exec to its facts answer (and exit):")
        _row("python3 -c pass", *figures["bare"][:2], set())
        _row("from the zip (no cache folder)", *figures["zip"])
        _row("first start (makes the folder)", *figures["first"])
        _row("from the cache", *figures["cache"])
        print(f"{options.agents} agents at once, exec to the last facts answer:")
        for name, zip_only in (("from the zip", True), ("from the cache", False)):
            per_agent: list[float] = []
            walls: list[float] = []
            for each in nodes:
                _drop_folder(each)
                if not zip_only:
                    one_start(each, options.python)
            for _ in range(options.runs):
                cpu, wall_s = many_starts(nodes, options.python, zip_only)
                per_agent.extend(cpu)
                walls.append(wall_s)
            print(
                f"  {name:<34} cpu {statistics.median(per_agent) * 1000:6.1f} ms per agent"
                f" ({sum(per_agent) / options.runs * 1000:.0f} ms all)"
                f"   wall {statistics.median(walls) * 1000:6.1f} ms"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
