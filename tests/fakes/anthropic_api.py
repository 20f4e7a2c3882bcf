"""A strict, stateful fake of the Anthropic Messages API for tests with the real SDK.

``FakeAnthropic`` serves 127.0.0.1 (a free port) from a thread, on the paths the SDK uses for
the Claude API and Bedrock's Messages endpoint (``POST /v1/messages``) and for Vertex
(``…/publishers/anthropic/models/MODEL:streamRawPredict`` / ``:rawPredict``). Every request is
recorded in ``requests`` (headers lower-cased, JSON body). It is first checked against the
model's rules (``anthropic_rules``): a request the real API would refuse gets the same 400 /
404 and uses up no scripted outcome. An acceptable request takes the next outcome from a FIFO
queue — a reply, an HTTP error, a stream that breaks — and an empty queue answers 500, so an
unexpected extra call (a hidden retry, say) is visible.

Replies stream as the API streams them (``stream: true``): ``message_start``, ``ping``, per
content block ``content_block_start`` / deltas (``thinking_delta`` + ``signature_delta``,
``text_delta``, ``input_json_delta`` in pieces) / ``content_block_stop``, then
``message_delta`` (stop reason, cumulative usage with cache fields) and ``message_stop``, in
chunked encoding. Thinking text is returned only when the request asks for
``display: summarized`` (or the model's default shows it), and only when thinking is on.
"""

from __future__ import annotations

import itertools
import json
import re
import threading
from collections import deque
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from types import TracebackType
from typing import Any, ClassVar

from rio_ci.commands.bench.caching import BreakpointError, PromptCache
from rio_ci.commands.bench.loopback import LoopbackServer
from rio_ci.commands.bench.sse import LAST_CHUNK, chunk, message_events
from tests.fakes import anthropic_rules as rules_
from tests.fakes.anthropic_rules import Refused

_VERTEX = re.compile(
    r"/publishers/anthropic/models/(?P<model>[^/:]+):(?P<verb>streamRawPredict|"
    r"rawPredict)$"
)


_MODEL = re.compile(r"/v1/models/([^/]+)")


@dataclass(frozen=True)
class ReceivedRequest:
    """One request as the fake saw it; header names are lower-cased."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any

    @property
    def api_key(self) -> str | None:
        """The credential sent: ``x-api-key``, or a bearer token."""
        if "x-api-key" in self.headers:
            return self.headers["x-api-key"]
        scheme, _, token = self.headers.get("authorization", "").partition(" ")
        return token if scheme.lower() == "bearer" and token else None

    @property
    def model(self) -> str:
        """The model id: from the body, or from the path on Vertex."""
        match = _VERTEX.search(self.path)
        if match:
            return match.group("model")
        return str(self.body.get("model", "")) if isinstance(self.body, dict) else ""

    @property
    def system_text(self) -> str:
        system = self.body.get("system", "")
        return system if isinstance(system, str) else "".join(b["text"] for b in system)

    @property
    def user_text(self) -> str:
        """Every text block of the (last) user message, joined."""
        return "\n".join(rules_.user_blocks(self.body))

    @property
    def images(self) -> list[dict[str, Any]]:
        """Every image block of the (last) user message, in order."""
        content = self.body["messages"][-1]["content"]
        if not isinstance(content, list):
            return []
        return [block for block in content if block.get("type") == "image"]

    def state(self) -> dict[str, Any]:
        """The State this request showed the model, rebuilt from its blocks."""
        return rules_.state_from(self.body)


@dataclass
class _Outcome:
    status: int = 200
    message: dict[str, Any] | None = None  # content, stop_reason, usage (+ stop_details)
    error_body: dict[str, Any] | None = None
    headers: dict[str, str] = field(default_factory=dict)
    delay: float = 0.0
    break_after: int | None = None  # stream only: send this many events, then drop the line
    clean_end: bool = False  # ... or end the body properly there
    error_event: dict[str, Any] | None = None  # stream only: an ``error`` event after ping


class FakeAnthropic:
    """Context manager running the fake server; ``base_url`` is what the SDK should use.

    With ``cache`` (the billing model the bench's provider uses, ``rio_ci/commands/bench/
    caching.py``), every reply's input usage is what that cache bills for the request, in
    place of the scripted token counts."""

    def __init__(self, cache: PromptCache | None = None) -> None:
        self.cache = cache
        # The Models API (GET /v1/models/{id}): the keys it takes and the models it knows;
        # None takes any key, knows any model.
        self.keys: set[str] | None = None
        self.models: set[str] | None = None
        self._lock = threading.Lock()
        self._queue: deque[_Outcome] = deque()
        self._requests: list[ReceivedRequest] = []
        self._pending_delay = 0.0
        self._ids = itertools.count(1)
        self._closing = threading.Event()
        self._http = LoopbackServer(_handler_for(self))

    @property
    def base_url(self) -> str:
        return self._http.base_url

    @property
    def requests(self) -> list[ReceivedRequest]:
        """A copy of every request received so far, in arrival order."""
        with self._lock:
            return list(self._requests)

    @property
    def pending(self) -> int:
        """Scripted outcomes not yet used."""
        with self._lock:
            return len(self._queue)

    def __enter__(self) -> FakeAnthropic:
        self._http.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        self._closing.set()  # wakes any handler sleeping in a scripted delay
        self._http.close()

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
        *,
        text: str | None = None,
        thinking: str | None = None,
    ) -> None:
        """A well-formed ``step`` call carrying ``patch``, after optional thinking and text."""
        content: list[dict[str, Any]] = []
        if thinking is not None:
            content.append({"type": "thinking", "thinking": thinking})
        if text is not None:
            content.append({"type": "text", "text": text})
        content.append(
            {
                "type": "tool_use",
                "id": f"toolu_{next(self._ids)}",
                "name": "step",
                "input": {"patch": patch},
            }
        )
        self.reply_raw(
            content,
            "tool_use",
            input_tokens,
            output_tokens,
            cache_creation_input_tokens,
            cache_read_input_tokens,
        )

    def reply_raw(
        self,
        content: list[dict[str, Any]],
        stop_reason: str = "end_turn",
        input_tokens: int = 100,
        output_tokens: int = 20,
        cache_creation_input_tokens: int | None = None,
        cache_read_input_tokens: int | None = None,
        stop_details: dict[str, Any] | None = None,
    ) -> None:
        """A 200 reply with exactly these content blocks and stop reason."""
        usage: dict[str, Any] = {
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "cache_creation_input_tokens": cache_creation_input_tokens or 0,
            "cache_read_input_tokens": cache_read_input_tokens or 0,
        }
        message = {
            "content": content,
            "stop_reason": stop_reason,
            "usage": usage,
            "stop_details": stop_details,
        }
        self._push(_Outcome(message=message))

    def malformed(self, kind: str = "missing") -> None:
        """A ``step`` call whose input lacks ``patch`` (``missing``) or holds a string."""
        tool_input: dict[str, Any] = {} if kind == "missing" else {"patch": "not a list"}
        self.reply_raw(
            [{"type": "tool_use", "id": "toolu_bad", "name": "step", "input": tool_input}],
            stop_reason="tool_use",
        )

    def refusal(self, category: str | None = "cyber") -> None:
        """A billed refusal: HTTP 200, ``stop_reason: refusal``, with ``stop_details``."""
        self.reply_raw(
            [{"type": "text", "text": "I can't help with that."}],
            "refusal",
            stop_details={"type": "refusal", "category": category, "explanation": None},
        )

    def error(
        self,
        status: int,
        error_type: str,
        message: str = "scripted error",
        headers: dict[str, str] | None = None,
        details: dict[str, Any] | None = None,
    ) -> None:
        """An HTTP error in the API's documented shape (``details``: ``error.details``)."""
        error: dict[str, Any] = {"type": error_type, "message": message}
        if details is not None:
            error["details"] = details
        body = {"type": "error", "error": error, "request_id": "req_fake"}
        self._push(_Outcome(status=status, error_body=body, headers=dict(headers or {})))

    def overloaded(self, retry_after: float | None = None) -> None:
        """HTTP 529 ``overloaded_error``, with a ``retry-after`` header when given."""
        headers = {} if retry_after is None else {"retry-after": f"{retry_after:g}"}
        self.error(529, "overloaded_error", "Overloaded", headers)

    def rate_limited(
        self, retry_after: float | None = None, retry_after_ms: float | None = None
    ) -> None:
        """HTTP 429 ``rate_limit_error`` with ``retry-after`` / ``retry-after-ms`` headers."""
        headers = {} if retry_after is None else {"retry-after": f"{retry_after:g}"}
        if retry_after_ms is not None:
            headers["retry-after-ms"] = f"{retry_after_ms:g}"
        self.error(
            429,
            "rate_limit_error",
            "Number of request tokens has exceeded your per-minute rate limit",
            headers,
        )

    def spend_limited(self) -> None:
        """The tier's monthly spend cap (the rate-limits page): HTTP 429 ``rate_limit_error``
        with ``error.details.error_code: enforced_spend_limit_reached`` and no ``retry-after``."""
        self.error(
            429,
            "rate_limit_error",
            "You have reached your API usage limits: your organization has crossed its monthly "
            "API usage threshold, set based on your organization's API tier. You will regain "
            "access on 2027-01-01 at 00:00 UTC.",
            details={"error_code": "enforced_spend_limit_reached"},
        )

    def break_stream(self, patch: Any, after_events: int = 4, *, clean: bool = False) -> None:
        """A streamed reply whose connection drops after ``after_events`` events (``clean``:
        the body ends properly there, without ``message_stop``)."""
        self.reply_patch(patch)
        with self._lock:
            self._queue[-1].break_after = after_events
            self._queue[-1].clean_end = clean

    def stream_error(self, error_type: str = "overloaded_error") -> None:
        """HTTP 200 whose stream carries an ``error`` event (the API's mid-stream overload)."""
        self.reply_patch([])
        with self._lock:
            self._queue[-1].error_event = {
                "type": "error",
                "error": {"type": error_type, "message": "Overloaded"},
            }

    def _push(self, outcome: _Outcome) -> None:
        with self._lock:
            outcome.delay, self._pending_delay = self._pending_delay, 0.0
            self._queue.append(outcome)

    # -- serving -----------------------------------------------------------------------------

    def _take(self, request: ReceivedRequest) -> tuple[int, dict[str, str], Any, float]:
        """Record ``request`` and decide (status, headers, body, delay) for it. A 200 body is
        a complete Message; the handler streams it when the request asked to stream."""
        with self._lock:
            self._requests.append(request)
        model = _MODEL.fullmatch(request.path)
        if request.method == "GET" and model:
            return self._model(request, model[1])
        if request.method != "POST" or not (
            request.path == "/v1/messages" or _VERTEX.search(request.path)
        ):
            return 404, {}, _error_body("not_found_error", "unknown path"), 0.0
        try:
            rules = rules_.check(request.body, request.model)
        except Refused as refused:
            return refused.status, {}, _error_body(refused.kind, refused.message), 0.0
        with self._lock:
            if not self._queue:
                return 500, {}, _error_body("api_error", "fake: no scripted outcome left"), 0.0
            try:
                billed = None if self.cache is None else self.cache.bill(request.body)
            except BreakpointError as exc:
                return 400, {}, _error_body("invalid_request_error", str(exc)), 0.0
            outcome = self._queue.popleft()
            number = next(self._ids)
        if billed is not None and outcome.message is not None:
            usage = {
                **outcome.message["usage"],
                "input_tokens": billed.input_tokens,
                "cache_creation_input_tokens": billed.cache_creation_input_tokens,
                "cache_read_input_tokens": billed.cache_read_input_tokens,
            }
            outcome.message = {**outcome.message, "usage": usage}
        if outcome.message is None:
            return outcome.status, outcome.headers, outcome.error_body, outcome.delay
        body = {
            "id": f"msg_fake_{number}",
            "type": "message",
            "role": "assistant",
            "model": request.model,
            "stop_sequence": None,
            **_shown(outcome.message, request.body, rules),
        }
        if outcome.break_after is not None:
            body["_break_after"] = outcome.break_after
            body["_clean_end"] = outcome.clean_end
        if outcome.error_event is not None:
            body["_error_event"] = outcome.error_event
        return 200, outcome.headers, body, outcome.delay

    def _model(
        self, request: ReceivedRequest, model: str
    ) -> tuple[int, dict[str, str], Any, float]:
        """The Models API's Get a Model: 401 for a key it does not take, 404 for a model it
        does not know (the API's error shapes), else the model."""
        if self.keys is not None and request.api_key not in self.keys:
            return 401, {}, _error_body("authentication_error", "invalid x-api-key"), 0.0
        if self.models is not None and model not in self.models:
            return 404, {}, _error_body("not_found_error", f"model: {model}"), 0.0
        body = {
            "type": "model",
            "id": model,
            "display_name": model,
            "created_at": "2026-01-01T00:00:00Z",
        }
        return 200, {}, body, 0.0


def _shown(message: dict[str, Any], request: dict[str, Any], rules: rules_.Rules) -> dict[str, Any]:
    """``message`` as this request would see it: thinking blocks only when thinking is on,
    their text only when the display shows it, each with a signature."""
    active = rules_.thinking_active(request, rules)
    visible = rules_.display(request, rules) == "summarized"
    content = []
    for block in message["content"]:
        if block["type"] == "thinking":
            if not active:
                continue
            block = {
                **block,
                "thinking": block["thinking"] if visible else "",
                "signature": "sig_fake",
            }
        content.append(block)
    return {**message, "content": content}


def _error_body(error_type: str, message: str) -> dict[str, Any]:
    return {
        "type": "error",
        "error": {"type": error_type, "message": message},
        "request_id": "req_fake",
    }


def _events(body: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """The SSE events that stream the complete Message ``body`` as the API does: deltas in
    pieces, a ``ping`` after ``message_start``, or the scripted ``error`` event there."""
    start, *rest = message_events(body, piece=7)
    events = [start, ("ping", {"type": "ping"})]
    if "_error_event" in body:
        return [*events, ("error", body["_error_event"])]
    return [*events, *rest]


class _Handler(BaseHTTPRequestHandler):
    fake: ClassVar[FakeAnthropic]  # set by _handler_for
    protocol_version = "HTTP/1.1"  # chunked streams, so a dropped line is detectable

    def do_POST(self) -> None:
        self._serve()

    def do_GET(self) -> None:
        self._serve()

    def _serve(self) -> None:
        self.close_connection = True
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            body: Any = json.loads(raw) if raw else None
        except ValueError:
            body = raw.decode("utf-8", "replace")
        headers = {name.lower(): value for name, value in self.headers.items()}
        received = ReceivedRequest(self.command, self.path.split("?")[0], headers, body)
        if len(raw) > rules_.REQUEST_BYTES:  # Cloudflare's answer, before the API looks
            with self.fake._lock:
                self.fake._requests.append(received)
            message = "Request exceeds the maximum allowed number of bytes."
            self._send_json(413, _error_body("request_too_large", message), {})
            return
        status, extra, reply, delay = self.fake._take(received)
        if delay and self.fake._closing.wait(delay):
            return
        streaming = isinstance(body, dict) and (
            body.get("stream") is True or received.path.endswith(":streamRawPredict")
        )
        try:
            if status == 200 and streaming:
                self._stream(reply, extra)
            else:
                reply = {k: v for k, v in reply.items() if not k.startswith("_")}
                self._send_json(status, reply, extra)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (its timeout fired during a scripted delay)

    def _send_json(self, status: int, reply: Any, extra: dict[str, str]) -> None:
        data = json.dumps(reply).encode()
        self.send_response(status)
        self._headers(
            {"content-type": "application/json", "content-length": str(len(data)), **extra}
        )
        self.wfile.write(data)

    def _stream(self, body: dict[str, Any], extra: dict[str, str]) -> None:
        self.send_response(200)
        self._headers(
            {"content-type": "text/event-stream", "transfer-encoding": "chunked", **extra}
        )
        events = _events(body)
        limit = body.get("_break_after")
        for number, (name, data) in enumerate(events):
            if limit is not None and number >= limit:
                if body.get("_clean_end"):
                    self.wfile.write(LAST_CHUNK)
                self.wfile.flush()
                return  # unless clean, no terminating chunk: the client sees the line drop
            self.wfile.write(chunk(name, data))
        self.wfile.write(LAST_CHUNK)

    def _headers(self, headers: dict[str, str]) -> None:
        self.send_header("request-id", "req_fake")
        self.send_header("connection", "close")
        for name, value in headers.items():
            self.send_header(name, value)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        pass  # requests are recorded in ``self.fake.requests`` instead


def _handler_for(fake: FakeAnthropic) -> type[BaseHTTPRequestHandler]:
    return type("Handler", (_Handler,), {"fake": fake})
