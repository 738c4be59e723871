"""A tiny random Llama in Hugging Face's layout, for the real vLLM to serve on a CPU.

Run as a script with the Python of the venv that holds vLLM (it needs
`torch`, `transformers` and `tokenizers`, which that venv has and the
suite's does not): `python tiny_hf_llama.py DIR`. DIR then holds a
`config.json` (hidden 256, 4 layers, 4 heads, 2 KV heads, 512 positions),
random weights in `model.safetensors`, and a byte-level BPE tokenizer trained
here on a few sentences, with a chat template in `tokenizer_config.json`.
Its answers are noise; what it is for is the engine's own behaviour around
them: its start-up lines, its HTTP answers, its metrics.
"""

from __future__ import annotations

import sys
from pathlib import Path

CORPUS = [
    "Say hello to the operator of the cluster.",
    "The replica answers over HTTP; its engine reads the weights once.",
    "Tokens a second, latency, and the cards each shard holds.",
    "Once upon a time a model was served on a CPU node.",
] * 8
CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>{{ message['content'] }}</s>"
    "{% endfor %}{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def write_tiny_llama(folder: Path) -> Path:
    """Write the model into `folder`; returns it."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    folder.mkdir(parents=True, exist_ok=True)
    special = ["<s>", "</s>", "<unk>", "<|user|>", "<|assistant|>", "<|system|>"]
    bpe = Tokenizer(models.BPE(unk_token="<unk>"))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=512,
        special_tokens=special,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    bpe.train_from_iterator(CORPUS, trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        chat_template=CHAT_TEMPLATE,
    )
    tokenizer.save_pretrained(folder)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=256,
        intermediate_size=512,
        num_hidden_layers=4,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(folder, safe_serialization=True)
    return folder


if __name__ == "__main__":
    print(write_tiny_llama(Path(sys.argv[1])))
