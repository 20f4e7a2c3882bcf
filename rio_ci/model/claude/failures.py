"""What a provider's error answer means: transient (ask again later) or final (docs/models.md).

Transient: 408, 409, 429, 5xx and 529, and ``overloaded_error`` / ``api_error`` /
``rate_limit_error`` / ``timeout_error`` events inside a stream, with the wait from
``retry-after-ms`` / ``retry-after``. Final: any other 4xx, and — whatever the status — a spend
cap (``error.details.error_code: enforced_spend_limit_reached``, a 429 no wait clears) and a
``billing_error``. A 404 for the model names what to use instead, from the model table.
"""

from __future__ import annotations

import email.utils
import time
from typing import Any

import anthropic

from rio_ci.core.errors import ModelError
from rio_ci.model.claude import table

__all__ = ["status_error"]

# Status codes where another attempt may succeed (5xx and 529 too); and the error types a
# stream reports mid-way (HTTP 200 already sent) that mean the same.
_RETRYABLE_STATUS = frozenset({408, 409, 429})
_RETRYABLE_TYPES = frozenset({"overloaded_error", "api_error", "rate_limit_error", "timeout_error"})
# Final whatever the status: a spend cap (a 429 without retry-after, docs/models.md) and
# billing problems.
_FINAL_CODES = frozenset({"enforced_spend_limit_reached"})
_FINAL_TYPES = frozenset({"billing_error"})


def status_error(provider: str, model: str, exc: anthropic.APIStatusError) -> ModelError:
    status = exc.status_code
    kind, text, code = _error_body(exc)
    if status == 200:  # an ``error`` event inside a stream that had begun
        transient = kind in _RETRYABLE_TYPES
    else:
        transient = status in _RETRYABLE_STATUS or status >= 500
    label = f"HTTP {status}" if status != 200 else "stream error"
    detail = f"{kind} ({code})" if code else kind
    message = f"{provider} {label}: {detail}: {text}"
    if code in _FINAL_CODES or kind in _FINAL_TYPES:
        # A spend cap or a billing problem: asking again fails until a person acts.
        transient = False
        message += " — an account limit, not retried"
    elif status == 404 and kind == "not_found_error":
        message += _replacement_hint(model)
    # An error answered before any output (status != 200) is not billed; one inside a stream
    # that had begun may have been, so its usage stays unknown.
    return ModelError(
        message,
        transient=transient,
        retry_after=_retry_after(exc.response.headers) if transient else None,
        status=status if status != 200 else None,
    )


def _replacement_hint(model: str) -> str:
    """What to use instead of a model the provider does not know (from the model table)."""
    gone = table.retired(model)
    if gone is not None:
        return f" — {gone.id} was retired on {gone.retired}; use {gone.replacement}"
    if table.lookup(model) is None:
        return f" — the model table does not list {model}; the default is {table.default_model()}"
    return ""


def _error_body(exc: anthropic.APIStatusError) -> tuple[str, str, str | None]:
    """The provider's own error type, message and ``error.details.error_code`` when the body
    has the documented shape."""
    body = exc.body
    error = body.get("error") if isinstance(body, dict) else None
    if isinstance(error, dict) and isinstance(error.get("message"), str):
        details = error.get("details")
        code = details.get("error_code") if isinstance(details, dict) else None
        return str(error.get("type", "error")), error["message"], str(code) if code else None
    return "error", exc.message, None


def _retry_after(headers: Any) -> float | None:
    """Seconds to wait from ``retry-after-ms`` or ``retry-after`` (seconds or an HTTP date)."""
    millis = headers.get("retry-after-ms")
    if millis is not None:
        try:
            return max(float(millis) / 1000, 0.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(when.timestamp() - time.time(), 0.0)
