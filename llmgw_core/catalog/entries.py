"""The models shipped with llmgw, each under its Hub id, with where its figures come from.

Every model of the project's metadata fixtures is here, plus those the
product's examples plan. Byte totals are the published ones (a safetensors
index's `total_size`, a repository listing's file sizes, llama.cpp's printed
file size); where none is published the entry leaves it to the model package
to count from the architecture, and says so.
"""

from __future__ import annotations

from llmgw_core.catalog.facts import (
    BLOCK_FP8,
    CatalogModel,
    deepseek_v3,
    gguf_bytes,
    gpt_oss,
    llama,
    mistral,
    mixtral_8x7b,
    qwen2,
    qwen3_dense,
    qwen3_moe,
)

COUNTED = "no byte total published: the weights are counted from the architecture"

_LLAMA_70B = llama(80, 8192, 64, 8, 28672)
_LLAMA_8B = llama(32, 4096, 32, 8, 14336)
_QWEN25_14B = qwen2(48, 5120, 40, 8, 13824, max_position=32768, max_window_layers=48)
_MISTRAL_7B_V02 = mistral(vocab=32000, max_position=32768, sliding_window=None, rope_theta=1e6)
# Starling-LM-7B-beta is tuned from openchat-3.5-0106 (Mistral 7B v0.1): 8k context,
# a 4096-token window and two added tokens.
_STARLING_7B = mistral(vocab=32002, max_position=8192, sliding_window=4096, rope_theta=10000.0)

_GEMMA3_27B = {
    "architectures": ["Gemma3ForConditionalGeneration"],
    "model_type": "gemma3",
    "torch_dtype": "bfloat16",
    # Only the values that differ from Gemma3TextConfig's defaults, as the Hub file has it.
    "text_config": {
        "model_type": "gemma3_text",
        "num_hidden_layers": 62,
        "hidden_size": 5376,
        "intermediate_size": 21504,
        "num_attention_heads": 32,
        "num_key_value_heads": 16,
        "head_dim": 128,
        "query_pre_attn_scalar": 168,
        "sliding_window": 1024,
        "rope_scaling": {"rope_type": "linear", "factor": 8.0},
    },
    "vision_config": {
        "model_type": "siglip_vision_model",
        "hidden_size": 1152,
        "intermediate_size": 4304,
        "num_attention_heads": 16,
        "num_hidden_layers": 27,
        "image_size": 896,
        "patch_size": 14,
    },
}

_MEDGEMMA_27B = {
    **_GEMMA3_27B,
    # The same network written out in full by a newer transformers: every 6th layer global.
    "text_config": {
        **_GEMMA3_27B["text_config"],
        "vocab_size": 262208,
        "max_position_embeddings": 131072,
        "rope_theta": 1000000,
        "rope_local_base_freq": 10000,
        "rms_norm_eps": 1e-06,
        "attention_bias": False,
        "torch_dtype": "bfloat16",
        "layer_types": [
            "full_attention" if (i + 1) % 6 == 0 else "sliding_attention" for i in range(62)
        ],
    },
}

# As the published file has it: a partial `text_config` (no vision part, no per-layer lists).
_LLAMA4_SCOUT = {
    "architectures": ["Llama4ForConditionalGeneration"],
    "model_type": "llama4",
    "torch_dtype": "bfloat16",
    "text_config": {
        "model_type": "llama4_text",
        "num_hidden_layers": 48,
        "hidden_size": 5120,
        "num_attention_heads": 40,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "intermediate_size": 8192,
        "intermediate_size_mlp": 16384,
        "num_local_experts": 16,
        "num_experts_per_tok": 1,
        "interleave_moe_layer_step": 1,
        "attention_chunk_size": 8192,
        "attention_bias": False,
        "use_qk_norm": True,
        "vocab_size": 202048,
        "max_position_embeddings": 10485760,
        "rope_theta": 500000.0,
        "rope_scaling": {
            "rope_type": "llama3",
            "factor": 16.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 1.0,
            "original_max_position_embeddings": 8192,
        },
        "rms_norm_eps": 1e-05,
        "torch_dtype": "bfloat16",
    },
}

_KIMI_K25 = {
    "architectures": ["KimiK25ForConditionalGeneration"],
    "model_type": "kimi_k25",
    "dtype": "bfloat16",
    "tie_word_embeddings": False,
    "text_config": {
        **deepseek_v3(),
        "model_type": "kimi_k2",
        "num_attention_heads": 64,
        "num_key_value_heads": 64,
        "n_routed_experts": 384,
        "first_k_dense_replace": 1,
        "n_group": 1,
        "topk_group": 1,
        "num_nextn_predict_layers": 0,
        "vocab_size": 163840,
        "max_position_embeddings": 262144,
        "rope_theta": 50000.0,
        "rope_scaling": {
            "type": "yarn",
            "factor": 64.0,
            "original_max_position_embeddings": 4096,
            "beta_fast": 32.0,
            "beta_slow": 1.0,
            "mscale": 1.0,
            "mscale_all_dim": 1.0,
        },
        "rms_norm_eps": 1e-05,
        "dtype": "bfloat16",
        # INT4 experts in groups of 32; attention, shared experts and dense MLPs stay 16-bit.
        "quantization_config": {
            "quant_method": "compressed-tensors",
            "format": "pack-quantized",
            "quantization_status": "compressed",
            "config_groups": {
                "group_0": {
                    "targets": ["Linear"],
                    "input_activations": None,
                    "weights": {
                        "type": "int",
                        "num_bits": 4,
                        "group_size": 32,
                        "strategy": "group",
                        "symmetric": True,
                        "dynamic": False,
                    },
                }
            },
            "ignore": [
                "lm_head",
                "re:.*self_attn.*",
                "re:.*shared_experts.*",
                "re:.*mlp\\.(gate|up|gate_up|down)_proj.*",
            ],
            "kv_cache_scheme": None,
        },
    },
}
_KIMI_K25["text_config"].pop("torch_dtype")


CATALOG: tuple[CatalogModel, ...] = (
    # --- Llama ---------------------------------------------------------------------
    CatalogModel(
        "meta-llama/Llama-3.3-70B-Instruct",
        _LLAMA_70B,
        safetensors_bytes=141_107_412_992,
        safetensors_shards=30,
        parameters=70_553_706_496,
        source="config.json; bytes of the 30-shard index (total_size), as 3.1-70B's",
    ),
    CatalogModel(
        "meta-llama/Llama-3.1-70B-Instruct",
        _LLAMA_70B,
        safetensors_bytes=141_107_412_992,
        safetensors_shards=30,
        parameters=70_553_706_496,
        source="config.json and the safetensors index (total_size)",
    ),
    CatalogModel(
        "meta-llama/Llama-3.1-8B-Instruct",
        _LLAMA_8B,
        safetensors_bytes=16_060_522_496,
        safetensors_shards=4,
        source="config.json and the safetensors index (total_size)",
    ),
    CatalogModel(
        "meta-llama/Meta-Llama-3.1-405B",
        llama(126, 16384, 128, 8, 53248),
        source=f"config.json of the base model; {COUNTED}",
    ),
    CatalogModel(
        "mattshumer/Reflection-Llama-3.1-70B",
        llama(
            80,
            8192,
            64,
            8,
            28672,
            vocab=128262,
            max_position=8192,
            rope_scaling=None,
            dtype="float32",
        ),
        safetensors_bytes=282_215_219_200,
        safetensors_shards=162,
        source="config.json (float32, 8k context) and the 162-shard index (total_size)",
    ),
    CatalogModel(
        "nvidia/Llama-3.1-70B-Instruct-FP8",
        _LLAMA_70B,
        extra_files={
            "hf_quant_config.json": {
                "producer": {"name": "modelopt"},
                "quantization": {
                    "quant_algo": "FP8",
                    "kv_cache_quant_algo": "FP8",
                    "exclude_modules": ["lm_head"],
                },
            }
        },
        source=f"config.json and hf_quant_config.json (ModelOpt FP8, FP8 KV); {COUNTED}",
    ),
    CatalogModel(
        "TheBloke/Genz-70b-GPTQ",
        {
            **llama(
                80,
                8192,
                64,
                8,
                28672,
                vocab=32000,
                max_position=4096,
                rope_scaling=None,
                rope_theta=10000.0,
            ),
            "quantization_config": {
                "quant_method": "gptq",
                "bits": 4,
                "group_size": 128,
                "desc_act": True,
                "sym": True,
            },
        },
        safetensors_bytes=36_652_345_792,
        extra_files={
            "quantize_config.json": {"bits": 4, "group_size": 128, "desc_act": True, "sym": True}
        },
        source="config.json (Llama 2 70B, GPTQ 4-bit g128) and the size of its one model.safetensors",
    ),
    CatalogModel(
        "lmstudio-community/Meta-Llama-3.1-8B-Instruct-GGUF",
        _LLAMA_8B,
        gguf_files={"Meta-Llama-3.1-8B-Instruct-Q4_K_M.gguf": 4_920_739_168},
        source="Llama-3.1-8B-Instruct's config; the Q4_K_M file's bytes as LM Studio's catalog lists it",
    ),
    CatalogModel(
        "meta-llama/Llama-4-Scout-17B-16E-Instruct",
        _LLAMA4_SCOUT,
        source=f"text part of config.json (vision tower not counted); {COUNTED}",
    ),
    # --- Mistral -------------------------------------------------------------------
    CatalogModel(
        "mistralai/Mixtral-8x7B-Instruct-v0.1",
        mixtral_8x7b(),
        safetensors_bytes=93_405_585_408,
        safetensors_shards=19,
        source="config.json and the 19-shard index (total_size; the consolidated *.pt copies not counted)",
    ),
    CatalogModel(
        "TheBloke/Mixtral-8x7B-Instruct-v0.1-GGUF",
        mixtral_8x7b(),
        gguf_files={"mixtral-8x7b-instruct-v0.1.Q2_K.gguf": 15_644_035_008},
        source="Mixtral-8x7B-Instruct's config; the Q2_K file's bytes from the Hub's listing (other files unpublished)",
    ),
    CatalogModel(
        "TheBloke/Mistral-7B-Instruct-v0.2-GGUF",
        _MISTRAL_7B_V02,
        gguf_files={
            "mistral-7b-instruct-v0.2.Q2_K.gguf": 3_083_098_400,
            "mistral-7b-instruct-v0.2.Q3_K_S.gguf": 3_164_567_840,
            "mistral-7b-instruct-v0.2.Q3_K_M.gguf": 3_518_986_528,
            "mistral-7b-instruct-v0.2.Q3_K_L.gguf": 3_822_024_992,
            "mistral-7b-instruct-v0.2.Q4_0.gguf": 4_108_917_024,
            "mistral-7b-instruct-v0.2.Q4_K_S.gguf": 4_140_374_304,
            "mistral-7b-instruct-v0.2.Q4_K_M.gguf": 4_368_439_584,
            "mistral-7b-instruct-v0.2.Q5_0.gguf": 4_997_716_256,
            "mistral-7b-instruct-v0.2.Q5_K_S.gguf": 4_997_716_256,
            "mistral-7b-instruct-v0.2.Q5_K_M.gguf": 5_131_409_696,
            "mistral-7b-instruct-v0.2.Q6_K.gguf": 5_942_065_440,
            "mistral-7b-instruct-v0.2.Q8_0.gguf": 7_695_857_952,
        },
        source="Mistral-7B-Instruct-v0.2's published shape (32k, rope 1e6, no window); every file's bytes from the repository",
    ),
    CatalogModel(
        "bartowski/Starling-LM-7B-beta-GGUF",
        _STARLING_7B,
        gguf_files={"Starling-LM-7B-beta-IQ4_XS.gguf": 3_944_399_776},
        source="Mistral 7B v0.1 shape of its base; the IQ4_XS file's bytes as LM Studio's catalog lists it",
    ),
    # --- Qwen ----------------------------------------------------------------------
    CatalogModel(
        "Qwen/Qwen1.5-7B-Chat-GGUF",
        qwen2(
            32,
            4096,
            32,
            32,
            11008,
            vocab=151936,
            max_position=32768,
            max_window_layers=28,
            sliding_window=32768,
        ),
        gguf_files={"qwen1_5-7b-chat-q5_k_m.gguf": 5_530_664_160},
        source="Qwen1.5-7B-Chat's published shape (no GQA); the q5_k_m file's bytes as LM Studio's catalog lists it",
    ),
    CatalogModel(
        "Qwen/Qwen2.5-7B-Instruct",
        qwen2(28, 3584, 28, 4, 18944, max_position=32768, max_window_layers=28),
        source=f"config.json; {COUNTED}",
    ),
    CatalogModel(
        "Qwen/Qwen2.5-14B-Instruct",
        _QWEN25_14B,
        source=f"published shape (48 x 5120, 40/8 heads); {COUNTED} (14.77 B parameters)",
    ),
    CatalogModel(
        "Qwen/Qwen2.5-14B-Instruct-GGUF",
        _QWEN25_14B,
        parameters=14_770_033_664,
        gguf_files={
            "qwen2.5-14b-instruct-q2_k.gguf": gguf_bytes(5.37),
            "qwen2.5-14b-instruct-q3_k_m.gguf": gguf_bytes(6.83),
            # llama.cpp reports 8.37 GiB (4.87 BPW) and 14.62 GiB for these two.
            "qwen2.5-14b-instruct-q4_k_m.gguf": gguf_bytes(8.37),
            "qwen2.5-14b-instruct-q5_k_m.gguf": gguf_bytes(9.78),
            "qwen2.5-14b-instruct-q6_k.gguf": gguf_bytes(11.29),
            "qwen2.5-14b-instruct-q8_0.gguf": gguf_bytes(14.62),
            "qwen2.5-14b-instruct-f16.gguf": gguf_bytes(27.51),
        },
        source="published file sizes in GiB (Q4_K_M and Q8_0 as llama.cpp reports them)",
    ),
    CatalogModel(
        "Qwen/Qwen2.5-32B-Instruct",
        qwen2(64, 5120, 40, 8, 27648, max_position=131072, max_window_layers=70),
        source=f"config.json; {COUNTED}",
    ),
    CatalogModel(
        "Qwen/Qwen2.5-Coder-32B-Instruct",
        qwen2(64, 5120, 40, 8, 27648, max_position=32768, max_window_layers=64),
        safetensors_bytes=65_527_752_704,
        safetensors_shards=14,
        source="config.json and the 14-shard index (total_size)",
    ),
    CatalogModel(
        "Qwen/Qwen2.5-72B",
        qwen2(
            80, 8192, 64, 8, 29568, max_position=131072, max_window_layers=80, rms_norm_eps=1e-05
        ),
        source=f"config.json of the base model; {COUNTED}",
    ),
    CatalogModel(
        "Qwen/Qwen2.5-Math-72B-Instruct",
        qwen2(
            80,
            8192,
            64,
            8,
            29568,
            max_position=4096,
            max_window_layers=70,
            sliding_window=4096,
            rope_theta=10000.0,
        ),
        safetensors_bytes=145_412_407_296,
        safetensors_shards=37,
        source="config.json (4k context) and the 37-shard index (total_size)",
    ),
    CatalogModel(
        "Qwen/Qwen3-8B",
        qwen3_dense(36, 4096, 32, 8, 12288),
        source=f"config.json; {COUNTED}",
    ),
    CatalogModel(
        "Qwen/Qwen3-30B-A3B",
        qwen3_moe(48, 2048, 32, 4, 768, 6144),
        source=f"config.json; {COUNTED} (vLLM loads 56.88 GiB of them)",
    ),
    CatalogModel(
        "Qwen/Qwen3-235B-A22B",
        qwen3_moe(94, 4096, 64, 4, 1536, 12288),
        source=f"config.json; {COUNTED} (235.09 B parameters in bf16)",
    ),
    CatalogModel(
        "Qwen/Qwen3-235B-A22B-FP8",
        qwen3_moe(94, 4096, 64, 4, 1536, 12288, quantization=BLOCK_FP8),
        source=f"config.json (block FP8 e4m3, 128 x 128); {COUNTED}",
    ),
    # --- DeepSeek, Kimi ------------------------------------------------------------
    CatalogModel(
        "deepseek-ai/DeepSeek-V3",
        deepseek_v3(),
        source=f"config.json (MLA, 256 experts, FP8 blocks, one MTP layer); {COUNTED}",
    ),
    CatalogModel(
        "deepseek-ai/DeepSeek-R1",
        deepseek_v3(),
        safetensors_bytes=688_586_727_753,
        safetensors_shards=163,
        source="config.json; the sum of its 163 shard files in the repository listing",
    ),
    CatalogModel(
        "moonshotai/Kimi-K2.5",
        _KIMI_K25,
        source=f"text part of config.json (INT4 compressed-tensors experts; vision tower not counted); {COUNTED}",
    ),
    # --- Gemma ---------------------------------------------------------------------
    CatalogModel(
        "google/gemma-3-27b-it",
        _GEMMA3_27B,
        safetensors_bytes=54_864_813_280,
        safetensors_shards=12,
        parameters=28_842_036_848,
        source="config.json; bytes and parameters of the same-shape medgemma-27b-it index (vision tower included)",
    ),
    CatalogModel(
        "google/medgemma-27b-it",
        _MEDGEMMA_27B,
        safetensors_bytes=54_864_813_280,
        safetensors_shards=12,
        parameters=28_842_036_848,
        source="config.json and the 12-shard index (total_size, total_parameters)",
    ),
    # --- gpt-oss -------------------------------------------------------------------
    CatalogModel(
        "openai/gpt-oss-20b",
        gpt_oss(24, 32),
        source=f"config.json (MXFP4 experts, 128-token window on half the layers); {COUNTED}",
    ),
    CatalogModel(
        "openai/gpt-oss-120b",
        gpt_oss(36, 128),
        source=f"config.json (MXFP4 experts, 128-token window on half the layers); {COUNTED}",
    ),
)
