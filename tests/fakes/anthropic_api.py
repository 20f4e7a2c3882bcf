"""A small stateful fake of the Anthropic Messages API for tests with the real SDK.

``FakeAnthropic`` serves ``POST /v1/messages`` on 127.0.0.1 (a free port) from a thread. Each
request takes the next scripted outcome from a FIFO queue (``reply_patch``, ``reply_raw``,
``malformed``, ``error``, ``overloaded``); an empty queue answers HTTP 500 with an API error
body, so an unexpected extra call (a hidden retry, say) is visible. Every request's headers and
JSON body are recorded in ``requests``. Replies are complete Messages API JSON so the SDK parses
them as it would real ones.

Streaming is not implemented: rio_ci does not stream, since only complete replies are committed.
"""

from __future__ import annotations

import itertools
import json
import threading
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any


@dataclass(frozen=True)
class ReceivedRequest:
    """One request as the fake saw it; header names are lower-cased."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any

    @property
    def api_key(self) -> str | None:
        """The credential sent: ``x-api-key``, or a bearer token (the SDK's newer releases send
        an explicit ``api_key`` as ``Authorization: Bearer``)."""
        if "x-api-key" in self.headers:
            return self.headers["x-api-key"]
        scheme, _, token = self.headers.get("authorization", "").partition(" ")
        return token if scheme.lower() == "bearer" and token else None


@dataclass
class _Outcome:
    """What to answer one request with. ``message`` set: a 200 Messages reply built around it
    (the model name is echoed from the request); otherwise ``status`` with ``error_body``."""

    status: int = 200
    message: dict[str, Any] | None = None
    error_body: dict[str, Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0


class FakeAnthropic:
    """Context manager running the fake server; ``base_url`` is what the SDK should use."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queue: deque[_Outcome] = deque()
        self._requests: list[ReceivedRequest] = []
        self._pending_delay = 0.0
        self._ids = itertools.count(1)
        self._closing = threading.Event()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        # A short poll interval keeps ``close`` (which waits for one poll) fast in tests.
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def requests(self) -> list[ReceivedRequest]:
        """A copy of every request received so far, in arrival order."""
        with self._lock:
            return list(self._requests)

    def __enter__(self) -> FakeAnthropic:
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        # Wake any handler sleeping in a scripted delay so shutdown is prompt.
        self._closing.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    # -- scripting ---------------------------------------------------------------------------

    def delay(self, seconds: float) -> None:
        """Delay the answer of the next outcome queued after this call by ``seconds``."""
        with self._lock:
            self._pending_delay = seconds

    def reply_patch(
        self,
        patch: Any,
        input_tokens: int = 100,
        output_tokens: int = 20,
        cache_creation_input_tokens: int | None = None,
        cache_read_input_tokens: int | None = None,
    ) -> None:
        """A well-formed forced ``step`` call carrying ``patch``."""
        block = {"type": "tool_use", "id": "toolu_fake", "name": "step", "input": {"patch": patch}}
        usage: dict[str, Any] = {"input_tokens": input_tokens, "output_tokens": output_tokens}
        if cache_creation_input_tokens is not None:
            usage["cache_creation_input_tokens"] = cache_creation_input_tokens
        if cache_read_input_tokens is not None:
            usage["cache_read_input_tokens"] = cache_read_input_tokens
        self._push_message([block], "tool_use", usage)

    def reply_raw(
        self,
        content: list[dict[str, Any]],
        stop_reason: str = "end_turn",
        input_tokens: int = 100,
        output_tokens: int = 20,
    ) -> None:
        """A 200 reply with exactly these content blocks and stop reason."""
        usage = {"input_tokens": input_tokens, "output_tokens": output_tokens}
        self._push_message(content, stop_reason, usage)

    def malformed(self, kind: str = "missing") -> None:
        """A ``step`` call whose input lacks ``patch`` (``kind="missing"``) or holds a string
        (``kind="string"``)."""
        tool_input: dict[str, Any] = {} if kind == "missing" else {"patch": "not a list"}
        block = {"type": "tool_use", "id": "toolu_fake", "name": "step", "input": tool_input}
        self.reply_raw([block], stop_reason="tool_use")

    def error(
        self,
        status: int,
        error_type: str,
        message: str = "scripted error",
        headers: dict[str, str] | None = None,
    ) -> None:
        """An HTTP error in the API's documented shape."""
        body = {"type": "error", "error": {"type": error_type, "message": message}}
        self._push(_Outcome(status=status, error_body=body, headers=dict(headers or {})))

    def overloaded(self, retry_after: float | None = None) -> None:
        """HTTP 529 ``overloaded_error``, with a ``retry-after`` header when given."""
        headers = {} if retry_after is None else {"retry-after": f"{retry_after:g}"}
        self.error(529, "overloaded_error", "Overloaded", headers)

    def _push_message(
        self, content: list[dict[str, Any]], stop_reason: str, usage: dict[str, Any]
    ) -> None:
        message = {"content": content, "stop_reason": stop_reason, "usage": usage}
        self._push(_Outcome(message=message))

    def _push(self, outcome: _Outcome) -> None:
        with self._lock:
            outcome.delay, self._pending_delay = self._pending_delay, 0.0
            self._queue.append(outcome)

    # -- serving -----------------------------------------------------------------------------

    def _take(self, request: ReceivedRequest) -> tuple[int, dict[str, str], Any, float]:
        """Record ``request`` and decide (status, headers, body, delay) for it."""
        with self._lock:
            self._requests.append(request)
            if request.method != "POST" or request.path != "/v1/messages":
                return 404, {}, _error_body("not_found_error", "unknown path"), 0.0
            if not self._queue:
                return 500, {}, _error_body("api_error", "fake: no scripted outcome left"), 0.0
            outcome = self._queue.popleft()
            number = next(self._ids)
        if outcome.message is None:
            return outcome.status, outcome.headers, outcome.error_body, outcome.delay
        model = request.body.get("model", "unknown") if isinstance(request.body, dict) else ""
        body = {
            "id": f"msg_fake_{number}",
            "type": "message",
            "role": "assistant",
            "model": model,
            "stop_sequence": None,
            **outcome.message,
        }
        return 200, outcome.headers, body, outcome.delay


def _error_body(error_type: str, message: str) -> dict[str, Any]:
    return {"type": "error", "error": {"type": error_type, "message": message}}


def _handler_for(fake: FakeAnthropic) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self._serve()

        def do_GET(self) -> None:
            self._serve()

        def _serve(self) -> None:
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body: Any = json.loads(raw) if raw else None
            except ValueError:
                body = raw.decode("utf-8", "replace")
            headers = {name.lower(): value for name, value in self.headers.items()}
            received = ReceivedRequest(self.command, self.path.split("?")[0], headers, body)
            status, extra_headers, reply, delay = fake._take(received)
            if delay and fake._closing.wait(delay):
                return
            data = json.dumps(reply).encode()
            try:
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.send_header("request-id", "req_fake")
                for name, value in extra_headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                # The client gave up (e.g. its timeout fired during a scripted delay).
                pass

        def log_message(self, format: str, *args: Any) -> None:
            # Keep test output quiet; requests are recorded in ``fake.requests`` instead.
            pass

    return Handler
