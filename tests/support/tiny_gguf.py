"""A tiny llama-architecture GGUF that llama.cpp loads in a blink and that says one known line.

The model is real as far as llama.cpp can tell: `general.architecture =
llama`, every hyperparameter its loader reads, a SentencePiece ("llama")
vocabulary of the three special tokens, the 256 byte tokens (so any text can
be tokenised) and a handful of word pieces, a chat template, and F32 tensors
for two transformer blocks. Under 1 MB.

Its weights are patterned rather than trained, so that what it answers is
known in advance. Each attention output and FFN down projection is zero, so
the residual stream leaving the last block is the embedding of the last
token; each token's embedding is a basis vector (word piece i of the reply
gets basis vector i + 1, every other token basis vector 0), and the output
matrix maps basis vector 0 to the reply's first word, basis vector i to word
i + 1, and the last word to end-of-sequence. Whatever the prompt, the
model replies `REPLY` and stops; the margin between the chosen logit and
every other one is wide enough that sampling at the server's default
temperature picks the same tokens. The other projections hold small random
values from a fixed seed, so every matrix multiply still runs.
"""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np

REPLY = "hello from a tiny llama"
"""What the model answers to any prompt (then end-of-sequence)."""

CONTEXT_TOKENS = 512
EMBEDDING_LENGTH = 64
FEED_FORWARD_LENGTH = 128
HEAD_COUNT = 4
HEAD_COUNT_KV = 2
BLOCK_COUNT = 2
RMS_EPSILON = 1e-5
LOGIT_MARGIN = 40.0
"""How far the chosen token's logit stands above every other (after the final RMS norm)."""

UNKNOWN_ID, BOS_ID, EOS_ID = 0, 1, 2
_FIRST_BYTE_ID = 3
_SPACE = "\u2581"  # SentencePiece's visible space

CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|{{ message['role'] }}|>\n{{ message['content'] }}\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


def _vocabulary(
    pieces: list[str] | None = None, controls: tuple[str, ...] = ()
) -> tuple[list[str], list[int], list[int]]:
    """Tokens, their types, and the ids of the reply's pieces in order.

    The reply is `REPLY`'s words (SentencePiece pieces, a space before each)
    unless `pieces` gives it as exact text, one token a piece (`<…>` pieces
    are user-defined tokens); `controls` adds control tokens a template names.
    """
    tokens = ["<unk>", "<s>", "</s>"]
    types = [gguf.TokenType.UNKNOWN, gguf.TokenType.CONTROL, gguf.TokenType.CONTROL]
    tokens += [f"<0x{byte:02X}>" for byte in range(256)]
    types += [gguf.TokenType.BYTE] * 256
    tokens += list(controls)
    types += [gguf.TokenType.CONTROL] * len(controls)
    reply_ids = []
    for piece in pieces or [_SPACE + word for word in REPLY.split(" ")]:
        reply_ids.append(len(tokens))
        tokens.append(piece)
        special = pieces is not None and piece.startswith("<")
        types.append(gguf.TokenType.USER_DEFINED if special else gguf.TokenType.NORMAL)
    if len(set(tokens)) != len(tokens):
        raise ValueError(f"the reply {pieces or REPLY!r} must not repeat a piece")
    return tokens, [int(kind) for kind in types], reply_ids


def _tensors(vocab_size: int, reply_ids: list[int]) -> dict[str, np.ndarray]:
    """Every tensor of the model, numpy shape (rows = outputs, columns = inputs)."""
    rng = np.random.default_rng(20261129)
    width, hidden = EMBEDDING_LENGTH, FEED_FORWARD_LENGTH
    head_dim = width // HEAD_COUNT
    if len(reply_ids) + 1 > width:
        raise ValueError("the reply has more words than the embedding has dimensions")

    def small(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    embeddings = np.zeros((vocab_size, width), dtype=np.float32)
    embeddings[:, 0] = 1.0
    for position, token in enumerate(reply_ids, start=1):
        embeddings[token] = 0.0
        embeddings[token, position] = 1.0
    # RMS norm turns a basis vector e_i into sqrt(width) * e_i.
    scale = LOGIT_MARGIN / np.sqrt(width)
    output = np.zeros((vocab_size, width), dtype=np.float32)
    successors = [*reply_ids, EOS_ID]
    for basis, token in enumerate(successors):
        output[token, basis] = scale
    tensors = {
        "token_embd.weight": embeddings,
        "output_norm.weight": np.ones(width, dtype=np.float32),
        "output.weight": output,
    }
    for block in range(BLOCK_COUNT):
        prefix = f"blk.{block}."
        tensors[prefix + "attn_norm.weight"] = np.ones(width, dtype=np.float32)
        tensors[prefix + "attn_q.weight"] = small(width, width)
        tensors[prefix + "attn_k.weight"] = small(HEAD_COUNT_KV * head_dim, width)
        tensors[prefix + "attn_v.weight"] = small(HEAD_COUNT_KV * head_dim, width)
        tensors[prefix + "attn_output.weight"] = np.zeros((width, width), dtype=np.float32)
        tensors[prefix + "ffn_norm.weight"] = np.ones(width, dtype=np.float32)
        tensors[prefix + "ffn_gate.weight"] = small(hidden, width)
        tensors[prefix + "ffn_up.weight"] = small(hidden, width)
        tensors[prefix + "ffn_down.weight"] = np.zeros((width, hidden), dtype=np.float32)
    return tensors


TOOL_CALL = {"name": "get_weather", "arguments": {"city": "Paris"}}
"""What the tool-calling variant calls, whatever it is asked."""

TOOLS_TEMPLATE = (
    "{%- if tools %}<|im_start|>system\n# Tools\n<tools>\n"
    "{%- for tool in tools %}{{ tool | tojson }}\n{%- endfor %}</tools>\n"
    "For each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n<tool_call>\n"
    '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n'
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'assistant' and message.tool_calls %}<|im_start|>assistant"
    "{%- for tool_call in message.tool_calls %}"
    "{%- if tool_call.function is defined %}{%- set tool_call = tool_call.function %}{%- endif %}"
    '\n<tool_call>\n{"name": "{{ tool_call.name }}", "arguments": '
    "{{ tool_call.arguments | tojson }}}\n</tool_call>"
    "{%- endfor %}<|im_end|>\n"
    "{%- elif message.role == 'tool' %}<|im_start|>user\n<tool_response>\n"
    "{{ message.content }}\n</tool_response><|im_end|>\n"
    "{%- else %}<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{%- endif %}"
)
"""A Hermes-style template (Qwen 2.5's shape) that offers tools and writes their calls, so a
llama-server with `--jinja` knows how this model calls a tool and parses its answer."""


def write_tiny_tool_caller_gguf(path: Path) -> Path:
    """The tiny model answering every prompt with a Hermes tool call of `TOOL_CALL`."""
    import json

    pieces = ["<tool_call>", "\n" + json.dumps(TOOL_CALL) + "\n", "</tool_call>"]
    return write_tiny_llama_gguf(
        path,
        pieces=pieces,
        controls=("<|im_start|>", "<|im_end|>"),
        chat_template=TOOLS_TEMPLATE,
        context=4096,
    )


def write_tiny_llama_gguf(
    path: Path,
    *,
    pieces: list[str] | None = None,
    controls: tuple[str, ...] = (),
    chat_template: str = CHAT_TEMPLATE,
    context: int = CONTEXT_TOKENS,
) -> Path:
    """Write the tiny model to `path` (the same bytes every time) and return the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tokens, types, reply_ids = _vocabulary(pieces, controls)
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_name("llmgw tiny llama")
    writer.add_context_length(context)
    writer.add_embedding_length(EMBEDDING_LENGTH)
    writer.add_block_count(BLOCK_COUNT)
    writer.add_feed_forward_length(FEED_FORWARD_LENGTH)
    writer.add_head_count(HEAD_COUNT)
    writer.add_head_count_kv(HEAD_COUNT_KV)
    writer.add_rope_dimension_count(EMBEDDING_LENGTH // HEAD_COUNT)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(RMS_EPSILON)
    writer.add_vocab_size(len(tokens))
    writer.add_file_type(gguf.LlamaFileType.ALL_F32)
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores([0.0] * len(tokens))
    writer.add_token_types(types)
    writer.add_bos_token_id(BOS_ID)
    writer.add_eos_token_id(EOS_ID)
    writer.add_unk_token_id(UNKNOWN_ID)
    writer.add_add_bos_token(True)
    writer.add_add_eos_token(False)
    writer.add_chat_template(chat_template)
    for name, tensor in _tensors(len(tokens), reply_ids).items():
        writer.add_tensor(name, tensor)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
