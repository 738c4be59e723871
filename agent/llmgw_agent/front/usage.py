"""The tokens an engine's answer used, read from its own `usage` (standard library).

A whole answer carries `usage` in its JSON body. A stream (OpenAI's server-sent
events) carries it only when the request asked with
`stream_options.include_usage`: then the engines (vLLM, SGLang, llama.cpp) put
`"usage": null` in every chunk and the counts in the last one, a chunk with no
choices. Where a key's limits need the tokens and its client did not ask,
the front asks for it (`ask_for_usage`) and takes it out again on the way back
(`StreamUsage` with `strip`): the client sees the stream it asked for.
"""

from __future__ import annotations

import json
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import List, Optional, Tuple

MAX_EVENT_BYTES = 4 * 1024 * 1024
"""An event longer than this is passed on as it is and not read for usage."""


def _counts(usage: object) -> Optional[Tuple[int, int]]:
    """(prompt, completion) tokens of a `usage` object, None when it has none."""
    if not isinstance(usage, dict):
        return None
    found = []
    for name in ("prompt_tokens", "completion_tokens"):
        value = usage.get(name, 0)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            return None
        found.append(value)
    return found[0], found[1]


def whole_usage(body: bytes) -> Optional[Tuple[int, int]]:
    """(prompt, completion) tokens of a whole JSON answer, None when it says none."""
    if b'"usage"' not in body:
        return None
    try:
        parsed = json.loads(body.decode())
    except (ValueError, UnicodeDecodeError):
        return None
    return _counts(parsed.get("usage")) if isinstance(parsed, dict) else None


def ask_for_usage(body: bytes) -> Tuple[bytes, bool]:
    """A streamed request's body asking for usage; True when the client had not asked.

    Any other body (not JSON, not a stream, usage asked for already) is returned
    as it is, with False.
    """
    try:
        parsed = json.loads(body.decode() or "{}")
    except (ValueError, UnicodeDecodeError):
        return body, False
    if not isinstance(parsed, dict) or parsed.get("stream") is not True:
        return body, False
    options = parsed.get("stream_options")
    if options is None:
        options = {}
    if not isinstance(options, dict) or options.get("include_usage") is True:
        return body, False
    parsed["stream_options"] = dict(options, include_usage=True)
    return json.dumps(parsed).encode(), True


class StreamUsage:
    """Reads the usage out of a stream's events as they pass; with `strip`, takes it out.

    `feed` takes the stream's bytes as they come and returns what to send on:
    the same bytes without `strip`; with it, whole events only, the usage chunk
    left out and `usage` removed from the others. `end` returns what is held.
    """

    def __init__(self, strip: bool) -> None:
        self.strip = strip
        self.tokens: Optional[Tuple[int, int]] = None
        self.first_at: Optional[float] = None  # when the first byte of the body came
        self._held = b""

    def feed(self, data: bytes) -> bytes:
        if data and self.first_at is None:
            self.first_at = time.monotonic()
        self._held += data
        out: List[bytes] = []
        while True:
            end, gap = _event_end(self._held)
            if end < 0:
                break
            event, self._held = self._held[: end + gap], self._held[end + gap :]
            out.append(self._event(event))
        if len(self._held) > MAX_EVENT_BYTES:  # no event this long: pass it on unread
            out.append(self._held)
            self._held = b""
        return b"".join(out) if self.strip else data

    def watch(self, data: bytes) -> None:
        """Read `data` for usage only: a body whose framing the front cannot change."""
        strip, self.strip = self.strip, False
        self.feed(data)
        self.strip = strip

    def end(self) -> bytes:
        """What is held when the stream ends (an event with no blank line after it)."""
        held, self._held = self._held, b""
        if not held:
            return b""
        event = self._event(held)
        return event if self.strip else b""

    def _event(self, event: bytes) -> bytes:
        """Read one event; return it as it is to be sent (b"" when left out)."""
        if b'"usage"' not in event:
            return event
        lines = event.split(b"\n")
        kept = []
        for line in lines:
            if not line.startswith(b"data:") or b'"usage"' not in line:
                kept.append(line)
                continue
            try:
                chunk = json.loads(line[5:].strip().decode())
            except (ValueError, UnicodeDecodeError):
                kept.append(line)
                continue
            if not isinstance(chunk, dict) or "usage" not in chunk:
                kept.append(line)
                continue
            counts = _counts(chunk["usage"])
            if counts is not None:
                self.tokens = counts
            if not self.strip:
                kept.append(line)
                continue
            if counts is not None and not chunk.get("choices"):
                return b""  # the usage chunk the client did not ask for
            del chunk["usage"]
            ending = b"\r" if line.endswith(b"\r") else b""
            kept.append(b"data: " + json.dumps(chunk, separators=(",", ":")).encode() + ending)
        return b"\n".join(kept)


def _event_end(held: bytes) -> Tuple[int, int]:
    """Where the first event in `held` ends and how long its blank line is; (-1, 0) if none."""
    plain, crlf = held.find(b"\n\n"), held.find(b"\r\n\r\n")
    if crlf >= 0 and (plain < 0 or crlf < plain):
        return crlf, 4
    if plain >= 0:
        return plain, 2
    return -1, 0
