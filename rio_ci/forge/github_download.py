"""Downloading an artifact's zip with plain ``urllib``: the token goes only to the API
endpoint; the redirect target (a pre-signed URL) is fetched without it."""

from __future__ import annotations

import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from email.message import Message
from http.client import HTTPResponse
from pathlib import Path
from typing import IO

from rio_ci.core.state import ascii_int
from rio_ci.errors import ForgeError, StorageError

_REDIRECTS = frozenset({301, 302, 303, 307, 308})
_MAX_HOPS = 5
_CHUNK = 1024 * 1024
_USER_AGENT = "rio-ci"


class _KeepRedirects(urllib.request.HTTPRedirectHandler):
    """Surface every redirect as an HTTPError so the caller decides which headers travel."""

    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: IO[bytes],
        code: int,
        msg: str,
        headers: Message,
        newurl: str,
    ) -> urllib.request.Request | None:
        return None


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


@contextmanager
def _follow(url: str, token: str, what: str, timeout: int) -> Iterator[HTTPResponse]:
    """GET ``url`` with the token, then follow redirects by hand without it."""
    opener = urllib.request.build_opener(_KeepRedirects)
    request = urllib.request.Request(
        url,
        headers={
            "Authorization": f"Bearer {token}",
            "Accept": "application/vnd.github+json",
            "User-Agent": _USER_AGENT,
        },
    )
    for _ in range(_MAX_HOPS):
        try:
            response: HTTPResponse = opener.open(request, timeout=timeout)
        except urllib.error.HTTPError as exc:
            location = exc.headers.get("Location") if exc.code in _REDIRECTS else None
            exc.close()
            if location is None:
                raise ForgeError(
                    f"GitHub: {what} failed: HTTP {exc.code} {exc.reason}", status=exc.code
                ) from exc
            target = urllib.parse.urljoin(request.full_url, location)
            if urllib.parse.urlsplit(target).scheme not in ("http", "https"):
                raise ForgeError(
                    f"GitHub: {what} failed: redirect to a non-HTTP URL", status=exc.code
                ) from exc
            request = urllib.request.Request(target, headers={"User-Agent": _USER_AGENT})
            continue
        with response:
            yield response
        return
    raise ForgeError(f"GitHub: {what} failed: more than {_MAX_HOPS} redirects")
