"""Shapes stated in public sources whose config.json is not among the fixtures."""

from __future__ import annotations

# DeepSeek-V2-Lite-Chat's published config values (its config.json is not among
# the fixtures): 27 layers, hidden 2048, 16 heads, MLA with kv_lora_rank 512 and
# a 64-wide rotary key, 64 routed experts (6 per token) + 2 shared, first layer dense.
DEEPSEEK_V2_LITE = {
    "architectures": ["DeepseekV2ForCausalLM"],
    "model_type": "deepseek_v2",
    "hidden_size": 2048,
    "num_hidden_layers": 27,
    "num_attention_heads": 16,
    "num_key_value_heads": 16,
    "vocab_size": 102400,
    "intermediate_size": 10944,
    "moe_intermediate_size": 1408,
    "n_routed_experts": 64,
    "n_shared_experts": 2,
    "num_experts_per_tok": 6,
    "first_k_dense_replace": 1,
    "moe_layer_freq": 1,
    "kv_lora_rank": 512,
    "q_lora_rank": None,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "max_position_embeddings": 163840,
    "rope_scaling": {"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096},
    "torch_dtype": "bfloat16",
    "tie_word_embeddings": False,
}

# Qwen2.5-14B-Instruct's shape as its GGUF print_info and config tables state it.
QWEN25_14B = {
    "architectures": ["Qwen2ForCausalLM"],
    "model_type": "qwen2",
    "hidden_size": 5120,
    "num_hidden_layers": 48,
    "num_attention_heads": 40,
    "num_key_value_heads": 8,
    "intermediate_size": 13824,
    "vocab_size": 152064,
    "max_position_embeddings": 32768,
    "sliding_window": 131072,
    "use_sliding_window": False,
    "torch_dtype": "bfloat16",
    "tie_word_embeddings": False,
}
