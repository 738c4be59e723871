"""Where each engine reads the key its clients must present, from its own environment.

The console puts the key there (`llmgw_core.engines.keys`: the shard's
`secret_env`, never its command line); the sim engine reads it from the same
variable as the engine it stands in for (`sim/engine/args.py`).
"""

from __future__ import annotations

VLLM_KEY_VARIABLE = "VLLM_API_KEY"
"""vLLM's: its `--api-key` defaults to it (the sim engine standing in for vLLM reads it too)."""
LLAMA_SERVER_KEY_VARIABLE = "LLAMA_API_KEY"
"""llama.cpp's `llama-server`: the variable its `--api-key` is declared with."""
LLAMA_CPP_PYTHON_KEY_VARIABLE = "API_KEY"
"""llama-cpp-python's server: its settings' own variable."""
SHIM_KEY_VARIABLE = "LLMGW_ENGINE_API_KEY"
"""Where the key waits for the console's SGLang shim (it takes it out of the environment at
once and appends `--api-key` to `sys.argv` only)."""

KEY_VARIABLES = {
    "vllm": (VLLM_KEY_VARIABLE,),
    "llama.cpp": (LLAMA_SERVER_KEY_VARIABLE, LLAMA_CPP_PYTHON_KEY_VARIABLE),
    "sglang": (SHIM_KEY_VARIABLE,),
}
"""Each engine kind's variables, by the agent's engine names (`sim/engine/args.KINDS`)."""
