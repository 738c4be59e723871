"""The simulated engine's OpenAI surface, answered as vLLM answers it (pure, standard library).

What a client can observe is vLLM's (`vllm/entrypoints/openai`, the version
the product targets): `/v1/models` lists `ModelCard`s (`owned_by`, `root`,
`max_model_len`); an unknown `model` is a 404 and a bad request a 400, both
with `{"error": {"message", "type", "param", "code"}}`; chat and completions
honour `n`, `max_tokens` (`finish_reason: "length"` when they cut the text),
`stop`, `logprobs`, and `stream` with `stream_options.include_usage` (a last
chunk with no choices and the usage). The text is the sim's fixed answer, a
word a token.
"""

from __future__ import annotations

import json
import time
from typing import Any, Dict, Iterator, List, Optional, Tuple

Answer = Tuple[int, Dict[str, Any]]
"""(HTTP status, JSON body)."""

OWNERS = {"vllm": "vllm", "sglang": "sglang", "llama.cpp": "llamacpp"}
"""What each engine puts in a model card's `owned_by`."""


def error(status: int, message: str, kind: str, param: Optional[str] = None) -> Answer:
    """vLLM's `ErrorResponse`: `{"error": {"message", "type", "param", "code"}}`."""
    return status, {"error": {"message": message, "type": kind, "param": param, "code": status}}


def bad_request(message: str, param: Optional[str] = None) -> Answer:
    """A 400, as vLLM answers a request its schema refuses."""
    return error(400, message, "BadRequestError", param)


_LLAMA_SERVER_OPEN = ("/health", "/v1/health", "/models", "/v1/models", "/api/tags")
"""llama-server's routes that take no key (its `public_endpoints`)."""


def needs_key(kind: str, route: str) -> bool:
    """Whether `route` needs the client key on an engine started with one.

    vLLM checks only routes under `/v1` (its `/health`, `/metrics`, `/tokenize`,
    `/version` stay open); SGLang every route but `/health*` and `/metrics`;
    llama-server every route but its public ones.
    """
    if kind == "vllm":
        return route == "/v1" or route.startswith("/v1/")
    if kind == "sglang":
        return not route.startswith(("/health", "/metrics"))
    return route not in _LLAMA_SERVER_OPEN


def unauthorized(kind: str) -> Answer:
    """The 401 each engine answers a request without its key."""
    if kind == "llama.cpp":
        return 401, {
            "error": {"code": 401, "message": "Invalid API Key", "type": "authentication_error"}
        }
    return 401, {"error": "Unauthorized"}


def model_list(engine: Dict[str, Any], created: int) -> Dict[str, Any]:
    """`GET /v1/models`: one card per served name, as vLLM's `ModelList`."""
    context = engine.get("context_tokens") or 32768
    cards = []
    for name in engine.get("served_names") or [engine["served_name"]]:
        cards.append(
            {
                "id": name,
                "object": "model",
                "created": created,
                "owned_by": OWNERS.get(engine["kind"], engine["kind"]),
                "root": engine.get("model") or name,
                "parent": None,
                "max_model_len": context,
                "permission": [
                    {
                        "id": "modelperm-sim",
                        "object": "model_permission",
                        "created": created,
                        "allow_create_engine": False,
                        "allow_sampling": True,
                        "allow_logprobs": True,
                        "allow_search_indices": False,
                        "allow_view": True,
                        "allow_fine_tuning": False,
                        "organization": "*",
                        "group": None,
                        "is_blocking": False,
                    }
                ],
            }
        )
    return {"object": "list", "data": cards}


class Plan:
    """One checked request: what to answer, how many choices, where the text stops and why."""

    def __init__(self, chat: bool, model: str, words: List[str], finish: str, n: int) -> None:
        self.chat = chat
        self.model = model
        self.words = words
        self.finish = finish
        self.n = n
        self.prompt_tokens = 1
        self.logprobs: Optional[int] = None
        """Chat: top_logprobs asked (0 with `logprobs: true`); completions: `logprobs`."""
        self.include_usage = False
        self.tool_call: Optional[Dict[str, str]] = None
        """The call answered instead of text, `{name, arguments}` (arguments: JSON text)."""

    @property
    def completion_tokens(self) -> int:
        return len(self.words) * self.n


def _int(body: Dict[str, Any], name: str, low: int) -> Tuple[Optional[int], Optional[Answer]]:
    value = body.get(name)
    if value is None:
        return None, None
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        return None, bad_request(
            "{} must be an integer of at least {} (got {!r})".format(name, low, value), name
        )
    return value, None


def _prompt_tokens(body: Dict[str, Any]) -> int:
    if isinstance(body.get("messages"), list):
        text = " ".join(str(m.get("content", "")) for m in body["messages"] if isinstance(m, dict))
    else:
        prompt = body.get("prompt", "")
        text = " ".join(prompt) if isinstance(prompt, list) else str(prompt)
    return max(1, len(text.split()))


def tokenize(body: Any, engine: Dict[str, Any]) -> Answer:
    """`POST /tokenize` as vLLM answers it: `{count, max_model_len, tokens}`; the sim's token
    is a word of the prompt (or of the messages' text), its id a stable number under 32,000."""
    if not isinstance(body, dict):
        return bad_request("the request body is not a JSON object")
    model = body.get("model")
    if model is not None and model not in (engine.get("served_names") or [engine["served_name"]]):
        return error(404, "The model `{}` does not exist.".format(model), "NotFoundError")
    if "prompt" in body:
        text = body["prompt"] if isinstance(body["prompt"], str) else None
    else:
        messages = body.get("messages")
        text = (
            " ".join(str(m.get("content") or "") for m in messages if isinstance(m, dict))
            if isinstance(messages, list)
            else None
        )
    if text is None:
        return bad_request("give a prompt (text) or messages", "prompt")
    tokens = [sum(word.encode()) % 32000 for word in text.split()]
    context = engine.get("context_tokens") or 32768
    return 200, {"count": len(tokens), "max_model_len": context, "tokens": tokens}


def plan(
    route: str, body: Any, engine: Dict[str, Any], answer: str
) -> Tuple[Optional[Plan], Optional[Answer]]:
    """Check a chat or completions request as vLLM would; the plan, or the error to send."""
    chat = route == "/v1/chat/completions"
    if not isinstance(body, dict):
        return None, bad_request("the request body must be a JSON object")
    served = engine.get("served_names") or [engine["served_name"]]
    model = body.get("model")
    if model is not None and model not in served:
        return None, error(404, "The model `{}` does not exist.".format(model), "NotFoundError")
    if chat and not isinstance(body.get("messages"), list):
        return None, bad_request("messages: a list of messages is required", "messages")
    if not chat and not isinstance(body.get("prompt"), (str, list)):
        return None, bad_request("prompt: a string or a list is required", "prompt")
    n, refused = _int(body, "n", 1)
    if refused:
        return None, refused
    limit, refused = _int(
        body,
        "max_completion_tokens" if chat and "max_completion_tokens" in body else "max_tokens",
        1,
    )
    if refused:
        return None, refused
    stop = body.get("stop")
    if stop is not None and not isinstance(stop, (str, list)):
        return None, bad_request("stop must be a string or a list of strings", "stop")
    stops = (
        [stop] if isinstance(stop, str) else [s for s in (stop or []) if isinstance(s, str) and s]
    )
    words = answer.split()
    finish = "stop"
    text = " ".join(words)
    for needle in stops:
        cut = text.find(needle)
        if cut != -1:
            text = text[:cut]
            words = text.split()
    if limit is not None and len(words) > limit:
        words, finish = words[:limit], "length"
    found = Plan(chat, model or served[0], words, finish, n or 1)
    found.prompt_tokens = _prompt_tokens(body)
    if chat and body.get("logprobs"):
        top, refused = _int(body, "top_logprobs", 0)
        if refused:
            return None, refused
        found.logprobs = top or 0
    elif not chat and body.get("logprobs") is not None:
        top, refused = _int(body, "logprobs", 0)
        if refused:
            return None, refused
        found.logprobs = top
    options = body.get("stream_options")
    if options is not None and not isinstance(options, dict):
        return None, bad_request("stream_options must be an object", "stream_options")
    found.include_usage = bool((options or {}).get("include_usage"))
    if chat and body.get("tools") is not None:
        call, refused = _tool_call(body, engine)
        if refused:
            return None, refused
        if call is not None:
            found.tool_call, found.finish, found.words = call, "tool_calls", []
    return found, None


_SAMPLE = {"string": "sim", "number": 1, "integer": 1, "boolean": True, "array": [], "object": {}}


def _tool_call(body: Dict[str, Any], engine: Dict[str, Any]):
    """The tool the answer calls, as vLLM decides: a named or `required` choice always, `auto`
    only on an engine started with tool calling; None for `none`."""
    tools = body.get("tools")
    if not isinstance(tools, list) or not all(
        isinstance(t, dict) and isinstance(t.get("function"), dict) for t in tools
    ):
        return None, bad_request("tools must be a list of function tools", "tools")
    choice = body.get("tool_choice", "auto")
    if choice == "none" or not tools:
        return None, None
    if isinstance(choice, dict):
        wanted = (choice.get("function") or {}).get("name")
        picked = next((t for t in tools if t["function"].get("name") == wanted), None)
        if picked is None:
            return None, bad_request("tool_choice names a tool not in tools", "tool_choice")
    elif choice == "auto" and not engine.get("tool_calling"):
        return None, bad_request(
            '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set',
            "tool_choice",
        )
    else:
        picked = tools[0]
    function = picked["function"]
    parameters = function.get("parameters") if isinstance(function.get("parameters"), dict) else {}
    properties = (
        parameters.get("properties") if isinstance(parameters.get("properties"), dict) else {}
    )
    required = [n for n in parameters.get("required") or [] if isinstance(n, str)]
    arguments = {
        name: _SAMPLE.get((properties.get(name) or {}).get("type"), "sim") for name in required
    }
    return {"name": str(function.get("name") or "tool"), "arguments": json.dumps(arguments)}, None


def _tool_calls(found: Plan, index: int, stream: bool) -> List[Dict[str, Any]]:
    call = found.tool_call or {}
    entry: Dict[str, Any] = {
        "id": "chatcmpl-tool-sim{}".format(index),
        "type": "function",
        "function": {"name": call.get("name"), "arguments": call.get("arguments")},
    }
    if stream:
        entry["index"] = 0
    return [entry]


def usage(found: Plan) -> Dict[str, int]:
    """Tokens counted as the text was made: a word a token, every choice's."""
    return {
        "prompt_tokens": found.prompt_tokens,
        "completion_tokens": found.completion_tokens,
        "total_tokens": found.prompt_tokens + found.completion_tokens,
    }


def _logprobs(found: Plan, words: List[str]) -> Optional[Dict[str, Any]]:
    if found.logprobs is None:
        return None
    if found.chat:
        return {
            "content": [
                {
                    "token": word,
                    "logprob": -0.01,
                    "bytes": list(word.encode()),
                    "top_logprobs": [
                        {"token": word, "logprob": -0.01, "bytes": list(word.encode())}
                    ][: found.logprobs],
                }
                for word in words
            ]
        }
    offsets, at = [], 0
    for word in words:
        offsets.append(at)
        at += len(word) + 1
    return {
        "tokens": words,
        "token_logprobs": [-0.01] * len(words),
        "top_logprobs": [{word: -0.01} for word in words] if found.logprobs else None,
        "text_offset": offsets,
    }


def completion(found: Plan, request_id: str, created: int) -> Dict[str, Any]:
    """The whole answer (no `stream`)."""
    text = " ".join(found.words)
    choices = []
    for index in range(found.n):
        choice: Dict[str, Any] = {"index": index}
        if found.chat and found.tool_call is not None:
            choice["message"] = {
                "role": "assistant",
                "content": None,
                "tool_calls": _tool_calls(found, index, stream=False),
            }
        elif found.chat:
            choice["message"] = {"role": "assistant", "content": text, "tool_calls": []}
        else:
            choice["text"] = text
        choice["logprobs"] = _logprobs(found, found.words)
        choice["finish_reason"] = found.finish
        choice["stop_reason"] = None
        choices.append(choice)
    return {
        "id": request_id,
        "object": "chat.completion" if found.chat else "text_completion",
        "created": created,
        "model": found.model,
        "choices": choices,
        "usage": usage(found),
    }


def chunks(found: Plan, request_id: str, created: int) -> Iterator[Dict[str, Any]]:
    """The streamed answer, chunk by chunk, as vLLM sends them (`data: …` each; `[DONE]` after)."""
    kind = "chat.completion.chunk" if found.chat else "text_completion"

    def chunk(choices: List[Dict[str, Any]]) -> Dict[str, Any]:
        return {
            "id": request_id,
            "object": kind,
            "created": created,
            "model": found.model,
            "choices": choices,
        }

    if found.chat:
        yield chunk(
            [
                {
                    "index": i,
                    "delta": {"role": "assistant", "content": ""},
                    "logprobs": None,
                    "finish_reason": None,
                }
                for i in range(found.n)
            ]
        )
    if found.chat and found.tool_call is not None:
        yield chunk(
            [
                {
                    "index": i,
                    "delta": {"tool_calls": _tool_calls(found, i, stream=True)},
                    "logprobs": None,
                    "finish_reason": None,
                }
                for i in range(found.n)
            ]
        )
    for position, word in enumerate(found.words):
        piece = word if position == 0 else " " + word
        last = position == len(found.words) - 1
        choices = []
        for index in range(found.n):
            choice: Dict[str, Any] = {"index": index}
            if found.chat:
                choice["delta"] = {"content": piece}
            else:
                choice["text"] = piece
            choice["logprobs"] = _logprobs(found, [word])
            choice["finish_reason"] = found.finish if last else None
            choices.append(choice)
        yield chunk(choices)
    if not found.words:
        yield chunk(
            [
                dict(
                    {"index": i, "logprobs": None, "finish_reason": found.finish},
                    **({"delta": {}} if found.chat else {"text": ""}),
                )
                for i in range(found.n)
            ]
        )
    if found.include_usage:
        final = chunk([])
        final["usage"] = usage(found)
        yield final


def request_id(chat: bool, number: int) -> str:
    """`chatcmpl-…` or `cmpl-…`, as vLLM names them."""
    return "{}-sim{:08d}".format("chatcmpl" if chat else "cmpl", number)


def now() -> int:
    """Seconds since the epoch, as a card's and an answer's `created`."""
    return int(time.time())
