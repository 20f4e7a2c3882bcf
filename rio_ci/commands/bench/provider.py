"""The bench's loopback Messages API: it bills prompt caching (``caching.PromptCache``) and
answers every request with one streamed ``step`` call from a script.

It serves ``POST /v1/messages`` on 127.0.0.1 (a free port) from a thread, for the real
anthropic SDK. Each request is billed against the cache before it is answered; a request
with more than 4 breakpoints gets the API's 400. The answer's patch comes from ``script``,
called with the request body; ``arrivals`` records when each request arrived
(``time.monotonic()``), which is how ``start_to_first_request_seconds`` is read. The tests'
fake (``tests/fakes/anthropic_api.py``) is the strict one; this one only streams what the
bench needs and bills like the API.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from types import TracebackType
from typing import Any

from rio_ci.commands.bench.caching import Billed, BreakpointError, PromptCache
from rio_ci.commands.bench.loopback import LoopbackServer
from rio_ci.commands.bench.sse import LAST_CHUNK, chunk, message_events

__all__ = ["LoopbackProvider"]

Script = Callable[[dict[str, Any]], list[dict[str, Any]]]


class LoopbackProvider:
    """Context manager running the server; ``base_url`` is what the SDK should use."""

    def __init__(self, script: Script, cache: PromptCache | None = None) -> None:
        self.script = script
        self.cache = cache if cache is not None else PromptCache()
        self.billed: list[Billed] = []
        self.arrivals: list[float] = []
        self._lock = threading.Lock()
        self._http = LoopbackServer(_handler_for(self))

    @property
    def base_url(self) -> str:
        return self._http.base_url

    def __enter__(self) -> LoopbackProvider:
        self._http.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._http.close()

    def answer(self, body: Any) -> tuple[int, dict[str, Any]]:
        """(status, body) for one request: a Message, or the API's error body."""
        with self._lock:
            self.arrivals.append(time.monotonic())
            if not isinstance(body, dict):
                return 400, _error("request body must be a JSON object")
            try:
                billed = self.cache.bill(body)
            except BreakpointError as exc:
                return 400, _error(str(exc))
            self.billed.append(billed)
            number = len(self.billed)
            patch = self.script(body)
        usage = {
            "input_tokens": billed.input_tokens,
            "cache_creation_input_tokens": billed.cache_creation_input_tokens,
            "cache_read_input_tokens": billed.cache_read_input_tokens,
            "output_tokens": 40 + len(json.dumps(patch)) // 4,
        }
        call = {"type": "tool_use", "id": f"toolu_{number}", "name": "step"}
        message = {
            "id": f"msg_bench_{number}",
            "type": "message",
            "role": "assistant",
            "model": body.get("model"),
            "content": [{**call, "input": {"patch": patch}}],
            "stop_reason": "tool_use",
            "stop_sequence": None,
            "usage": usage,
        }
        return 200, message


def _error(message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": "invalid_request_error", "message": message}}


def _handler_for(provider: LoopbackProvider) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            self.close_connection = True
            raw = self.rfile.read(int(self.headers.get("content-length") or 0))
            try:
                body: Any = json.loads(raw)
            except ValueError:
                body = None
            if self.path.split("?")[0] != "/v1/messages":
                status, reply = 404, _error("unknown path")
            else:
                status, reply = provider.answer(body)
            if status != 200 or not (isinstance(body, dict) and body.get("stream")):
                data = json.dumps(reply).encode()
                self._start(status, "application/json", len(data))
                self.wfile.write(data)
                return
            self._start(200, "text/event-stream", None)
            for name, event in message_events(reply):
                self.wfile.write(chunk(name, event))
            self.wfile.write(LAST_CHUNK)

        def _start(self, status: int, kind: str, length: int | None) -> None:
            self.send_response(status)
            self.send_header("content-type", kind)
            self.send_header("connection", "close")
            if length is None:
                self.send_header("transfer-encoding", "chunked")
            else:
                self.send_header("content-length", str(length))
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler
