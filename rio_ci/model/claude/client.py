"""Claude through the Messages API (Anthropic, Amazon Bedrock or Google Vertex) as a ``Model``.

Contract of ``AnthropicModel.ask``: one streamed HTTP request per call, never a hidden retry
(the SDK runs with ``max_retries=0``: the harness commits every attempt and its backoff). The
request is valid on every model in the table (``models.json``): no forced ``tool_choice``, no
sampling parameters, no assistant prefill; ``thinking`` and ``output_config.effort`` only as the
model's features allow. It returns a ``ModelReply`` for every complete reply the provider billed:

- exactly one ``step`` call whose input is ``{"patch": [objects]}`` → ``patch`` set;
- anything else (no call, several, another tool, malformed input, cut off at ``max_tokens``, a
  refusal) → ``invalid`` says what was wrong, in words the model can act on next attempt.

Either way ``usage`` is counted and priced (cache writes and reads at their own prices), and
``rationale`` is the reply's text, else its thinking summary. No usable answer raises
``ModelError``: transient for connection errors, timeouts, a stream that broke or ended early,
408/409/429/5xx/529 and ``overloaded_error`` events (``retry_after`` from ``retry-after-ms`` /
``retry-after``); not transient for any other 4xx, with the provider's own message.

``raw`` (what the harness commits) holds the response id, model, stop reason, tool input, usage
and rationale: never keys, headers or the request.
"""

from __future__ import annotations

import importlib.util
import json
import os
from dataclasses import replace
from typing import Any

import anthropic
import httpx2
from anthropic.types import Message, ThinkingConfigParam

from rio_ci.core.errors import ModelError, UsageError
from rio_ci.model import pictures
from rio_ci.model.base import ModelReply, ModelRequest, Price, Usage
from rio_ci.model.claude import table
from rio_ci.model.claude.failures import status_error
from rio_ci.model.claude.layout import system_blocks, user_content
from rio_ci.model.claude.tool import STEP_TOOL, step_patch, tool_for
from rio_ci.model.providers import DEFAULT_EFFORT
from rio_ci.model.turn import system_prompt

__all__ = ["PROVIDERS", "AnthropicModel"]

PROVIDERS = ("anthropic", "bedrock", "vertex")
RATIONALE_CHARS = 16_000
# Room kept free in a request with pictures, beyond the body measured without them: the
# notes of pictures left out, ``stream``, and the SDK's own JSON spacing.
REQUEST_MARGIN = 64 * 1024

_EXTRAS = {"bedrock": ("boto3", "botocore"), "vertex": ("google.auth",)}


class AnthropicModel:
    """A ``Model`` for one Claude model on one provider. ``name`` is ``provider:model``.

    ``effort`` is sent as ``output_config.effort`` where the model takes it (an extended-thinking
    model without it gets a thinking budget for that level instead); a level the model does not
    accept is a ``UsageError`` here, before any Turn. ``price`` (``--price``) replaces the
    table's price. ``max_tokens`` (default: by effort, from the table) is capped at the
    model's maximum output.

    Credentials come from the provider's usual environment: ``ANTHROPIC_API_KEY`` (and
    ``ANTHROPIC_BASE_URL``); for Bedrock ``AWS_BEARER_TOKEN_BEDROCK`` or the AWS credential chain
    and ``AWS_REGION``; for Vertex Google application default credentials,
    ``CLOUD_ML_REGION`` and ``ANTHROPIC_VERTEX_PROJECT_ID``. ``api_key`` overrides the key (the
    Bedrock API key, or a Vertex access token); ``base_url`` the endpoint.
    """

    def __init__(
        self,
        model: str,
        *,
        provider: str = "anthropic",
        effort: str = DEFAULT_EFFORT,
        price: Price | None = None,
        api_key: str | None = None,
        base_url: str | None = None,
        max_tokens: int | None = None,
        timeout: float = 600.0,
        region: str | None = None,
        project: str | None = None,
        connect: bool = True,
    ) -> None:
        """``connect=False``: no SDK client (and no credential check): enough to read the
        model's name and price, not to ask it anything."""
        if provider not in PROVIDERS:
            raise UsageError(f"unknown model provider {provider!r}: use one of {PROVIDERS}")
        gone = table.retired(model)
        if gone is not None:
            raise UsageError(
                f"{model} was retired on {gone.retired}; use {gone.replacement} (see {gone.source})"
            )
        self.info = table.lookup(model) or table.unlisted(model)
        self.name = f"{provider}:{model}"
        # A Claude API id is translated to the platform's id; a platform id (an inference
        # profile such as "global.anthropic.claude-…") is sent as given.
        plain = table.canonical(model) == model
        self.model = self.info.platform_id(provider) if plain and provider != "anthropic" else model
        self.provider = provider
        self.effort = _checked_effort(self.info, effort)
        self.max_tokens = (
            table.max_tokens(self.info, self.effort)
            if max_tokens is None
            else max(1, min(max_tokens, self.info.max_output))
        )
        self._price = price if price is not None else self.info.price_on(provider)
        self._client = (
            _client(
                provider,
                self.info,
                api_key=api_key,
                base_url=base_url,
                timeout=timeout,
                region=region,
                project=project,
            )
            if connect
            else None
        )

    def price(self) -> Price | None:
        return self._price

    def cost(self, usage: Usage) -> float | None:
        return None if self._price is None else self.info.cost(usage, self._price)

    def request_params(self, request: ModelRequest) -> dict[str, Any]:
        """The Messages API parameters for ``request`` (everything but ``stream``), with the
        pictures that fit the provider's limits and a note for each one left out
        (rio_ci/model/pictures.py): measured without them, they get the room left."""
        if not request.images:
            return self._params(request)
        limits = table.request_limits()
        bare = len(json.dumps(self._params(replace(request, images=()))))
        room = limits.request_bytes - bare - REQUEST_MARGIN
        return self._params(replace(request, images=pictures.fit(request.images, room, limits)))

    def _params(self, request: ModelRequest) -> dict[str, Any]:
        params: dict[str, Any] = {
            "model": self.model,
            "max_tokens": self.max_tokens,
            "system": system_blocks(system_prompt(), request.guidance),
            "messages": [{"role": "user", "content": user_content(request)}],
            "tools": [tool_for(self.info, STEP_TOOL)],
        }
        thinking = self._thinking()
        if thinking is not None:
            params["thinking"] = thinking
        if self.info.features.effort:
            params["output_config"] = {"effort": self.effort}
        return params

    def ask(self, request: ModelRequest) -> ModelReply:
        """Send one streamed request for ``request``'s Turn; see the module docstring."""
        if self._client is None:
            raise ModelError(
                f"{self.name} was built without a client (connect=False)", transient=False
            )
        answered = False  # the response had begun: a connection lost now broke the stream
        try:
            with self._client.messages.stream(**self.request_params(request)) as stream:
                answered = True
                message = stream.get_final_message()
        except anthropic.APIStatusError as exc:
            raise status_error(self.provider, self.model, exc) from exc
        except anthropic.APITimeoutError as exc:
            raise ModelError(f"{self.provider}: the request timed out", transient=True) from exc
        except anthropic.APIConnectionError as exc:
            what = "the response stream broke" if answered else "connection failed"
            raise ModelError(f"{self.provider}: {what}: {exc}", transient=True) from exc
        except anthropic.APIResponseValidationError as exc:
            raise ModelError(f"{self.provider}: malformed response: {exc}", transient=True) from exc
        except (httpx2.HTTPError, AssertionError) as exc:
            # The stream broke mid-way (a dropped connection, or nothing before message_stop).
            raise ModelError(
                f"{self.provider}: the response stream broke: {exc!r}", transient=True
            ) from exc
        except anthropic.AnthropicError as exc:
            raise ModelError(f"{self.provider}: {exc}", transient=False) from exc
        if message.stop_reason is None:
            raise ModelError(
                f"{self.provider}: the response stream ended before message_stop", transient=True
            )
        return self._reply(message)

    def verify(self) -> tuple[str, str] | None:
        """Whether the provider takes this key and knows this model, for the set-up check
        (docs/github.md): one read of the Models API (``GET /v1/models/{model_id}``, which
        costs no tokens). None when it answers, else ``(what, why)``: what was refused —
        ``key``, ``model`` or ``provider`` (unreachable, or another answer) — and why, in one
        line. Claude API only: Bedrock and Vertex check their credentials themselves."""
        if self._client is None or self.provider != "anthropic":
            raise ModelError(f"{self.name}: only the Claude API's key is checked", transient=False)
        try:
            self._client.models.retrieve(self.model)
        except anthropic.AuthenticationError as exc:
            return "key", f"the Claude API refused the key (HTTP 401: {_said(exc)})"
        except anthropic.PermissionDeniedError as exc:
            return "key", f"the key may not use the Claude API (HTTP 403: {_said(exc)})"
        except anthropic.NotFoundError as exc:
            why = f"the Claude API does not know the model {self.model} (HTTP 404: {_said(exc)})"
            return "model", why
        except anthropic.APIStatusError as exc:
            return "provider", f"the Claude API answered HTTP {exc.status_code}: {_said(exc)}"
        except anthropic.APIConnectionError as exc:
            return "provider", f"the Claude API could not be reached: {exc}"
        return None

    def _thinking(self) -> ThinkingConfigParam | None:
        features = self.info.features
        if features.thinking in ("adaptive", "adaptive_always_on"):
            if features.thinking_display:
                # The 5.x family omits thinking text by default; the summary is the rationale.
                return {"type": "adaptive", "display": "summarized"}
            return {"type": "adaptive"}
        if features.thinking == "extended":
            budget = min(table.thinking_budget(self.effort), self.max_tokens // 2)
            if budget >= 1024:
                return {"type": "enabled", "budget_tokens": budget}
        return None

    def _reply(self, message: Message) -> ModelReply:
        usage, usage_raw = self._usage(message)
        rationale = _rationale(message)
        calls = [block for block in message.content if block.type == "tool_use"]
        patch, invalid = step_patch(message, calls, self.max_tokens)
        raw: dict[str, Any] = {
            "id": message.id,
            "model": message.model,
            "stop_reason": message.stop_reason,
            "tool_input": calls[0].input if len(calls) == 1 else None,
            "tool_calls": [call.name for call in calls],
            "usage": usage_raw,
            "rationale": rationale,
        }
        if invalid:
            raw["invalid"] = invalid
        return ModelReply(patch=patch, usage=usage, raw=raw, rationale=rationale, invalid=invalid)

    def _usage(self, message: Message) -> tuple[Usage, dict[str, Any]]:
        u = message.usage
        usage = Usage(
            input_tokens=u.input_tokens,
            output_tokens=u.output_tokens,
            cache_write_tokens=u.cache_creation_input_tokens or 0,
            cache_read_tokens=u.cache_read_input_tokens or 0,
        )
        cost = self.cost(usage)
        usage = Usage(
            usage.input_tokens,
            usage.output_tokens,
            usage.cache_write_tokens,
            usage.cache_read_tokens,
            cost,
        )
        raw = {
            "input_tokens": usage.input_tokens,
            "output_tokens": usage.output_tokens,
            "cache_creation_input_tokens": usage.cache_write_tokens,
            "cache_read_input_tokens": usage.cache_read_tokens,
            "cost_usd": cost,
        }
        return usage, raw


def _checked_effort(info: table.ModelInfo, effort: str) -> str:
    if effort not in table.EFFORTS:
        raise UsageError(f"--effort must be one of {', '.join(table.EFFORTS)}; got {effort!r}")
    accepted = info.features.effort
    if accepted and effort not in accepted:
        raise UsageError(f"{info.id} accepts --effort {', '.join(accepted)}; got {effort!r}")
    return effort


def _rationale(message: Message) -> str:
    """The reply's text; else its thinking summary (the 5.x family writes the reasoning it
    shows between tool calls as thinking); clipped for the Journal."""
    texts = [b.text.strip() for b in message.content if b.type == "text" and b.text.strip()]
    if not texts:
        texts = [
            b.thinking.strip()
            for b in message.content
            if b.type == "thinking" and b.thinking.strip()
        ]
    text = "\n\n".join(texts)
    if len(text) > RATIONALE_CHARS:
        half = RATIONALE_CHARS // 2
        text = f"{text[:half]}\n[… {len(text) - 2 * half} characters elided …]\n{text[-half:]}"
    return text


def _said(exc: anthropic.APIStatusError) -> str:
    """The provider's own message of an error answer, in one line."""
    body = exc.body if isinstance(exc.body, dict) else {}
    error = body.get("error")
    message = error.get("message") if isinstance(error, dict) else None
    return " ".join(str(message or exc.message).split())


def _client(
    provider: str,
    info: table.ModelInfo,
    *,
    api_key: str | None,
    base_url: str | None,
    timeout: float,
    region: str | None,
    project: str | None,
) -> Any:
    """The SDK client for ``provider``; a clear ``ModelError`` when it cannot be built."""
    common: dict[str, Any] = {"max_retries": 0, "timeout": timeout}
    if provider == "anthropic":
        key = api_key or os.environ.get("ANTHROPIC_API_KEY")
        if not key:
            raise ModelError("no Anthropic API key: set ANTHROPIC_API_KEY", transient=False)
        return anthropic.Anthropic(
            api_key=key, base_url=base_url or os.environ.get("ANTHROPIC_BASE_URL") or None, **common
        )
    try:
        if provider == "bedrock":
            return _bedrock(info, api_key, base_url, region, common)
        return _vertex(api_key, base_url, region, project, common)
    except (ValueError, anthropic.AnthropicError) as exc:
        raise ModelError(f"{provider}: cannot build the client: {exc}", transient=False) from exc


def _bedrock(
    info: table.ModelInfo,
    api_key: str | None,
    base_url: str | None,
    region: str | None,
    common: dict[str, Any],
) -> Any:
    from anthropic.lib.bedrock import AnthropicBedrock, AnthropicBedrockMantle

    bearer = (
        api_key
        or os.environ.get("AWS_BEARER_TOKEN_BEDROCK")
        or os.environ.get("ANTHROPIC_AWS_API_KEY")
    )
    region = region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if info.bedrock_endpoint == "runtime":
        # The legacy InvokeModel stream is AWS event-stream, decoded by botocore.
        _require_extra("bedrock", "the legacy Bedrock endpoint of " + info.id)
        return AnthropicBedrock(api_key=bearer, aws_region=region, base_url=base_url, **common)
    if bearer is None:
        _require_extra("bedrock", "AWS SigV4 signing (or set AWS_BEARER_TOKEN_BEDROCK)")
    if region is None and base_url is None:
        raise ValueError("no AWS region: set AWS_REGION")
    return AnthropicBedrockMantle(api_key=bearer, aws_region=region, base_url=base_url, **common)


def _vertex(
    access_token: str | None,
    base_url: str | None,
    region: str | None,
    project: str | None,
    common: dict[str, Any],
) -> Any:
    from anthropic.lib.vertex import AnthropicVertex

    region = region or os.environ.get("CLOUD_ML_REGION")
    if not region:
        raise ValueError("no Vertex region: set CLOUD_ML_REGION (e.g. global or us-east5)")
    project = project or os.environ.get("ANTHROPIC_VERTEX_PROJECT_ID")
    if access_token is None:
        _require_extra("vertex", "Google application default credentials")
    elif not project:
        raise ValueError("no Google Cloud project: set ANTHROPIC_VERTEX_PROJECT_ID")
    kwargs: dict[str, Any] = {"project_id": project} if project else {}
    return AnthropicVertex(
        region=region, access_token=access_token, base_url=base_url, **kwargs, **common
    )


def _require_extra(provider: str, purpose: str) -> None:
    missing = [m for m in _EXTRAS[provider] if not _installed(m)]
    if missing:
        raise ModelError(
            f"{provider}: {purpose} needs {', '.join(missing)}: install 'rio-ci[{provider}]'",
            transient=False,
        )


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # a missing parent package of a dotted name
        return False
