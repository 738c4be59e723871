"""vLLM's start-up lines read into figures, in its GPU and its CPU wording."""

from __future__ import annotations

from llmgw_core.engines.startup_lines import figures_against_plan, startup_figures

CPU_LINES = [
    # vLLM 0.32.0+cpu on this kind of machine, the tiny Llama, VLLM_CPU_KVCACHE_SPACE=1.
    "(Worker pid=3826) INFO 12-04 20:39:47 [default_loader.py:501] Loading weights took 0.01"
    " seconds",
    "(Worker pid=3826) INFO 12-04 20:39:47 [cpu_worker.py:260] Explicitly set (1.0/23.54) GiB"
    " for KV cache on node 0.",
    "(EngineCore pid=3788) INFO 12-04 20:39:47 [kv_cache_utils.py:2327] CPU KV cache size:"
    " 524,288 tokens, Maximum concurrency for 512 tokens per request: 1024.00x",
    "(EngineCore pid=3788) INFO 12-04 20:39:50 [core.py:402] init engine (profile, create kv"
    " cache, warmup model) took 2.59 s",
]
GPU_LINES = [
    # The format strings of vLLM 0.32's gpu_model_runner, gpu_worker and kv_cache_utils.
    "(Worker_TP0 pid=11) INFO 12-04 10:00:01 [gpu_model_runner.py:5150] Model loading took"
    " 14.9889 GiB memory and 4.212345 seconds",
    "(Worker_TP1 pid=12) INFO 12-04 10:00:01 [gpu_model_runner.py:5150] Model loading took"
    " 14.9889 GiB memory and 4.3 seconds",
    "(Worker_TP0 pid=11) INFO 12-04 10:00:09 [gpu_worker.py:760] Available KV cache memory:"
    " 61.28 GiB",
    "(EngineCore pid=9) INFO 12-04 10:00:09 [kv_cache_utils.py:2327] GPU KV cache size:"
    " 1,003,984 tokens, Maximum concurrency for 32,768 tokens per request: 30.64x",
]


def test_the_cpu_wording_gives_the_cache_asked_for_its_tokens_and_concurrency():
    assert startup_figures(CPU_LINES) == {
        "weights_load_s": 0.01,
        "kv_cache_gib": 1.0,
        "kv_sized": "explicit",
        "numa_node_gib": 23.54,
        "kv_device": "CPU",
        "kv_tokens": 524_288,
        "kv_for_tokens": 512,
        "kv_concurrency": 1024.0,
        "init_s": 2.59,
    }


def test_the_gpu_wording_gives_the_first_ranks_weights_and_the_cache_it_found():
    figures = startup_figures(GPU_LINES)
    assert figures == {
        "weights_gib": 14.9889,
        "kv_cache_gib": 61.28,
        "kv_device": "GPU",
        "kv_tokens": 1_003_984,
        "kv_for_tokens": 32_768,
        "kv_concurrency": 30.64,
    }


def test_the_auto_sized_cpu_cache_is_told_apart_and_no_line_gives_nothing():
    auto = "INFO [cpu_worker.py:260] Auto set (20.13/23.54) GiB for KV cache on node 0, with"
    assert startup_figures([auto + " 21.19 GiB requested memory"])["kv_sized"] == "auto"
    assert startup_figures(["INFO: Started server process [1]", ""]) == {}


def test_a_cache_other_than_the_plan_fixed_is_said_and_on_cards_nothing_is():
    figures = startup_figures(CPU_LINES)
    assert figures_against_plan(figures, {"cpu_kv_cache_gib": 1, "kv_tokens": 524_288}) == []
    assert figures_against_plan(figures, {"cpu_kv_cache_gib": 2, "kv_tokens": 1_048_576}) == [
        "its KV cache is 1 GiB, and the plan asked for 2",
        "its KV cache holds 524,288 tokens, and the plan counted 1,048,576",
    ]
    assert figures_against_plan(startup_figures(GPU_LINES), {"kv_tokens": None}) == []
