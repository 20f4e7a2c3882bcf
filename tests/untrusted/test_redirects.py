"""Redirects followed by hand (rio_ci/untrusted/redirects.py), against a real loopback server: each
hop sends what the caller built for it, the limit holds, and no request is built for a hop that
will not be made."""

from __future__ import annotations

import urllib.error
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any, ClassVar

import pytest

from rio_ci.commands.bench.loopback import LoopbackServer
from rio_ci.untrusted.redirects import SurfaceRedirects, TooManyRedirects, follow


class _Hops(BaseHTTPRequestHandler):
    """``/hop/N`` redirects to ``/hop/N-1``; ``/hop/0`` answers ``ok``; ``/nowhere`` is a 302
    without ``Location``. Every request's path and ``Authorization`` header is recorded."""

    seen: ClassVar[list[tuple[str, str | None]]] = []

    def do_GET(self) -> None:
        self.seen.append((self.path, self.headers.get("Authorization")))
        if self.path.startswith("/hop/") and self.path != "/hop/0":
            self._answer(302, {"Location": f"/hop/{int(self.path[5:]) - 1}"})
        elif self.path == "/nowhere":
            self._answer(302, {})
        elif self.path == "/hop/0":
            self._answer(200, {}, b"ok")
        else:
            self._answer(404, {})

    def _answer(self, status: int, headers: dict[str, str], body: bytes = b"") -> None:
        self.send_response(status)
        for name, value in {**headers, "Content-Length": str(len(body))}.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def server() -> Iterator[str]:
    _Hops.seen = []
    http = LoopbackServer(_Hops)
    http.start()
    try:
        yield http.base_url
    finally:
        http.close()


def _get(url: str, redirects: int, built: list[str]) -> bytes:
    """GET ``url`` with a token on the first hop only; ``built`` collects every later hop."""

    def next_hop(target: str, status: int) -> urllib.request.Request:
        assert status == 302
        built.append(target)
        return urllib.request.Request(target)  # no token past the first hop

    first = urllib.request.Request(url, headers={"Authorization": "Bearer secret"})
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), SurfaceRedirects())
    with follow(opener, first, next_hop, redirects=redirects, timeout=5) as response:
        body: bytes = response.read()
        return body


def test_each_hop_sends_only_what_the_caller_built_for_it(server: str) -> None:
    built: list[str] = []
    assert _get(f"{server}/hop/3", 3, built) == b"ok"
    assert built == [f"{server}/hop/2", f"{server}/hop/1", f"{server}/hop/0"]
    assert _Hops.seen == [
        ("/hop/3", "Bearer secret"),
        ("/hop/2", None),
        ("/hop/1", None),
        ("/hop/0", None),
    ]


def test_a_redirect_past_the_limit_is_refused_before_its_request_is_built(server: str) -> None:
    built: list[str] = []
    with pytest.raises(TooManyRedirects):
        _get(f"{server}/hop/4", 3, built)
    assert built == [f"{server}/hop/3", f"{server}/hop/2", f"{server}/hop/1"]
    assert [path for path, _ in _Hops.seen] == ["/hop/4", "/hop/3", "/hop/2", "/hop/1"]


def test_an_error_or_a_redirect_without_a_location_is_the_http_error(server: str) -> None:
    with pytest.raises(urllib.error.HTTPError) as missing:
        _get(f"{server}/missing", 3, [])
    assert missing.value.code == 404
    with pytest.raises(urllib.error.HTTPError) as nowhere:
        _get(f"{server}/nowhere", 3, [])
    assert nowhere.value.code == 302
