"""Downloading an artifact's zip with plain ``urllib``: the token goes only to the API
endpoint; the redirect target (a pre-signed URL) is fetched without it."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from http.client import HTTPResponse
from pathlib import Path

from rio_ci.core.errors import ForgeError, StorageError
from rio_ci.core.json_value import ascii_int
from rio_ci.forge.github_limits import Limited, refusal
from rio_ci.untrusted.redirects import SurfaceRedirects, TooManyRedirects, follow

_MAX_HOPS = 5  # requests, the API's included
_CHUNK = 1024 * 1024
_USER_AGENT = "rio-ci"


def fetch_zip(
    url: str, token: str, dest: Path, *, artifact_id: int, max_bytes: int, timeout: int
) -> Path:
    """GET ``url`` into ``dest``. More than ``max_bytes`` raises ``StorageError`` and leaves
    no file behind; an HTTP or network failure raises ``ForgeError``."""
    what = f"downloading artifact {artifact_id}"
    try:
        with _follow(url, token, what, timeout) as response:
            declared = ascii_int(response.headers.get("Content-Length") or "")
            if declared is not None and declared > max_bytes:
                raise StorageError(
                    f"artifact {artifact_id} is {declared} bytes, over the {max_bytes}-byte limit"
                )
            partial = dest.with_name(dest.name + ".part")
            try:
                _stream(response, partial, max_bytes, artifact_id)
                os.replace(partial, dest)
            finally:
                partial.unlink(missing_ok=True)
    except OSError as exc:  # urllib's errors are OSErrors
        raise ForgeError(f"GitHub: {what} failed: {exc}") from exc
    return dest


def _stream(response: HTTPResponse, partial: Path, max_bytes: int, artifact_id: int) -> None:
    received = 0
    with partial.open("wb") as out:
        while chunk := response.read(_CHUNK):
            received += len(chunk)
            if received > max_bytes:
                raise StorageError(f"artifact {artifact_id} exceeds the {max_bytes}-byte limit")
            out.write(chunk)


def _message(exc: urllib.error.HTTPError) -> str:
    """The ``message`` of an error answer's JSON body (a few KiB at most), or its reason."""
    try:
        data = json.loads(exc.read(64 * 1024) or b"{}")
    except (OSError, ValueError):
        data = None
    return str(data.get("message") or "") if isinstance(data, dict) else str(exc.reason)


@contextmanager
def _follow(url: str, token: str, what: str, timeout: int) -> Iterator[HTTPResponse]:
    """GET ``url`` with the token, then follow redirects by hand without it."""
    opener = urllib.request.build_opener(SurfaceRedirects)
    request = urllib.request.Request(
        url,
        headers={
            "Authorization": f"Bearer {token}",
            "Accept": "application/vnd.github+json",
            "User-Agent": _USER_AGENT,
        },
    )

    def without_token(target: str, status: int) -> urllib.request.Request:
        if urllib.parse.urlsplit(target).scheme not in ("http", "https"):
            raise ForgeError(f"GitHub: {what} failed: redirect to a non-HTTP URL", status=status)
        return urllib.request.Request(target, headers={"User-Agent": _USER_AGENT})

    try:
        response = follow(opener, request, without_token, redirects=_MAX_HOPS - 1, timeout=timeout)
    except urllib.error.HTTPError as exc:
        limited = refusal(exc.code, dict((exc.headers or {}).items()), _message(exc))
        if limited is not None:  # the API's answer: the blob store has no rate limit
            raise Limited(f"GitHub: {what} failed: rate limited ({limited})", limited) from exc
        message = f"GitHub: {what} failed: HTTP {exc.code} {exc.reason}"
        raise ForgeError(message, status=exc.code) from exc
    except TooManyRedirects:
        raise ForgeError(f"GitHub: {what} failed: more than {_MAX_HOPS} redirects") from None
    with response:
        yield response
