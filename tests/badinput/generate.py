"""The bad-input corpus: every case built from the real fixtures beside the repository.

`cases()` lists each case with what it must end in (an exit code, or the
agent's error code) and a fragment of the one sentence it must print.
`materialise(case, folder)` writes the case's files into `folder` at test
time (the 50 MB script and the 10 MB protocol line included), so nothing
large or copied from the fixtures is committed.

    python tests/badinput/generate.py OUT   # writes every case under OUT/<id>/

Kinds (how a user meets the input, and so how `corpus.py` runs it):
  run      `llmgw-tui --run script.yaml [--inventory inventory.yaml]`
  agent    one JSON line to the real agent over its stdin (it must answer, then ping)
  capture  the agent's replay of a capture directory (`llmgw doctor --replay DIR --facts --json`)
  shell    a command line the core builds for `/bin/sh`, run by a real shell
"""

from __future__ import annotations

import json
import os
import struct
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SHARED = (
    Path(os.environ.get("LLMGW_SHARED", Path(__file__).resolve().parents[2].parent / "shared"))
    / "fixtures"
)
MODELS = SHARED / "models"
HARDWARE = SHARED / "hardware"

FLEET = "fleet:\n  - {name: dgx, count: 2, gpu: h100-80g, gpus: 8, fabric: ib-a}\n"
SECRET = "hf_canary_SECRET_0f9e8d7c6b5a"
"""The HF_TOKEN (and API key) every case runs with; it must never be printed."""

INJECTIONS = {
    "semicolon": "a;touch PWNED",
    "subshell": "$(touch PWNED)",
    "backticks": "`touch PWNED`",
    "newline": "a\ntouch PWNED",
    "single-quote": "a'b",
    "double-quote": 'a"b',
    "pipe": "a|touch PWNED",
    "ampersand": "a&&touch PWNED",
    "redirect": "a>PWNED",
    "dash-option": "-oProxyCommand=touch PWNED",
}


@dataclass(frozen=True)
class Case:
    """One bad input and what it must end in.

    Attributes:
        id: unique, stable, `category-what`.
        category: script, inventory, model, protocol, capture, injection.
        kind: run, agent, capture or shell (see the module's docstring).
        expect: the exit code (run, capture, shell) or agent error code (agent).
        fragment: text the one sentence must hold.
        files: relative path → bytes (or a builder called with the case folder).
        links: relative path → symlink target.
        fifos: relative paths made named pipes (a read would block).
        inventory: pass `--inventory inventory.yaml`.
        as_json: pass `--json` (the sentence then comes as `{"ok": false, "error": …}`).
        line: the protocol line (agent kind), or its builder.
        shell: for the shell kind, the value put through the command builder.
        unsaid: text the output must not hold (a value its field takes: read without a word).
    """

    id: str
    category: str
    kind: str
    expect: int | str
    fragment: str
    files: dict[str, bytes | Callable[[], bytes]] = field(default_factory=dict)
    links: dict[str, str] = field(default_factory=dict)
    fifos: tuple[str, ...] = ()
    inventory: bool = False
    as_json: bool = False
    line: bytes | Callable[[], bytes] | None = None
    shell: dict[str, str] | None = None
    unsaid: str = ""


def _y(text: str) -> bytes:
    return text.encode()


def _script(step: str, *, fleet: bool = True) -> bytes:
    return _y((FLEET if fleet else "") + f"steps:\n  - {step}\n")


# --- scripts -----------------------------------------------------------------------------


def _alias_bomb(levels: int = 9) -> str:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    for level in range(1, levels):
        refs = ", ".join([f"*a{level - 1}"] * 9)
        lines.append(f"a{level}: &a{level} [{refs}]")
    return "\n".join(lines) + "\n"


JSON_TOO = (
    "empty",
    "binary",
    "not-yaml-tab",
    "alias-bomb",
    "deep-nesting",
    "duplicate-steps",
    "unknown-step",
    "unknown-step-arg",
    "missing-model",
    "inventory-missing-file",
)
"""Script cases also run with `--json`, where automation reads the sentence."""


def script_cases() -> Iterator[Case]:
    plan = "catalog:meta-llama/Llama-3.3-70B-Instruct"
    texts: dict[str, tuple[bytes | Callable[[], bytes], str]] = {
        "empty": (b"", "is empty"),
        "whitespace": (b"   \n\n", "is empty"),
        "comment-only": (b"# nothing\n", "is empty"),
        "not-yaml-tab": (b"steps:\n\t- plan: {}\n", "not valid YAML"),
        "not-yaml-bracket": (b"steps: [\n", "not valid YAML"),
        "not-yaml-colon": (b"steps: a: b\n", "not valid YAML"),
        "not-yaml-quote": (b'steps: "open\n', "not valid YAML"),
        "top-list": (b"- plan: {}\n", "a script is a mapping"),
        "top-scalar": (b"hello\n", "a script is a mapping"),
        "top-number": (b"42\n", "a script is a mapping"),
        "top-set": (b"!!set {a, b}\n", "a script is a mapping"),
        "python-tag": (b"steps: !!python/object/apply:os.system [id]\n", "not valid YAML"),
        "binary": (bytes(range(256)), "binary"),
        "latin1": ("steps: [caf\xe9]\n".encode("latin-1"), "not UTF-8"),
        "utf16": ("steps: []\n".encode("utf-16"), "UTF-16"),
        "fifty-mb": (lambda: b"steps:\n" + b"  - nodes: {}\n" * (50 * 1024 * 1024 // 14), "1 MB"),
        "alias-bomb": (_y(_alias_bomb() + "steps: []\n"), "expand to more than"),
        "alias-bomb-in-steps": (
            _y(_alias_bomb(8) + "steps:\n  - plan: {model: *a7}\n"),
            "expand to more than",
        ),
        "deep-nesting": (_y("steps: " + "[" * 3000 + "]" * 3000 + "\n"), "nested too deeply"),
        "duplicate-steps": (b"steps: []\nsteps: []\n", "'steps' is given twice"),
        "duplicate-step-arg": (
            _script(f"plan: {{model: {plan}, context: 1, context: 2}}"),
            "'context' is given twice",
        ),
        "unknown-top-key": (b"stepz: []\n", "unknown key 'stepz'"),
        "steps-not-list": (b"steps: plan\n", "`steps:` must be a list"),
        "steps-mapping": (b"steps: {plan: {}}\n", "`steps:` must be a list"),
        "step-two-keys": (
            _script(f"{{plan: {{model: {plan}}}, nodes: {{}}}}"),
            "a step is a one-key mapping",
        ),
        "step-scalar": (_script("plan"), "a step is a one-key mapping"),
        "unknown-step": (_script("deploy: {}"), "unknown step 'deploy'"),
        "step-args-list": (_script("plan: [1, 2]"), "step 'plan'"),
        "step-args-string": (_script("plan: hello"), "step 'plan'"),
        "unknown-step-arg": (_script(f"plan: {{model: {plan}, contxt: 9}}"), "contxt"),
        "missing-model": (_script("plan: {context: 4096}"), "model is required"),
        "empty-model": (_script("plan: {model: ''}"), "model"),
        "fleet-not-list": (b"fleet: dgx\nsteps: []\n", "`fleet:` must be a list"),
        "fleet-entry-unknown-key": (
            b"fleet:\n  - {name: a, gpu: h100-80g, gpus: 8, gpux: 1}\nsteps: []\n",
            "line 2",
        ),
        "fleet-unknown-gpu": (b"fleet:\n  - {name: a, gpu: h999, gpus: 8}\nsteps: []\n", "line 2"),
        "inventory-not-path": (b"inventory: [a]\nsteps: []\n", "`inventory:` must be a file path"),
        "inventory-missing-file": (
            b"inventory: nowhere.yaml\nsteps:\n  - nodes: {}\n",
            "does not exist",
        ),
    }
    for name, (text, fragment) in texts.items():
        yield Case(f"script-{name}", "script", "run", 2, fragment, files={"script.yaml": text})
        if name in JSON_TOO:
            yield Case(
                f"script-json-{name}",
                "script",
                "run",
                2,
                fragment,
                files={"script.yaml": text},
                as_json=True,
            )
    numbers = {
        "nan": ".nan",
        "inf": ".inf",
        "minus-inf": "-.inf",
        "negative": "-5",
        "zero": "0",
        "huge": "99999999999999999999999",
        "float": "1.5",
        "string": "lots",
        "bool": "true",
        "list": "[1]",
        "null-map": "{}",
    }
    fields = {
        "plan-context": ("plan", f"model: {plan}, context: {{}}"),
        "plan-concurrency": ("plan", f"model: {plan}, concurrency: {{}}"),
        "plan-utilisation": ("plan", f"model: {plan}, gpu_memory_utilization: {{}}"),
        "estimate-tp": ("estimate", f"model: {plan}, gpu: h100-80g, tensor_parallel: {{}}"),
        "estimate-memory": ("estimate", f"model: {plan}, gpu_memory_gib: {{}}"),
        "fleet-count": (None, "{{name: a, count: {}, gpu: h100-80g, gpus: 8}}"),
        "fleet-gpus": (None, "{{name: a, gpu: h100-80g, gpus: {}}}"),
    }
    # Which values each field takes (and so are not bad input for it).
    fine = {
        "plan-utilisation": {"float"},
        "estimate-memory": {"float", "negative"},
        "fleet-gpus": {"zero"},
    }
    for field_name, (step_name, template) in fields.items():
        for value_name, value in numbers.items():
            if value_name in fine.get(field_name, set()):
                continue
            if field_name == "estimate-memory" and value_name == "negative":
                continue
            if step_name is None:
                text = f"fleet:\n  - {template.format(value)}\nsteps: []\n"
                fragment = "line 2"
            else:
                text = FLEET + f"steps:\n  - {step_name}: {{{template.format(value)}}}\n"
                fragment = f"line 4: step '{step_name}'"
            yield Case(
                f"script-{field_name}-{value_name}",
                "script",
                "run",
                2,
                fragment,
                files={"script.yaml": _y(text)},
            )
    yield Case("script-missing-file", "script", "run", 2, "cannot read script", files={})
    yield Case(
        "script-is-a-directory",
        "script",
        "run",
        2,
        "is a directory",
        files={"script.yaml/keep": b""},
    )
    yield Case("script-is-a-fifo", "script", "run", 2, "not a regular file", fifos=("script.yaml",))


# --- inventories -------------------------------------------------------------------------


def inventory_cases() -> Iterator[Case]:
    node = "{name: a, host: h}"
    inventories: dict[str, tuple[str | bytes, str]] = {
        "empty": ("", "is empty"),
        "not-yaml": ("nodes: [\n", "not valid YAML"),
        "a-list": ("- a\n", "an inventory is a mapping"),
        "no-nodes": ("defaults: {user: ops}\n", "nodes"),
        "nodes-empty": ("nodes: []\n", "nodes"),
        "nodes-string": ("nodes: gpu-a-01\n", "nodes"),
        "unknown-key": ("nodes:\n  - {name: a, host: h, prot: 22}\n", "unknown key 'prot'"),
        "unknown-top-key": (f"nodes: [{node}]\nnode: []\n", "unknown key 'node'"),
        "duplicate-names": (
            "nodes:\n  - {name: a, host: h1}\n  - {name: a, host: h2}\n",
            "two nodes are named 'a'",
        ),
        "duplicate-key": (
            "nodes:\n  - name: a\n    host: h\n    host: g\n",
            "'host' is given twice",
        ),
        "missing-host": ("nodes:\n  - {name: a}\n", "host` is required"),
        "empty-host": ("nodes:\n  - {name: a, host: ''}\n", "host"),
        "bad-name": ("nodes:\n  - {name: '-a', host: h}\n", "name"),
        "name-with-space": ("nodes:\n  - {name: 'a b', host: h}\n", "name"),
        "binary": (bytes(range(256)), "binary"),
        "alias-bomb": (_alias_bomb() + f"nodes: [{node}]\n", "expand to more than"),
        "duplicate-fabric": (
            "nodes:\n  - {name: a, host: h, fabrics: [{name: ib, hcas: [m]}, {name: ib, hcas: [n]}]}\n",
            "fabric 'ib' is listed twice",
        ),
        "fabric-no-hcas": (
            "nodes:\n  - {name: a, host: h, fabrics: [{name: ib, hcas: []}]}\n",
            "hcas",
        ),
        "fabric-rate-negative": (
            "nodes:\n  - {name: a, host: h, fabrics: [{name: ib, hcas: [m], rate_gbps: -1}]}\n",
            "rate_gbps",
        ),
        "fabric-rate-nan": (
            "nodes:\n  - {name: a, host: h, fabrics: [{name: ib, hcas: [m], rate_gbps: .nan}]}\n",
            "rate_gbps",
        ),
        "hca-shell": (
            "nodes:\n  - {name: a, host: h, fabrics: [{name: ib, hcas: ['mlx5_0;id']}]}\n",
            "hcas",
        ),
        "identity-missing": (
            "nodes:\n  - {name: a, host: h, identity_file: no-such-key}\n",
            "identity file",
        ),
        "model-dirs-string-list": (
            "nodes:\n  - {name: a, host: h, model_dirs: [1, [2]]}\n",
            "model_dirs",
        ),
        "label-newline": ('nodes:\n  - {name: a, host: h, labels: {rack: "r1\\nr2"}}\n', "labels"),
        "labels-list": ("nodes:\n  - {name: a, host: h, labels: [a]}\n", "labels"),
        "engines-unknown": ("nodes:\n  - {name: a, host: h, engines: {tgi: {bin: x}}}\n", "tgi"),
        "mgmt-interface-shell": (
            "nodes:\n  - {name: a, host: h, mgmt_interface: 'eth0 $(id)'}\n",
            "mgmt_interface",
        ),
    }
    for value_name, value in {
        "zero": "0",
        "negative": "-22",
        "too-big": "65536",
        "string": "ssh",
        "float": "22.5",
        "nan": ".nan",
        "bool": "true",
        "huge": "99999999999999999999999",
    }.items():
        inventories[f"port-{value_name}"] = (
            f"nodes:\n  - {{name: a, host: h, port: {value}}}\n",
            "port",
        )
        inventories[f"default-port-{value_name}"] = (
            f"defaults: {{port: {value}}}\nnodes: [{node}]\n",
            "port",
        )
    for name, value in INJECTIONS.items():
        quoted = json.dumps(value)
        inventories[f"host-{name}"] = (f"nodes:\n  - {{name: a, host: {quoted}}}\n", "host")
        inventories[f"user-{name}"] = (
            f"nodes:\n  - {{name: a, host: h, user: {quoted}}}\n",
            "user",
        )
    for name in ("newline", "dash-option"):
        quoted = json.dumps(INJECTIONS[name])
        for key in ("work_dir", "replay"):
            inventories[f"{key}-{name}"] = (
                f"nodes:\n  - {{name: a, host: h, {key}: {quoted}}}\n",
                key,
            )
        inventories[f"model-dir-{name}"] = (
            f"nodes:\n  - {{name: a, host: h, model_dirs: [{quoted}]}}\n",
            "model_dirs",
        )
    # A Slurm cluster's entry (docs/slurm.md): each option one sentence naming its key.
    cluster = "clusters:\n  - {{name: hpc, slurm: {{login: hpc-login, partition: gpu, {}}}}}\n"
    inventories["slurm-no-partition"] = (
        "clusters:\n  - {name: hpc, slurm: {login: hpc-login}}\n",
        "partition` is required",
    )
    inventories["slurm-unknown-option"] = (cluster.format("qso: normal"), "unknown key 'qso'")
    inventories["slurm-time-limit-hours"] = (cluster.format("time_limit: 2h"), "time_limit")
    inventories["slurm-time-limit-zero"] = (cluster.format("time_limit: 0"), "time_limit")
    inventories["slurm-constraint-open"] = (
        cluster.format("constraint: '[h100|a100'"),
        "constraint",
    )
    inventories["slurm-gres-name-dash"] = (cluster.format("gres_name: -gpu"), "gres_name")
    inventories["slurm-cluster-named-as-node"] = (
        f"nodes: [{node}]\nclusters:\n  - {{name: a, slurm: {{login: l, partition: p}}}}\n",
        "a node and a cluster are both named 'a'",
    )
    for name in ("semicolon", "subshell", "dash-option", "newline", "pipe", "ampersand"):
        quoted = json.dumps(INJECTIONS[name])
        for key in ("login", "partition", "account", "qos", "reservation", "constraint"):
            options = {"login": "hpc-login", "partition": "gpu", key: quoted}
            body = ", ".join(f"{option}: {value}" for option, value in options.items())
            inventories[f"slurm-{key}-{name}"] = (
                f"clusters:\n  - {{name: hpc, slurm: {{{body}}}}}\n",
                key,
            )
    script = b"steps:\n  - nodes: {}\n"
    for name, (text, fragment) in inventories.items():
        body = text if isinstance(text, bytes) else text.encode()
        yield Case(
            f"inventory-{name}",
            "inventory",
            "run",
            2,
            fragment,
            files={"script.yaml": script, "inventory.yaml": body},
            inventory=True,
        )
    yield Case(
        "inventory-missing-file",
        "inventory",
        "run",
        2,
        "does not exist",
        files={"script.yaml": script},
        inventory=True,
    )


# --- models ------------------------------------------------------------------------------


def _configs() -> list[Path]:
    return sorted(MODELS.glob("*/config.json"))


def _gguf_bytes() -> bytes:
    # tests/support: pytest's `pythonpath` has it, `python tests/badinput/corpus.py` has not.
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
    import tempfile

    from header_ggufs import write_tiny_llama

    with tempfile.TemporaryDirectory() as folder:
        path = write_tiny_llama(Path(folder) / "tiny.gguf", vocab=64)
        return path.read_bytes()


_GGUF: list[bytes] = []


def gguf_bytes() -> bytes:
    """A tiny real llama GGUF (written with the `gguf` package), built once."""
    if not _GGUF:
        _GGUF.append(_gguf_bytes())
    return _GGUF[0]


def _gguf(mutate: Callable[[bytes], bytes]) -> Callable[[], bytes]:
    return lambda: mutate(gguf_bytes())


def _first_key_end(data: bytes) -> int:
    """Offset just past the first key's name (where its type u32 sits)."""
    (length,) = struct.unpack_from("<Q", data, 24)
    return 24 + 8 + length


def _patch_field(data: bytes, kind: str, value: int) -> bytes:
    """Overwrite the length of the first key's value of `kind` (an array's count, a string's size)."""
    import tempfile

    import gguf

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "read.gguf"
        path.write_bytes(data)
        fields = list(gguf.GGUFReader(str(path)).fields.values())
        spots = [(f.offset, f.name, f.types[0].name) for f in fields if f.types]
    for offset, name, kind_read in spots:
        if kind_read == kind and offset >= 24:
            # key length (8) + key + value type (4), then an array's item type (4)
            at = offset + 8 + len(name.encode()) + 4 + (4 if kind == "ARRAY" else 0)
            return data[:at] + struct.pack("<Q", value) + data[at + 8 :]
    raise AssertionError(f"the tiny GGUF has no {kind} value")


def model_cases() -> Iterator[Case]:
    plan = "plan: {model: ./model, context: 4096}"
    script = _script(plan)
    for config in _configs():
        repo = config.parent.name
        text = config.read_bytes()
        parsed: dict[str, Any] = json.loads(text)
        yield Case(
            f"model-{repo}-truncated",
            "model",
            "run",
            2,
            "config.json is not valid JSON",
            files={"script.yaml": script, "model/config.json": text[: len(text) // 2]},
        )
        shape = parsed.get("text_config") if isinstance(parsed.get("text_config"), dict) else parsed
        assert shape is not None
        for key, value, fragment in (
            ("num_attention_heads", 0, "num_attention_heads"),
            ("num_hidden_layers", -3, "num_hidden_layers"),
            ("hidden_size", "big", "hidden_size"),
            ("num_hidden_layers", 10**15, "num_hidden_layers"),
        ):
            if key not in shape:
                continue
            damaged = json.loads(text)
            target = damaged["text_config"] if shape is not parsed else damaged
            target[key] = value
            yield Case(
                f"model-{repo}-{key}-{value}",
                "model",
                "run",
                2,
                fragment,
                files={"script.yaml": script, "model/config.json": json.dumps(damaged).encode()},
            )
    llama = (MODELS / "meta-llama--Llama-3.1-8B-Instruct" / "config.json").read_text()
    base = json.loads(llama)

    def config_case(name: str, change: dict[str, Any], fragment: str) -> Case:
        damaged = {**base, **change}
        body = json.dumps(damaged, allow_nan=True).encode()
        return Case(
            f"model-llama-{name}",
            "model",
            "run",
            2,
            fragment,
            files={"script.yaml": script, "model/config.json": body},
        )

    yield config_case("kv-heads-zero", {"num_key_value_heads": 0}, "num_key_value_heads")
    yield config_case("kv-heads-non-dividing", {"num_key_value_heads": 5}, "num_key_value_heads")
    yield config_case("kv-heads-over-heads", {"num_key_value_heads": 64}, "num_key_value_heads")
    yield config_case(
        "heads-non-dividing", {"num_attention_heads": 7, "num_key_value_heads": 7}, "hidden_size"
    )
    yield config_case("vocab-nan", {"vocab_size": float("nan")}, "vocab_size")
    yield config_case("vocab-inf", {"vocab_size": float("inf")}, "vocab_size")
    yield config_case("hidden-negative", {"hidden_size": -4096}, "hidden_size")
    yield config_case("hidden-float", {"hidden_size": 4096.5}, "hidden_size")
    yield config_case(
        "context-negative", {"max_position_embeddings": -1}, "max_position_embeddings"
    )
    yield config_case("dtype-unknown", {"torch_dtype": "float7"}, "float7")
    yield config_case("head-dim-zero", {"head_dim": 0}, "head_dim")
    yield config_case("layers-list", {"num_hidden_layers": [32]}, "num_hidden_layers")
    yield config_case("experts-negative", {"num_local_experts": -8}, "num_local_experts")
    yield config_case("rope-not-object", {"rope_scaling": "yarn"}, "rope_scaling")
    for name, body, fragment in (
        ("config-empty", b"", "config.json is not valid JSON"),
        ("config-list", b"[1, 2]", "config.json is not a JSON object"),
        ("config-binary", bytes(range(256)), "config.json"),
        ("config-nested", b"[" * 100_000 + b"]" * 100_000, "config.json"),
        ("config-huge-number", b'{"num_hidden_layers": 1' + b"0" * 5000 + b"}", "config.json"),
    ):
        yield Case(
            f"model-{name}",
            "model",
            "run",
            2,
            fragment,
            files={"script.yaml": script, "model/config.json": body},
        )
    yield Case(
        "model-config-fifty-mb",
        "model",
        "run",
        2,
        "config.json",
        files={
            "script.yaml": script,
            "model/config.json": lambda: b'{"x": "' + b"a" * (50 * 1024 * 1024) + b'"}',
        },
    )
    yield Case(
        "model-config-symlink-loop",
        "model",
        "run",
        2,
        "config.json",
        files={"script.yaml": script, "model/weights.safetensors": b"x"},
        links={"model/config.json": "config.json"},
    )
    yield Case(
        "model-config-dangling",
        "model",
        "run",
        2,
        "config.json",
        files={"script.yaml": script, "model/weights.safetensors": b"x"},
        links={"model/config.json": "gone.json"},
    )
    yield Case(
        "model-dir-symlink-loop",
        "model",
        "run",
        2,
        "symlink loop",
        files={"script.yaml": script},
        links={"model": "model"},
    )
    yield Case(
        "model-config-is-directory",
        "model",
        "run",
        2,
        "config.json",
        files={"script.yaml": script, "model/config.json/x": b""},
    )
    yield Case(
        "model-config-fifo",
        "model",
        "run",
        2,
        "config.json",
        files={"script.yaml": script},
        fifos=("model/config.json",),
    )
    yield Case(
        "model-path-missing",
        "model",
        "run",
        2,
        "does not exist",
        files={"script.yaml": _script("plan: {model: ./nowhere/}")},
    )
    yield Case(
        "model-not-gguf-file",
        "model",
        "run",
        2,
        "not a .gguf",
        files={"script.yaml": _script("plan: {model: ./weights.bin}"), "weights.bin": b"x"},
    )
    yield Case(
        "model-dir-empty",
        "model",
        "run",
        2,
        "no config.json and no .gguf",
        files={"script.yaml": script, "model/README.md": b"hi"},
    )
    gguf_script = _script("plan: {model: ./m.gguf, context: 4096}")

    def gguf_case(name: str, mutate: Callable[[bytes], bytes], fragment: str) -> Case:
        return Case(
            f"model-gguf-{name}",
            "model",
            "run",
            2,
            fragment,
            files={"script.yaml": gguf_script, "m.gguf": _gguf(mutate)},
        )

    yield gguf_case("wrong-magic", lambda b: b"GGUX" + b[4:], "m.gguf")
    yield gguf_case(
        "safetensors-renamed", lambda b: b"\x08\x00\x00\x00\x00\x00\x00\x00{}", "m.gguf"
    )
    yield gguf_case("empty", lambda b: b"", "m.gguf")
    for cut in (3, 4, 8, 16, 24, 30, 40, 64, 200, 1000):
        yield gguf_case(f"truncated-at-{cut}", lambda b, c=cut: b[:c], "m.gguf")
    yield gguf_case("version-99", lambda b: b[:4] + struct.pack("<I", 99) + b[8:], "m.gguf")
    yield gguf_case("version-0", lambda b: b[:4] + struct.pack("<I", 0) + b[8:], "m.gguf")
    yield gguf_case(
        "tensor-count-absurd", lambda b: b[:8] + struct.pack("<Q", 2**62) + b[16:], "m.gguf"
    )
    yield gguf_case(
        "kv-count-absurd", lambda b: b[:16] + struct.pack("<Q", 2**62) + b[24:], "m.gguf"
    )
    yield gguf_case("kv-count-zero", lambda b: b[:16] + struct.pack("<Q", 0) + b[24:], "m.gguf")
    yield gguf_case(
        "key-length-absurd", lambda b: b[:24] + struct.pack("<Q", 2**60) + b[32:], "m.gguf"
    )
    yield gguf_case("array-count-absurd", lambda b: _patch_field(b, "ARRAY", 2**61), "m.gguf")
    yield gguf_case("string-length-absurd", lambda b: _patch_field(b, "STRING", 2**61), "m.gguf")
    yield gguf_case(
        "value-type-unknown",
        lambda b: b[: _first_key_end(b)] + struct.pack("<I", 77) + b[_first_key_end(b) + 4 :],
        "m.gguf",
    )
    yield Case(
        "model-gguf-is-fifo",
        "model",
        "run",
        2,
        "m.gguf",
        files={"script.yaml": gguf_script},
        fifos=("m.gguf",),
    )
    yield Case(
        "model-gguf-symlink-loop",
        "model",
        "run",
        2,
        "m.gguf",
        files={"script.yaml": gguf_script},
        links={"m.gguf": "m.gguf"},
    )


# --- the agent's protocol ---------------------------------------------------------------


def _request(op: str, args: Any, request_id: Any = None) -> bytes:
    """A request line; `corpus.py` gives each its own id (the `"$ID"` placeholder)."""
    return json.dumps({"id": request_id or "$ID", "op": op, "args": args}).encode()


def protocol_cases() -> Iterator[Case]:
    lines: dict[str, tuple[bytes | Callable[[], bytes], str, str]] = {
        "garbage": (b"hello there", "bad_json", "not JSON"),
        "binary": (bytes(range(1, 10)) + bytes(range(11, 256)), "bad_json", "not JSON"),
        "half-json": (b'{"id": 1, "op": "pi', "bad_json", "not JSON"),
        "nan": (b'{"id": 1, "op": "ping", "args": NaN}', "bad_args", "args must be"),
        "a-list": (b"[1, 2, 3]", "bad_request", "JSON object"),
        "a-string": (b'"ping"', "bad_request", "JSON object"),
        "a-number": (b"1e999", "bad_request", "JSON object"),
        "null": (b"null", "bad_request", "JSON object"),
        "no-id": (b'{"op": "ping"}', "bad_request", "id"),
        "id-bool": (b'{"id": true, "op": "ping"}', "bad_request", "id"),
        "id-float": (b'{"id": 1.5, "op": "ping"}', "bad_request", "id"),
        "id-object": (b'{"id": {}, "op": "ping"}', "bad_request", "id"),
        "op-number": (b'{"id": "x", "op": 7}', "bad_request", "op"),
        "op-missing": (b'{"id": "x"}', "bad_request", "op"),
        "op-unknown": (_request("rm", {}), "unknown_op", "unknown op"),
        "op-traversal": (_request("../shard.list", {}), "unknown_op", "unknown op"),
        "args-list": (_request("ping", [1]), "bad_args", "args must be"),
        "args-string": (_request("ping", "x"), "bad_args", "args must be"),
        "ten-mb-line": (
            lambda: b'{"id": "big", "op": "ping", "x": "' + b"a" * (10 * 1024 * 1024) + b'"}',
            "too_large",
            "limited to",
        ),
        "deep-list": (b"[" * 200_000 + b"]" * 200_000, "bad_json", "nested"),
        "deep-object": (
            b'{"id": "d", "op": "ping", "args": ' + b'{"a": ' * 100_000 + b"1" + b"}" * 100_001,
            "bad_json",
            "nested",
        ),
        "huge-number": (b'{"id": 1' + b"0" * 5000 + b', "op": "ping"}', "bad_json", "not JSON"),
        "invalid-utf8": (b'{"id": "\xff", "op": "ping"}', "bad_json", "not JSON"),
        "surrogate": (b'{"id": "\\ud800", "op": "nope"}', "unknown_op", "unknown op"),
    }
    typed = {
        "shard-stop-id-number": ("shard.stop", {"shard_id": 5}, "bad_args", "shard_id"),
        "shard-stop-timeout-string": (
            "shard.stop",
            {"shard_id": "x", "timeout_s": "soon"},
            "bad_args",
            "timeout_s",
        ),
        "shard-stop-timeout-negative": (
            "shard.stop",
            {"shard_id": "x", "timeout_s": -1},
            "bad_args",
            "timeout_s",
        ),
        "shard-stop-timeout-huge": (
            "shard.stop",
            {"shard_id": "x", "timeout_s": 1e308},
            "bad_args",
            "timeout_s",
        ),
        "shard-logs-tail-bool": ("shard.logs", {"shard_id": "x", "tail": True}, "bad_args", "tail"),
        "shard-logs-follow-string": (
            "shard.logs",
            {"shard_id": "x", "follow": "yes"},
            "bad_args",
            "follow",
        ),
        "shard-nccl-limit-zero": ("shard.nccl", {"shard_id": "x", "limit": 0}, "bad_args", "limit"),
        "shard-head-limit-zero": ("shard.head", {"shard_id": "x", "limit": 0}, "bad_args", "limit"),
        "shard-head-limit-huge": (
            "shard.head",
            {"shard_id": "x", "limit": 10**9},
            "bad_args",
            "limit",
        ),
        "port-free-start-zero": ("port.free", {"start": 0}, "bad_args", "start"),
        "port-free-start-huge": ("port.free", {"start": 10**30}, "bad_args", "start"),
        "port-free-count-huge": ("port.free", {"start": 8000, "count": 10**6}, "bad_args", "count"),
        "port-free-avoid-strings": (
            "port.free",
            {"start": 8000, "avoid": ["a"]},
            "bad_args",
            "avoid",
        ),
        "download-watch-path-number": ("download.watch", {"path": 5}, "bad_args", "path"),
        "download-watch-interval-zero": (
            "download.watch",
            {"path": "x", "interval_s": 0},
            "bad_args",
            "interval_s",
        ),
        "facts-model-dirs-string": ("facts", {"model_dirs": "/models"}, "bad_args", "model_dirs"),
        "facts-model-dirs-numbers": ("facts", {"model_dirs": [1, 2]}, "bad_args", "model_dirs"),
        "cancel-no-target": ("cancel", {}, "bad_args", "target"),
        "shard-start-empty": ("shard.start", {}, "bad_args", "replica"),
        "shard-start-rank-negative": (
            "shard.start",
            {"replica": "r", "rank": -1, "commands": []},
            "bad_args",
            "rank",
        ),
        "shard-start-argv-string": (
            "shard.start",
            {"replica": "r", "rank": 0, "commands": [{"argv": "sleep 1; id"}]},
            "bad_args",
            "argv",
        ),
        "shard-start-env-list": (
            "shard.start",
            {"replica": "r", "rank": 0, "commands": [{"argv": ["true"], "env": ["A=1"]}]},
            "bad_args",
            "env",
        ),
        "shard-start-gpus-ints": (
            "shard.start",
            {"replica": "r", "rank": 0, "gpus": [0], "commands": [{"argv": ["true"]}]},
            "bad_args",
            "gpus",
        ),
        "shard-start-port-huge": (
            "shard.start",
            {"replica": "r", "rank": 0, "commands": [{"argv": ["true"], "wait_for_port": 70000}]},
            "bad_args",
            "wait_for_port",
        ),
        "shard-start-health-file": (
            "shard.start",
            {
                "replica": "r",
                "rank": 0,
                "commands": [{"argv": ["true"]}],
                "health_url": "file:///etc/passwd",
            },
            "bad_args",
            "health_url",
        ),
    }
    for index, (name, value) in enumerate(sorted(INJECTIONS.items())):
        typed[f"fabric-client-address-{name}"] = (
            "fabric.client",
            {"method": "tcp", "server_address": value, "port": 18515},
            "bad_args",
            "server_address",
        )
        typed[f"fabric-server-device-{name}"] = (
            "fabric.server",
            {"device": value, "port": 18516 + index},
            "bad_args",
            "device",
        )
        typed[f"fabric-all-reduce-host-{name}"] = (
            "fabric.all_reduce",
            {"hosts": [value]},
            "bad_args",
            "hosts",
        )
    # A bare option: no space or `=` for a character check to catch, only the leading '-'.
    typed["fabric-client-address-bare-option"] = (
        "fabric.client",
        {"method": "tcp", "server_address": "-h", "port": 18530},
        "bad_args",
        "server_address",
    )
    typed["fabric-server-device-bare-option"] = (
        "fabric.server",
        {"device": "--help", "port": 18531},
        "bad_args",
        "device",
    )
    typed["fabric-all-reduce-host-bare-option"] = (
        "fabric.all_reduce",
        {"hosts": ["-h"]},
        "bad_args",
        "hosts",
    )
    for name, (op, args, code, fragment) in typed.items():
        lines[name] = (_request(op, args), code, fragment)
    traversals = ("../../etc", "/etc/passwd", "..", "a/../../b", "x\n", "x\x00y", "~root/.ssh")
    for index, shard_id in enumerate(traversals):
        for op in ("shard.stop", "shard.logs", "shard.nccl", "shard.head", "shard.forget"):
            lines[f"{op.replace('.', '-')}-traversal-{index}"] = (
                _request(op, {"shard_id": shard_id}),
                "not_found",
                "no shard",
            )
        lines[f"shard-start-id-traversal-{index}"] = (
            _request(
                "shard.start",
                {"replica": "r", "rank": 0, "shard_id": shard_id, "commands": [{"argv": ["true"]}]},
            ),
            "bad_args",
            "shard_id",
        )
    outside = ("/etc", "/etc/shadow", "/root/.ssh", "../../../../etc", "/", "~/.ssh", "/proc/self")
    for index, path in enumerate(outside):
        lines[f"download-watch-outside-{index}"] = (
            _request("download.watch", {"path": path}),
            "refused",
            "outside",
        )
        lines[f"facts-model-dir-traversal-{index}"] = (
            _request("facts", {"model_dirs": [f"/models/../{path}"]}),
            "bad_args",
            "model_dirs",
        )
        lines[f"shard-start-cwd-outside-{index}"] = (
            _request(
                "shard.start",
                {"replica": "r", "rank": 0, "commands": [{"argv": ["true"], "cwd": f"{path}/.."}]},
            ),
            "bad_args",
            "cwd",
        )
    for name, (line, code, fragment) in lines.items():
        yield Case(f"protocol-{name}", "protocol", "agent", code, fragment, line=line)


# --- captures -------------------------------------------------------------------------------


def _hardware(name: str) -> bytes:
    return (HARDWARE / name).read_bytes()


ENTITY_BOMB = (
    b'<?xml version="1.0"?>\n<!DOCTYPE nvidia_smi_log [\n <!ENTITY a "aaaaaaaaaa">\n'
    + b"".join(
        f' <!ENTITY {chr(98 + i)} "{("&" + chr(97 + i) + ";") * 10}">\n'.encode() for i in range(9)
    )
    + b"]>\n<nvidia_smi_log><driver_version>&j;</driver_version></nvidia_smi_log>\n"
)
EXTERNAL_ENTITY = (
    b'<?xml version="1.0"?>\n<!DOCTYPE nvidia_smi_log [<!ENTITY x SYSTEM "file:///etc/passwd">]>\n'
    b"<nvidia_smi_log><driver_version>&x;</driver_version></nvidia_smi_log>\n"
)


def capture_cases() -> Iterator[Case]:
    def case(name: str, files: dict[str, bytes | Callable[[], bytes]], fragment: str) -> Case:
        return Case(f"capture-{name}", "capture", "capture", 0, fragment, files=files)

    for xml in sorted(HARDWARE.glob("nvidia-smi-q-x_*.xml")):
        short = xml.stem.split("_", 1)[1]
        body = xml.read_bytes()
        for cut in (0.5, 0.9):
            yield case(
                f"smi-xml-{short}-truncated-{int(cut * 100)}",
                {"nvidia-smi-q-x.xml": body[: int(len(body) * cut)]},
                "nvidia-smi-q-x.xml",
            )
    yield case("smi-xml-entity-bomb", {"nvidia-smi-q-x.xml": ENTITY_BOMB}, "entities")
    yield case("smi-xml-external-entity", {"nvidia-smi-q-x.xml": EXTERNAL_ENTITY}, "entities")
    yield case("smi-xml-wrong-root", {"nvidia-smi-q-x.xml": b"<log><gpu/></log>"}, "nvidia_smi_log")
    yield case("smi-xml-binary", {"nvidia-smi-q-x.xml": bytes(range(256))}, "nvidia-smi-q-x.xml")
    yield case("smi-xml-empty", {"nvidia-smi-q-x.xml": b""}, "nvidia-smi")
    yield case(
        "smi-xml-absurd-memory",
        {
            "nvidia-smi-q-x.xml": b"<nvidia_smi_log><gpu id='0'><product_name>X</product_name>"
            b"<fb_memory_usage><total>99999999999999999999999 MiB</total></fb_memory_usage>"
            b"</gpu></nvidia_smi_log>"
        },
        "memory",
    )
    deep = b"<a>" * 50_000 + b"</a>" * 50_000
    yield case(  # a valid log without a <gpu>: read as no cards, not a crash
        "smi-xml-deep",
        {"nvidia-smi-q-x.xml": b"<nvidia_smi_log>" + deep + b"</nvidia_smi_log>"},
        "",
    )
    for topo in sorted(HARDWARE.glob("topo-m_*.txt")):
        short = topo.stem.split("_", 1)[1]
        body = topo.read_bytes()
        lines = body.splitlines(keepends=True)
        cut = b"".join(line[: len(line) // 2] + b"\n" for line in lines)
        # Named when the cut header loses columns its rows have; a cut that only
        # loses the affinity columns is read as far as it goes (docs/reliability.md).
        named = short.startswith(("dgx-a100", "h100-80gb", "l40s"))
        yield case(
            f"topo-{short}-rows-cut",
            {"nvidia-smi-topo-m.txt": cut},
            "nvidia-smi-topo-m.txt" if named else "",
        )
        yield case(
            f"topo-{short}-header-only",
            {"nvidia-smi-topo-m.txt": b"".join(lines[:1])},
            "nvidia-smi-topo-m.txt",
        )
    yield case("topo-binary", {"nvidia-smi-topo-m.txt": bytes(range(256))}, "nvidia-smi-topo-m.txt")
    yield case(
        "topo-ragged",
        {"nvidia-smi-topo-m.txt": b"\tGPU0\tGPU1\tGPU2\nGPU0\t X\nGPU1\tNV4\t X\tNV4\tSYS\tSYS\n"},
        "nvidia-smi-topo-m.txt",
    )
    yield case(  # one odd but whole matrix: read as it is
        "topo-huge-index", {"nvidia-smi-topo-m.txt": b"\tGPU99999999999\nGPU99999999999\t X\n"}, ""
    )
    for ibstat in sorted(HARDWARE.glob("ibstat_*.txt")):
        short = ibstat.stem.split("_", 1)[1]
        body = ibstat.read_bytes()
        # A cut capture is read as far as it goes: it must answer, not crash.
        yield case(f"ibstat-{short}-truncated", {"ibstat.txt": body[: len(body) // 3]}, "")
    yield case("ibstat-garbage", {"ibstat.txt": b"garbage\n\tRate: fast\n" * 4}, "ibstat.txt")
    yield case(  # a port number and rate that make no sense: read as an adapter without a rate
        "ibstat-odd-port", {"ibstat.txt": b"CA 'x'\n\tPort 99999999999999:\n\t\tRate: fast\n"}, ""
    )
    yield case("ibstat-binary", {"ibstat.txt": bytes(range(256))}, "ibstat.txt")
    yield case(
        "imex-garbage",
        {"nvidia-imex-ctl-N.txt": b"Nodes:\n  x: ???\n" * 3},
        "nvidia-imex-ctl-N.txt",
    )
    yield case("host-json-garbage", {"host.json": b"{not json"}, "host.json")
    yield case("host-json-list", {"host.json": b"[1]"}, "host.json")
    yield case("smi-list-garbage", {"nvidia-smi-L.txt": b"GPU x: (UUID: )\n" * 4}, "nvidia-smi")


# --- injection -------------------------------------------------------------------------------


def injection_cases() -> Iterator[Case]:
    for name, value in INJECTIONS.items():
        quoted = json.dumps(value)
        yield Case(
            f"injection-plan-model-{name}",
            "injection",
            "run",
            2,
            "model",
            files={"script.yaml": _script(f"plan: {{model: {quoted}}}")},
        )
        yield Case(
            f"injection-served-name-{name}",
            "injection",
            "run",
            2,
            "name",
            files={
                "script.yaml": _script(f"serve: {{model: {quoted}, name: {quoted}}}", fleet=False)
            },
        )
        yield Case(
            f"injection-env-key-{name}",
            "injection",
            "run",
            2,
            "--env refuses",
            files={
                "script.yaml": _script(
                    f"serve: {{model: catalog:meta-llama/Llama-3.1-8B-Instruct, env: {{{quoted}: '1'}}}}",
                    fleet=False,
                )
            },
        )
        yield Case(
            f"injection-gateway-name-{name}",
            "injection",
            "run",
            2,
            "name must start with a letter or digit",
            files={"script.yaml": _script(f"gateway: {{name: {quoted}}}", fleet=False)},
        )
        yield Case(
            f"injection-gateway-key-variable-{name}",
            "injection",
            "run",
            2,
            "api_key_env must be an environment variable's name",
            files={
                "script.yaml": _script(f"gateway: {{name: gw, api_key_env: {quoted}}}", fleet=False)
            },
        )
        for key in ("replay", "state_dir", "agent_path"):
            yield Case(
                f"injection-shell-{key}-{name}",
                "injection",
                "shell",
                0,
                value,
                shell={key: value},
            )
    for name in ("newline", "subshell"):
        quoted = json.dumps(INJECTIONS[name] if name == "newline" else "x\r" + INJECTIONS[name])
        yield Case(
            f"injection-env-value-{name}",
            "injection",
            "run",
            2,
            "--env refuses",
            files={
                "script.yaml": _script(
                    f"serve: {{model: catalog:meta-llama/Llama-3.1-8B-Instruct, env: {{NCCL_DEBUG: {quoted}}}}}",
                    fleet=False,
                )
            },
        )
    yield Case(
        "injection-env-secret",
        "injection",
        "run",
        2,
        "a secret never goes on a command line",
        files={
            "script.yaml": _script(
                f"serve: {{model: catalog:meta-llama/Llama-3.1-8B-Instruct, env: {{HF_TOKEN: {SECRET}}}}}",
                fleet=False,
            )
        },
    )


def cases() -> list[Case]:
    """Every case of the corpus, ids unique (the typed-reader family from `generate_typed`)."""
    from generate_typed import typed_capture_cases, written_number_cases

    every = [
        *script_cases(),
        *inventory_cases(),
        *model_cases(),
        *protocol_cases(),
        *capture_cases(),
        *injection_cases(),
        *typed_capture_cases(),
        *written_number_cases(),
    ]
    ids = [case.id for case in every]
    assert len(ids) == len(set(ids)), sorted({i for i in ids if ids.count(i) > 1})
    return every


def materialise(case: Case, folder: Path) -> Path:
    """Write a case's files, links and pipes under `folder`; returns the folder."""
    folder.mkdir(parents=True, exist_ok=True)
    for relative, content in case.files.items():
        path = folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content() if callable(content) else content)
    for relative, target in case.links.items():
        path = folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(target, path)
    for relative in case.fifos:
        path = folder / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        os.mkfifo(path)
    return folder


def main(argv: list[str]) -> int:
    """Write every case under the folder given (for reading them by hand)."""
    if len(argv) != 1:
        print("usage: generate.py OUT", file=sys.stderr)
        return 2
    out = Path(argv[0])
    for case in cases():
        materialise(case, out / case.id)
    print(f"{len(cases())} cases written under {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
