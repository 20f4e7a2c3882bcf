"""The Messages API's stream, written: a complete Message as the server-sent events the API
sends for it, each in one HTTP/1.1 chunk.

``message_start`` (the Message with no content, no stop reason and one output token), then per
content block ``content_block_start`` / its deltas (``thinking_delta`` + ``signature_delta``,
``text_delta``, ``input_json_delta``) / ``content_block_stop``, then ``message_delta`` (the stop
reason, ``stop_details`` when there are any, the cumulative usage) and ``message_stop``. The
bench's loopback provider streams with it, and so does the tests' fake of the API
(``tests/fakes/anthropic_api.py``), which adds its own ``ping`` and broken streams.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["LAST_CHUNK", "chunk", "message_events"]

Event = tuple[str, dict[str, Any]]

# The zero-length chunk that ends a chunked body: a stream without it is a dropped line.
LAST_CHUNK = b"0\r\n\r\n"


def chunk(name: str, data: dict[str, Any]) -> bytes:
    """One event, ``event: NAME`` and its JSON ``data``, as one chunk of a chunked body."""
    event = f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()
    return b"%x\r\n%s\r\n" % (len(event), event)


def message_events(message: dict[str, Any], piece: int | None = None) -> list[Event]:
    """The events that stream ``message`` (keys starting with ``_`` are not the Message's and
    are left out). ``piece``: each delta carries at most that many characters; ``None``, one
    delta carries a block's whole text."""
    usage = message["usage"]
    start = {
        **{k: v for k, v in message.items() if not k.startswith("_")},
        "content": [],
        "stop_reason": None,
        "usage": {**usage, "output_tokens": 1},
    }
    start.pop("stop_details", None)
    events: list[Event] = [("message_start", {"type": "message_start", "message": start})]
    for index, block in enumerate(message["content"]):
        events += _block_events(index, block, piece)
    delta = {"stop_reason": message["stop_reason"], "stop_sequence": None}
    if message.get("stop_details"):
        delta["stop_details"] = message["stop_details"]
    events.append(("message_delta", {"type": "message_delta", "delta": delta, "usage": usage}))
    events.append(("message_stop", {"type": "message_stop"}))
    return events


def _block_events(index: int, block: dict[str, Any], piece: int | None) -> list[Event]:
    kind = block["type"]
    first: dict[str, Any]
    deltas: list[dict[str, Any]]
    if kind == "thinking":
        first = {"type": "thinking", "thinking": "", "signature": ""}
        deltas = [
            {"type": "thinking_delta", "thinking": part}
            for part in _pieces(block["thinking"], piece)
        ]
        deltas.append({"type": "signature_delta", "signature": block["signature"]})
    elif kind == "text":
        first = {"type": "text", "text": ""}
        deltas = [{"type": "text_delta", "text": part} for part in _pieces(block["text"], piece)]
    elif kind == "tool_use":
        first = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
        deltas = [
            {"type": "input_json_delta", "partial_json": part}
            for part in _pieces(json.dumps(block["input"]), piece)
        ]
    else:
        raise ValueError(f"cannot stream a {kind!r} block")
    return [
        (
            "content_block_start",
            {"type": "content_block_start", "index": index, "content_block": first},
        ),
        *[
            ("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})
            for delta in deltas
        ],
        ("content_block_stop", {"type": "content_block_stop", "index": index}),
    ]


def _pieces(text: str, size: int | None) -> list[str]:
    if size is None:
        return [text]
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]
