"""How each engine is given the key its clients must present, off its command line (pure).

Every engine takes `--api-key KEY`, and a flag is in `/proc/<pid>/cmdline`,
which every user of a shared node can read. So the key goes where each
engine reads it from its own environment (`/proc/<pid>/environ` is its
user's alone), and it reaches that environment as the shard's `secret_env`,
which the agent keeps off the node's disk:

| engine | how it gets the key |
|---|---|
| vLLM (and the sim engine standing in for it) | `VLLM_API_KEY`, which vLLM's `--api-key` defaults to |
| llama.cpp's `llama-server` | `LLAMA_API_KEY`, the variable `--api-key` is declared with |
| llama-cpp-python's server | `API_KEY`, its settings' own variable |
| SGLang | no variable: a shim runs `sglang.launch_server` in the same process with `--api-key` appended to `sys.argv` only (never to the process's argv) |

Each refuses a request without `Authorization: Bearer KEY` with 401. The
variables' names are the agent's (`llmgw_agent.engine_keys`): its sim engine
reads the key from the same one.
"""

from __future__ import annotations

from llmgw_agent.engine_keys import (
    LLAMA_CPP_PYTHON_KEY_VARIABLE,
    LLAMA_SERVER_KEY_VARIABLE,
    SHIM_KEY_VARIABLE,
    VLLM_KEY_VARIABLE,
)
from llmgw_core.engines.programs import LLAMA_CPP_PYTHON_MODULE, SGLANG_MODULE
from llmgw_core.engines.spec import LLAMA_CPP, SGLANG, SIM, VLLM, LaunchRequest
from llmgw_core.errors import BadInput

KEY_SHIM = (
    "import os, runpy, sys; "
    f"key = os.environ.pop({SHIM_KEY_VARIABLE!r}, ''); "
    "sys.argv = sys.argv[1:] + (['--api-key', key] if key else []); "
    "runpy.run_module(sys.argv[0], run_name='__main__', alter_sys=True)"
)
"""`python -c KEY_SHIM MODULE FLAGS…`: the module run as `python -m MODULE FLAGS… --api-key KEY`,
with the key in `sys.argv` inside the process and nowhere else."""


def _python_module(program: tuple[str, ...]) -> str | None:
    """`sglang.launch_server` for `(…/python3, -m, sglang.launch_server)`, else None."""
    if len(program) == 3 and program[1] == "-m" and program[0].rsplit("/", 1)[-1].startswith("py"):
        return program[2]
    return None


def key_variable(engine: str, program: tuple[str, ...]) -> str:
    """The variable `engine`, started as `program`, reads its client key from."""
    if engine in (VLLM, SIM):
        return VLLM_KEY_VARIABLE
    if engine == LLAMA_CPP:
        if _python_module(program) == LLAMA_CPP_PYTHON_MODULE:
            return LLAMA_CPP_PYTHON_KEY_VARIABLE
        return LLAMA_SERVER_KEY_VARIABLE
    return SHIM_KEY_VARIABLE


def key_env(request: LaunchRequest, program: tuple[str, ...]) -> dict[str, str]:
    """The shard's secret variables for the key (none when the replica has no key)."""
    if not request.api_key:
        return {}
    return {key_variable(request.engine, program): request.api_key}


def keyed_program(request: LaunchRequest, program: tuple[str, ...]) -> tuple[str, ...]:
    """The program to start: SGLang with a key runs through the shim; the others as they are.

    Raises:
        BadInput: SGLang with a key, started by something other than `python -m sglang…`:
            there is no way to give it the key but its command line.
    """
    if not request.api_key or request.engine != SGLANG:
        return program
    module = _python_module(program)
    if module is None:
        raise BadInput(
            f"SGLang on this node is started as {' '.join(program)!r}; with a key it must be "
            f"'python3 -m {SGLANG_MODULE}', so the key can be given without its command line",
            "name the node's SGLang Python in the inventory (engines: {sglang: {python: …}})",
        )
    return (program[0], "-c", KEY_SHIM, module)
