"""Following HTTP redirects by hand, so that the caller decides what every hop sends.

urllib's own redirect handler re-sends a request's headers to wherever a redirect points,
the ``Authorization`` header included. Here a redirect is never followed by urllib
(``SurfaceRedirects``): ``follow`` asks the caller for the next hop's request, so a token
travels only where the caller puts it — the caller refuses a hop by raising its own error.
"""

from __future__ import annotations

import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Collection
from email.message import Message
from http.client import HTTPResponse
from typing import IO

__all__ = ["REDIRECTS", "SurfaceRedirects", "TooManyRedirects", "follow"]

REDIRECTS = frozenset({301, 302, 303, 307, 308})


class TooManyRedirects(Exception):
    """The last hop allowed was a redirect too."""


class SurfaceRedirects(urllib.request.HTTPRedirectHandler):
    """Every redirect surfaces as an ``HTTPError``, for ``follow`` to decide the next hop."""

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


def follow(
    opener: urllib.request.OpenerDirector,
    request: urllib.request.Request,
    next_hop: Callable[[str, int], urllib.request.Request],
    *,
    redirects: int,
    timeout: float,
    codes: Collection[int] = REDIRECTS,
) -> HTTPResponse:
    """The response ``request`` leads to through at most ``redirects`` redirects (``opener``
    must hold ``SurfaceRedirects``). A response with a status in ``codes`` and a
    ``Location`` is followed to ``next_hop(absolute target, status)``, the request the
    caller builds for it (it raises to refuse the hop). Any other error status, or one with
    no ``Location``, raises its ``HTTPError``; a redirect past the last one allowed raises
    ``TooManyRedirects``; network errors propagate."""
    for hop in range(redirects + 1):
        try:
            response: HTTPResponse = opener.open(request, timeout=timeout)
            return response
        except urllib.error.HTTPError as error:
            location = error.headers.get("Location") if error.code in codes else None
            error.close()
            if not location:
                raise
            if hop == redirects:
                break  # no request is built for a hop that will not be made
            request = next_hop(urllib.parse.urljoin(request.full_url, location), error.code)
    raise TooManyRedirects
