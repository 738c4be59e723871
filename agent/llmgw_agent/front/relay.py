"""An engine's answer carried back to the client: read whole when it is small, else relayed.

A whole answer of known length is read before a byte of it is sent on, so an
engine that dies mid-answer can be retried elsewhere unseen; a stream (chunked,
or one that runs to the engine closing) and a large answer are copied as they
come.
"""

from __future__ import annotations

import asyncio

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Optional

    from llmgw_agent.front.usage import StreamUsage

WHOLE_ANSWER_BYTES = 8 * 1024 * 1024
"""The largest answer of known length read whole before it is sent on (larger ones stream)."""


async def whole_answer(head: bytes, reader: asyncio.StreamReader, method: str) -> Optional[bytes]:
    """The body of an answer with a `Content-Length` up to `WHOLE_ANSWER_BYTES`, read whole
    (b"" for an answer without one); None for a stream or a larger answer, to relay as it comes.

    Raises:
        asyncio.IncompleteReadError: the engine closed before the body ended.
    """
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
        return b""
    named = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        named[name.strip().lower()] = value.strip().lower()
    if "transfer-encoding" in named or "content-length" not in named:
        return None
    try:
        length = int(named["content-length"])
    except ValueError:
        return None
    if not 0 <= length <= WHOLE_ANSWER_BYTES:
        return None
    return await reader.readexactly(length) if length else b""


async def relay(
    head: bytes,
    reader: asyncio.StreamReader,
    writer: asyncio.StreamWriter,
    method: str,
    usage: Optional[StreamUsage] = None,
) -> bool:
    """Copy one response from a worker to the client; True when the worker's connection
    may carry another request.

    A stream passes through `usage`, which reads its tokens and, where the front asked
    for them and the client did not, takes them out again (a chunked stream's chunks are
    then made anew); a body of known length is only read for them (its length is fixed).
    """
    writer.write(head)
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    named = {}
    for line in lines[1:]:
        if line:
            name, _, value = line.partition(":")
            named[name.strip().lower()] = value.strip().lower()
    if method == "HEAD" or status in (204, 304) or 100 <= status < 200:
        await writer.drain()
        return True
    if "chunked" in named.get("transfer-encoding", ""):
        rewrite = usage is not None and usage.strip
        while True:
            size_line = await reader.readuntil(b"\r\n")
            size = int(size_line.split(b";")[0].strip() or b"0", 16)
            if size and usage is not None:
                data = await reader.readexactly(size + 2)
                passed = usage.feed(data[:-2])
                if not rewrite:
                    writer.write(size_line + data)
                elif passed:
                    writer.write(b"%x\r\n" % len(passed) + passed + b"\r\n")
                await writer.drain()
                continue
            if size == 0 and usage is not None:
                rest = usage.end()  # an event the engine ended without a blank line
                if rewrite and rest:
                    writer.write(b"%x\r\n" % len(rest) + rest + b"\r\n")
            writer.write(size_line)
            if size == 0:
                while True:  # trailers, then the blank line
                    trailer = await reader.readuntil(b"\r\n")
                    writer.write(trailer)
                    if trailer == b"\r\n":
                        break
                break
            writer.write(await reader.readexactly(size + 2))
            await writer.drain()
        await writer.drain()
        return named.get("connection") != "close"
    if "content-length" in named:
        left = int(named["content-length"])
        while left:
            piece = await reader.read(min(left, 65536))
            if not piece:
                raise ConnectionError("the engine closed mid-answer")
            if usage is not None:
                usage.watch(piece)
            writer.write(piece)
            left -= len(piece)
            await writer.drain()
        return named.get("connection") != "close"
    while True:  # neither: the body runs to the engine closing the connection
        piece = await reader.read(65536)
        if not piece:
            break
        if usage is not None:
            piece = usage.feed(piece)
        writer.write(piece)
        await writer.drain()
    if usage is not None:
        writer.write(usage.end())
        await writer.drain()
    return False
