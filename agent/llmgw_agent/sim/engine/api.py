"""The simulated engine's OpenAI surface, answered as vLLM answers it (pure, standard library).

What a client can observe is vLLM's, as vLLM 0.32 answered the same calls
(`tests/e2e/test_vllm_vs_sim.py` holds the two together): `/v1/models` lists
`ModelCard`s (`owned_by`, `root`, `max_model_len`); an unknown `model` is a
404 and a bad request a 400, both with `{"error": {"message", "type",
"param", "code"}}` — a request its schema refuses is vLLM's pydantic
`Bad Request` naming `body.FIELD`, one its own checks refuse a
`BadRequestError`; every answer carries vLLM's fields, those the sim has no
value for as null; chat and completions
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
    """A 400, as vLLM answers a request its own checks refuse (`(parameter=…)` in its words)."""
    return error(400, message, "BadRequestError", param)


def schema_refusal(field: str, kind: str, message: str, given: Any) -> Answer:
    """A 400, as vLLM answers a request its pydantic schema refuses: `Bad Request`, its
    `param` where in the body (`body.stop`, `body` for the whole of it)."""
    where = "body.{}".format(field) if field else "body"
    shown = (
        "<dict of {} items>".format(len(given))
        if isinstance(given, dict)
        else "<list of {} items>".format(len(given))
        if isinstance(given, list)
        else str(given)
    )
    detail = {"type": kind, "loc": where, "msg": message, "input": shown}
    return error(400, "1 validation error:\n  {!r}".format(detail), "Bad Request", where)


SYSTEM_FINGERPRINT = "vllm-sim"
"""What the sim's answers carry as vLLM's `system_fingerprint` (vLLM: `vllm-0.32.0-…`)."""


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


def served_names(engine: Dict[str, Any]) -> List[str]:
    """The names a request's `model` may give: the served names and, on vLLM and SGLang, each
    LoRA adapter's (llama-server takes its adapters by id, in the request's `lora`)."""
    names = list(engine.get("served_names") or [engine["served_name"]])
    if engine.get("kind") in ("vllm", "sglang"):
        names += [a["name"] for a in engine.get("adapters") or ()]
    return names


def lora_adapters(engine: Dict[str, Any]) -> List[Dict[str, Any]]:
    """llama-server's `GET /lora-adapters`: each adapter's id, path and scale (its scale for a
    request whose `lora` does not name it)."""
    return [
        {
            "id": int(a["name"]),
            "path": a["path"],
            "scale": float(a.get("scale", 1.0)),
            "task_name": "",
            "prompt_prefix": "",
        }
        for a in engine.get("adapters") or ()
    ]


def model_list(engine: Dict[str, Any], created: int) -> Dict[str, Any]:
    """`GET /v1/models`: one card per served name, as vLLM's `ModelList`; a LoRA adapter's card
    names its path as `root` and the served model as `parent`, as vLLM's does."""
    context = engine.get("context_tokens") or 32768
    cards = []
    parents = {}  # type: Dict[str, str]
    if engine.get("kind") in ("vllm", "sglang"):
        parents = {a["name"]: a["path"] for a in engine.get("adapters") or ()}
    for name in served_names(engine):
        cards.append(
            {
                "id": name,
                "object": "model",
                "created": created,
                "owned_by": OWNERS.get(engine["kind"], engine["kind"]),
                "root": parents.get(name) or engine.get("model") or name,
                "parent": engine["served_name"] if name in parents else None,
                "max_model_len": None if name in parents else context,
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
    if isinstance(value, bool) or not isinstance(value, int):
        return None, schema_refusal(name, "int_type", "Input should be a valid integer", value)
    if value < low:
        if name == "n":  # vLLM's own check of `n` names no parameter
            return None, bad_request("n must be at least {}, got {}.".format(low, value))
        return None, bad_request(
            "{} must be at least {}, got {}. (parameter={}, value={})".format(
                name, low, value, name, value
            ),
            name,
        )
    return value, None


def _no_model(model: str, served: List[str], adapters: Any = ()) -> Answer:
    """vLLM's 404 for a model it does not serve: it names its served models, not its adapters."""
    names = [name for name in served if name not in {a["name"] for a in adapters}]
    return error(
        404,
        "The model `{}` does not exist. Valid aliases: {}.".format(model, ", ".join(names)),
        "NotFoundError",
        "model",
    )


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
    served = served_names(engine)
    if model is not None and model not in served:
        return _no_model(model, served, engine.get("adapters") or ())
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
        return None, schema_refusal(
            "",
            "model_attributes_type",
            "Input should be a valid dictionary or object to extract fields from",
            body,
        )
    if chat and "messages" not in body:
        return None, schema_refusal("messages", "missing", "Field required", body)
    if chat and not isinstance(body.get("messages"), list):
        return None, schema_refusal(
            "messages", "list_type", "Input should be a valid list", body["messages"]
        )
    served = served_names(engine)
    model = body.get("model")
    if model is not None and model not in served:
        return None, _no_model(model, served, engine.get("adapters") or ())
    if not chat and not body.get("prompt"):
        return None, bad_request(
            "Either prompt or prompt_embeds must be provided and non-empty. (parameter=prompt)",
            "prompt",
        )
    if not chat and not isinstance(body.get("prompt"), (str, list)):
        return None, schema_refusal(
            "prompt", "string_type", "Input should be a valid string", body["prompt"]
        )
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
        return None, schema_refusal("stop", "string_type", "Input should be a valid string", stop)
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
    if body.get("ignore_eos") is True and limit is not None and not stops:
        # vLLM's sampling parameter: no end of text, `max_tokens` tokens (a benchmark's shape).
        words = (words * (limit // max(1, len(words)) + 1))[:limit]
        finish = "length"
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
    if options is not None and not body.get("stream"):
        return None, bad_request(
            "Stream options can only be defined when `stream=True`. (parameter=stream_options)",
            "stream_options",
        )
    if options is not None and not isinstance(options, dict):
        return None, schema_refusal(
            "stream_options", "model_type", "Input should be a valid dictionary", options
        )
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
    if not isinstance(tools, list):
        return None, schema_refusal("tools", "list_type", "Input should be a valid list", tools)
    if not all(isinstance(t, dict) and isinstance(t.get("function"), dict) for t in tools):
        return None, schema_refusal(
            "tools", "model_type", "Input should be a valid dictionary", tools
        )
    choice = body.get("tool_choice", "auto")
    if choice == "none" or not tools:
        return None, None
    if isinstance(choice, dict):
        wanted = (choice.get("function") or {}).get("name")
        picked = next((t for t in tools if t["function"].get("name") == wanted), None)
        if picked is None:
            return None, bad_request(
                "The tool specified in `tool_choice` does not match any of the specified "
                "`tools` (parameter=tool_choice)",
                "tool_choice",
            )
    elif choice == "auto" and not engine.get("tool_calling"):
        return None, bad_request(
            '"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be set'
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


def usage(found: Plan, details: bool = True) -> Dict[str, Any]:
    """Tokens counted as the text was made: a word a token, every choice's (with vLLM's two
    `…_details`, null, in a whole answer; a stream's last chunk has only the counts)."""
    counts: Dict[str, Any] = {
        "prompt_tokens": found.prompt_tokens,
        "total_tokens": found.prompt_tokens + found.completion_tokens,
        "completion_tokens": found.completion_tokens,
    }
    if details:
        counts.update(prompt_tokens_details=None, completion_tokens_details=None)
    return counts


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
        if found.chat:
            message: Dict[str, Any] = {"role": "assistant", "content": text}
            message.update(refusal=None, annotations=None, audio=None, function_call=None)
            if found.tool_call is not None:
                message["content"] = None
                message["tool_calls"] = _tool_calls(found, index, stream=False)
            message["reasoning"] = None
            choice["message"] = message
        else:
            choice["text"] = text
        choice["logprobs"] = _logprobs(found, found.words)
        choice["finish_reason"] = found.finish
        choice["stop_reason"] = None
        choice["token_ids"] = None
        if not found.chat:
            choice.update(prompt_logprobs=None, prompt_token_ids=None)
        choice["routed_experts"] = None
        choices.append(choice)
    answer: Dict[str, Any] = {
        "id": request_id,
        "object": "chat.completion" if found.chat else "text_completion",
        "created": created,
        "model": found.model,
        "choices": choices,
        "service_tier": None,
        "system_fingerprint": SYSTEM_FINGERPRINT,
        "usage": usage(found),
    }
    if found.chat:
        answer.update(prompt_logprobs=None, prompt_token_ids=None, prompt_text=None)
    answer.update(kv_transfer_params=None, ec_transfer_params=None, metrics=None)
    return answer


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
        first = chunk(
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
        first.update(prompt_token_ids=None, prompt_text=None)
        yield first
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
            if last:
                choice["stop_reason"] = None
            choice["token_ids"] = None
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
        final["usage"] = usage(found, details=False)
        final["system_fingerprint"] = SYSTEM_FINGERPRINT
        yield final


def request_id(chat: bool, number: int) -> str:
    """`chatcmpl-…` or `cmpl-…`, as vLLM names them."""
    return "{}-sim{:08d}".format("chatcmpl" if chat else "cmpl", number)


def now() -> int:
    """Seconds since the epoch, as a card's and an answer's `created`."""
    return int(time.time())


LORA_ROUTES = {
    "vllm": {"/v1/load_lora_adapter": "load", "/v1/unload_lora_adapter": "unload"},
    "sglang": {"/load_lora_adapter": "load", "/unload_lora_adapter": "unload"},
}
"""The runtime adapter routes each engine has (vLLM's only with
`VLLM_ALLOW_RUNTIME_LORA_UPDATING`)."""


def change_adapter(engine: Dict[str, Any], what: str, body: Any) -> Tuple[int, Any]:
    """Load or unload one adapter as vLLM 0.32 answers it (`vllm/entrypoints/openai/models/
    serving.py`): 200 and a sentence; its schema's refusal of a missing field; 400 for a name
    held already or a served model's; 404 for a path with no adapter or a name not held.
    Changes `engine["adapters"]`."""
    import os

    if not isinstance(body, dict):
        return schema_refusal(
            "", "model_attributes_type", "Input should be a valid dictionary", body
        )
    needed = ("lora_name", "lora_path") if what == "load" else ("lora_name",)
    for field in needed:
        if not isinstance(body.get(field), str):
            return schema_refusal(field, "missing", "Field required", body)
    name = body["lora_name"]
    held = [a for a in engine.get("adapters") or () if a["name"] == name]
    if what == "load":
        path = body["lora_path"]
        if not name or not path:
            return error(
                400, "Both 'lora_name' and 'lora_path' must be provided.", "InvalidUserInput"
            )
        if name in (engine.get("served_names") or [engine["served_name"]]):
            return error(
                400,
                "The lora adapter '{}' conflicts with a served base model.".format(name),
                "InvalidUserInput",
            )
        if held:
            return error(
                400,
                "The lora adapter '{}' has already been loaded. If you want to load the adapter "
                "in place, set 'load_inplace' to True.".format(name),
                "InvalidUserInput",
            )
        if not os.path.exists(path):
            return error(
                404,
                "Loading lora {} failed: No adapter found for <path>".format(name),
                "NotFoundError",
            )
        engine.setdefault("adapters", []).append({"name": name, "path": path})
        return 200, "Success: LoRA adapter '{}' added successfully.".format(name)
    if not held:
        return error(404, "The lora adapter '{}' cannot be found.".format(name), "NotFoundError")
    engine["adapters"] = [a for a in engine["adapters"] if a["name"] != name]
    return 200, "Success: LoRA adapter '{}' removed successfully.".format(name)
