"""The engine flags an operator may pass (`serve: {engine_args: …}`), as data, and their check (pure).

Each engine's table was read from its own `--help` and documentation at the
version `READ_FROM` names; `since` is the release that added a flag, where
it is younger than the versions llmgw supports, and `until` the release that
removed it (a node that runs that release or a later one is refused the flag,
named). `tests/unit/engines/test_vllm_help_real.py` holds vLLM's table and the
flags its launch writes to the installed vLLM's own `--help=all`. A flag is taken only if it
is in its engine's table, with a value of its type. Refused, each with one
sentence:

* a flag llmgw sets from the plan (`OWNED`: the port, the host, the
  parallel sizes, the context, the served name, the model, the key, the
  layers offloaded): changing it behind the plan would make the plan wrong;
* a flag that names a path or a secret (`--chat-template FILE`,
  `--api-key`): nothing from a document reaches a node's disk or argv;
* a flag that changes what a card holds but that the planner does not model
  yet (`swap_space`, `cpu_offload_gb` …): never behind its back.

The flags that change memory and that the plan does model are marked
`memory` and go into the plan (`plan_options`): vLLM's and SGLang's
`kv_cache_dtype`, llama.cpp's `cache_type_k`/`_v`, `flash_attn` and
`ubatch_size` (written by the launch from the plan, flash attention always
explicitly), each engine's share of a card, and vLLM's `enforce_eager` (no
CUDA graphs to hold).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from llmgw_core.errors import BadInput
from llmgw_core.memory.need import ENGINE_DEFAULTS, EngineOptions

READ_FROM = {
    "vllm": "0.11.0 (`vllm serve --help`, docs.vllm.ai), checked against 0.32.0's `--help=all`",
    "sglang": "0.5.3 (`python -m sglang.launch_server --help`), checked against 0.5.23's server_args",
    "llama.cpp": "b6500 (`llama-server --help`, tools/server/README.md), checked against"
    " llama.cpp 0c1e570 (2026-10-01, llama-cpp-python 0.3.36's) common/arg.cpp",
}
"""The engine release each table was read from."""

Kind = Literal["bool", "int", "float", "choice"]


@dataclass(frozen=True)
class Flag:
    """One flag an operator may pass.

    Attributes:
        kind: its value's type (`choice`: one of `choices`).
        choices: the values a `choice` takes.
        minimum, maximum: a number's range.
        default_on: a boolean on unless told (`false` is then written `--no-<flag>`).
        since: the engine release that added it, when newer than the oldest llmgw drives.
        until: the engine release that removed it (None: every release since has it).
        memory: it changes what a card holds (the plan takes it into account).
    """

    kind: Kind
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    maximum: float | None = None
    default_on: bool = False
    since: str | None = None
    until: str | None = None
    memory: bool = False


VLLM_TOOL_PARSERS = (
    "deepseek_v3", "deepseek_v31", "glm45", "granite", "granite-20b-fc", "hermes",
    "hunyuan_a13b", "internlm", "jamba", "kimi_k2", "llama3_json", "llama4_json",
    "llama4_pythonic", "mistral", "openai", "phi4_mini_json", "pythonic",
    "qwen3_coder", "qwen3_xml", "seed_oss", "step3", "xlam",
)  # fmt: skip
VLLM_REASONING_PARSERS = (
    "deepseek_r1", "deepseek_v3", "ernie45", "glm45", "gpt_oss", "granite",
    "hunyuan_a13b", "mistral", "qwen3", "seed_oss", "step3",
)  # fmt: skip
SGLANG_TOOL_PARSERS = (
    "deepseekv3", "deepseekv31", "glm45", "gpt-oss", "kimi_k2", "llama3", "mistral",
    "pythonic", "qwen", "qwen25", "qwen3_coder", "step3",
)  # fmt: skip
SGLANG_REASONING_PARSERS = (
    "deepseek-r1", "deepseek-v3", "glm45", "gpt-oss", "kimi", "qwen3", "qwen3-thinking", "step3",
)  # fmt: skip
LLAMA_CACHE_TYPES = ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")

FLAGS: dict[str, dict[str, Flag]] = {
    "vllm": {
        "enable_auto_tool_choice": Flag("bool"),
        "tool_call_parser": Flag("choice", VLLM_TOOL_PARSERS),
        "reasoning_parser": Flag("choice", VLLM_REASONING_PARSERS, since="0.8.0"),
        "kv_cache_dtype": Flag("choice", ("auto", "fp8", "fp8_e4m3", "fp8_e5m2"), memory=True),
        "enable_prefix_caching": Flag("bool", default_on=True),
        "enable_chunked_prefill": Flag("bool", default_on=True),
        "gpu_memory_utilization": Flag("float", minimum=0.05, maximum=1.0, memory=True),
        "enforce_eager": Flag("bool", memory=True),
        "max_num_batched_tokens": Flag("int", minimum=1, maximum=1_048_576, memory=True),
        "seed": Flag("int", minimum=0, maximum=2**32 - 1),
        "max_logprobs": Flag("int", minimum=0, maximum=100_000),
        "disable_log_requests": Flag("bool", until="0.12.0"),  # vllm-project/vllm#29402
        "enable_log_requests": Flag("bool"),  # off by default since #21739 (in 0.11)
        "enable_log_outputs": Flag("bool", since="0.10.0"),
    },
    "sglang": {
        "tool_call_parser": Flag("choice", SGLANG_TOOL_PARSERS),
        "reasoning_parser": Flag("choice", SGLANG_REASONING_PARSERS),
        "kv_cache_dtype": Flag("choice", ("auto", "fp8_e5m2", "fp8_e4m3"), memory=True),
        "disable_radix_cache": Flag("bool"),
        "chunked_prefill_size": Flag("int", minimum=-1, maximum=1_048_576),
        "mem_fraction_static": Flag("float", minimum=0.05, maximum=1.0, memory=True),
        "random_seed": Flag("int", minimum=0, maximum=2**32 - 1),
        "enable_metrics": Flag("bool"),
    },
    "llama.cpp": {
        # On by default in newer builds, so false is written --no-jinja.
        "jinja": Flag("bool", default_on=True),
        "reasoning_format": Flag("choice", ("none", "deepseek", "deepseek-legacy", "auto")),
        "cache_type_k": Flag("choice", LLAMA_CACHE_TYPES, memory=True),
        "cache_type_v": Flag("choice", LLAMA_CACHE_TYPES, memory=True),
        "threads": Flag("int", minimum=1, maximum=4096),
        "seed": Flag("int", minimum=-1, maximum=2**32 - 1),
        "cont_batching": Flag("bool", default_on=True),
        "flash_attn": Flag("bool", default_on=True, memory=True),
        "ubatch_size": Flag("int", minimum=1, maximum=2048, memory=True),
        # `repack: false` (`--no-repack`) keeps every matrix in the mapped file: the plan then
        # counts copies the CPU does not make (more than it holds, never less). llama.cpp
        # 0c1e570 aborts loading MLA models on AMX CPUs without it (docs/memory-rules.md).
        "repack": Flag("bool", default_on=True),
    },
}
"""Per engine, the flags an operator may pass, in the engine's own spelling (`_` for `-`)."""

OWNED = {
    "port": "the port", "host": "the address it listens on",
    "tensor_parallel_size": "the plan's layout", "pipeline_parallel_size": "the plan's layout",
    "data_parallel_size": "the plan's layout", "tp_size": "the plan's layout",
    "pp_size": "the plan's layout", "nnodes": "the plan's layout", "node_rank": "the placement",
    "max_model_len": "`context:`", "context_length": "`context:`", "ctx_size": "`context:`",
    "served_model_name": "the model's name", "alias": "the model's name",
    "model": "`model:`", "model_path": "`model:`", "quantization": "the plan's artifact",
    "dtype": "the plan", "max_num_seqs": "`concurrency:`", "max_running_requests": "`concurrency:`",
    "parallel": "`concurrency:`", "n_gpu_layers": "the plan", "split_mode": "the plan",
    "api_key": "`api_key_env:`", "metrics": "llmgw (a roll reads it)",
    "distributed_executor_backend": "the plan", "headless": "the placement",
    "enable_lora": "`adapters:`", "lora_modules": "`adapters:`", "lora_paths": "`adapters:`",
    "lora": "`adapters:`", "lora_scaled": "`adapters:`", "max_loras": "`max_loras:`",
    "max_loras_per_batch": "`max_loras:`", "max_lora_rank": "`max_lora_rank:`",
    "max_cpu_loras": "`max_loras:`",
}  # fmt: skip
"""Flags llmgw sets from the plan, and what sets each."""

NOT_PLANNED = {"swap_space", "cpu_offload_gb",
               "batch_size", "disable_cuda_graph", "cuda_graph_max_bs"}  # fmt: skip
"""Flags that change what a card holds and that the planner does not model yet."""

_PATHY = ("path", "file", "dir", "template", "download", "config", "lora", "adapter")
_SECRET = ("key", "token", "secret", "password", "credential")

ENGINE_NAMES = {"vllm": "vLLM", "sglang": "SGLang", "llama.cpp": "llama.cpp"}


def flag_name(name: str) -> str:
    """The flag as typed on a command line: `--enable-prefix-caching`."""
    return "--" + name.replace("_", "-")


_WORDS = {"on": True, "off": False, "true": True, "false": False}
"""A boolean as typed in the wizard's field (`flash_attn=on`, llama-server's own spelling)."""


def _value(engine: str, name: str, flag: Flag, value: Any) -> str | bool:
    """`value` as the flag takes it (text, or a boolean), or BadInput naming what it must be."""
    shown = f"engine_args: {name}"
    if flag.kind == "bool":
        if isinstance(value, str) and value.lower() in _WORDS:
            return _WORDS[value.lower()]
        if not isinstance(value, bool):
            raise BadInput(f"{shown} must be true or false, not {value!r}")
        return value
    if isinstance(value, bool):
        raise BadInput(f"{shown} is {str(value).lower()}, not a {flag.kind}")
    if flag.kind == "choice":
        if str(value) not in flag.choices:
            raise BadInput(
                f"{shown} is {value!r}, which {ENGINE_NAMES[engine]} does not take",
                f"it takes {', '.join(flag.choices)}",
            )
        return str(value)
    try:
        number = int(value) if flag.kind == "int" else float(value)
    except (TypeError, ValueError):
        raise BadInput(
            f"{shown} must be a{'n integer' if flag.kind == 'int' else ' number'}, not {value!r}"
        ) from None
    if flag.kind == "int" and isinstance(value, float) and not value.is_integer():
        raise BadInput(f"{shown} must be an integer, not {value!r}")
    low = flag.minimum if flag.minimum is not None else float("-inf")
    high = flag.maximum if flag.maximum is not None else float("inf")
    if not low <= number <= high:
        raise BadInput(f"{shown} is {value!r}, outside {flag.minimum:g} to {flag.maximum:g}")
    return str(number)


def checked_engine_args(engine: str, given: Mapping[str, Any]) -> dict[str, str | bool]:
    """The operator's flags for `engine`, each known, of its type and not llmgw's own.

    Raises:
        BadInput: the first flag refused, in one sentence (nothing has started).
    """
    table = FLAGS.get(engine)
    if table is None:
        raise BadInput(f"engine_args: {engine} takes no flags of the operator's")
    checked: dict[str, str | bool] = {}
    for raw_name, value in given.items():
        name = str(raw_name).removeprefix("--").replace("-", "_")
        if name in OWNED:
            raise BadInput(
                f"engine_args: {name} is llmgw's to set ({OWNED[name]} decides it)",
                "leave it out",
            )
        if name in NOT_PLANNED:
            raise BadInput(
                f"engine_args: {name} changes what a card holds and the planner does not "
                "model it yet, so it is not passed behind the plan's back"
            )
        if any(word in name for word in _SECRET) and name not in table:
            raise BadInput(
                f"engine_args: {name} would carry a secret on a command line",
                "a key is given by `api_key_env:`",
            )
        if any(word in name for word in _PATHY) and name not in table:
            raise BadInput(
                f"engine_args: {name} names a file or folder on the nodes, which "
                "llmgw does not send"
            )
        flag = table.get(name)
        if flag is None:
            raise BadInput(
                f"engine_args: {name} is not a flag llmgw knows {ENGINE_NAMES[engine]} to take "
                f"(read from {READ_FROM[engine]})",
                f"it takes {', '.join(sorted(table))}",
            )
        checked[name] = _value(engine, name, flag, value)
    if engine == "llama.cpp" and checked.get("flash_attn") is False:
        from llmgw_core.memory.llamacpp import quantised_kv

        quantised = [
            f"{name}={checked[name]}"
            for name in ("cache_type_k", "cache_type_v")
            if quantised_kv(str(checked.get(name, "f16")))
        ]
        if quantised:
            raise BadInput(
                f"engine_args: {quantised[0]} needs flash attention, and flash_attn is false "
                "(llama.cpp refuses a quantised cache without it)",
                "drop flash_attn: false, or keep the cache f16",
            )
    return checked


def release_key(version: str) -> tuple[int, ...]:
    """A release as numbers that order as releases do: `0.12.0` → (0, 12, 0), `b6500` → (6500,)."""
    digits = []
    for part in version.lstrip("bv").split("."):
        number = "".join(c for c in part if c.isdigit())
        digits.append(int(number) if number else 0)
    return tuple(digits)


def release_refusal(engine: str, args: Mapping[str, Any], installed: str | None) -> str | None:
    """A sentence for the first flag the `installed` release lacks: younger than it, or removed
    by then (None: it has them all, or the release is unknown)."""
    if not installed:
        return None
    for name in args:
        flag = FLAGS.get(engine, {}).get(name, Flag("bool"))
        if flag.since and release_key(installed) < release_key(flag.since):
            return (
                f"engine_args: {name} needs {ENGINE_NAMES[engine]} {flag.since} or newer, "
                f"and the node has {installed}"
            )
        if flag.until and release_key(installed) >= release_key(flag.until):
            return (
                f"engine_args: {name} is gone from {ENGINE_NAMES[engine]} {flag.until} on, "
                f"and the node has {installed}"
            )
    return None


PLANNED_FLAGS = ("gpu_memory_utilization", "mem_fraction_static", "flash_attn", "ubatch_size")
"""Flags the plan sizes with and the builders write from the way (never twice)."""


def argv_of(engine: str, args: Mapping[str, str | bool]) -> list[str]:
    """The flags as the engine's command line takes them, in the order given (a card's share
    is the way's, written by the builder)."""
    argv: list[str] = []
    for name, value in args.items():
        if name in PLANNED_FLAGS:
            continue
        flag = FLAGS[engine][name]
        if value is True:
            argv.append(flag_name(name))
        elif value is False:
            if flag.default_on:
                argv.append("--no-" + name.replace("_", "-"))
        else:
            argv += [flag_name(name), str(value)]
    return argv


_CACHE_BITS = {"f32": 32, "f16": 16, "bf16": 16, "q8_0": 8.5, "q5_1": 6, "q5_0": 5.5,
               "q4_1": 5, "q4_0": 4.5, "iq4_nl": 4.5}  # fmt: skip


def _wider(k: str, v: str) -> str:
    """Of llama.cpp's K and V cache types, the one with more bits a value: the plan sizes both
    halves with one type, so it takes the wider (a plan that is never short)."""
    return k if _CACHE_BITS.get(k, 16) >= _CACHE_BITS.get(v, 16) else v


def plan_options(engine: str | None, args: Mapping[str, Any]) -> dict[str, Any]:
    """What the plan must size with: `kv_cache_dtype` and `gpu_memory_utilization`, when set."""
    found: dict[str, Any] = {}
    kv = args.get("kv_cache_dtype")
    if engine == "llama.cpp" or "cache_type_k" in args or "cache_type_v" in args:
        kv = _wider(str(args.get("cache_type_k") or "f16"), str(args.get("cache_type_v") or "f16"))
        kv = None if kv == "f16" else kv
    if kv and kv != "auto":
        found["kv_cache_dtype"] = str(kv)
    share = args.get("gpu_memory_utilization") or args.get("mem_fraction_static")
    if share:
        found["gpu_memory_utilization"] = float(share)
    if args.get("enforce_eager") is True:
        found["enforce_eager"] = True
    if {"flash_attn", "ubatch_size", "max_num_batched_tokens"} & set(args):
        found["engine_options"] = engine_options_of(args)
    return found


def engine_options_of(args: Mapping[str, Any]) -> EngineOptions:
    """The memory flags as the launch writes them: llama.cpp's flash attention (on unless told)
    and micro-batch (512), vLLM's batched tokens (its default)."""
    batched = args.get("max_num_batched_tokens")
    return EngineOptions(
        flash_attn=args.get("flash_attn", True) is not False,
        n_ubatch=int(args.get("ubatch_size") or ENGINE_DEFAULTS.n_ubatch),
        max_num_batched_tokens=int(batched) if batched else None,
    )


def shown_flags(args: Mapping[str, Any]) -> str:
    """`NAME=VALUE …` as an operator types them (`flash_attn=false`, not Python's `False`)."""
    return " ".join(
        f"{name}={str(value).lower() if isinstance(value, bool) else value}"
        for name, value in args.items()
    )


def sized_flags(engine: str, options: EngineOptions) -> dict[str, str | bool]:
    """The engine_args that give `options` back (the plan's command shows what it sized)."""
    found: dict[str, str | bool] = {}
    if engine == "llama.cpp":
        if not options.flash_attn:
            found["flash_attn"] = False
        if options.n_ubatch != ENGINE_DEFAULTS.n_ubatch:
            found["ubatch_size"] = str(options.n_ubatch)
    elif engine == "vllm" and options.max_num_batched_tokens:
        found["max_num_batched_tokens"] = str(options.max_num_batched_tokens)
    return found


COMMON = {
    "vllm": "enable_auto_tool_choice=true tool_call_parser=hermes reasoning_parser=qwen3 "
    "kv_cache_dtype=fp8 enable_prefix_caching=true",
    "sglang": "tool_call_parser=qwen25 reasoning_parser=qwen3 kv_cache_dtype=fp8_e5m2",
    "llama.cpp": "jinja=true reasoning_format=deepseek cache_type_k=q8_0 cache_type_v=q8_0",
}
"""What the wizard offers first for each engine: tool calling, reasoning, the KV cache."""


def parse_engine_args(text: str) -> dict[str, str | int | float | bool]:
    """`NAME=VALUE …` as typed (the wizard's field): `true`/`false` are booleans, numbers are
    numbers, anything else is text.

    Raises:
        BadInput: an entry without `=` or without a name.
    """
    found: dict[str, str | int | float | bool] = {}
    for entry in text.replace(",", " ").split():
        name, equals, value = entry.partition("=")
        if not equals or not name:
            raise BadInput(f"engine flags: {entry[:40]!r} is not NAME=VALUE")
        lowered = value.lower()
        if lowered in ("true", "false"):
            found[name] = lowered == "true"
            continue
        try:
            found[name] = int(value)
        except ValueError:
            try:
                found[name] = float(value)
            except ValueError:
                found[name] = value
    return found
