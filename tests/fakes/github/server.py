"""The fake served over real HTTP on 127.0.0.1: tokens, permissions, injected failures,
routing, and git's smart HTTP for ``serve_git``."""

from __future__ import annotations

import base64
import re
import urllib.parse
from http.server import BaseHTTPRequestHandler
from types import TracebackType
from typing import Any

from fakes import git_origin
from fakes.github.base import REFUSALS, SCOPES, Recorded, Token, encode, not_found
from fakes.github.endpoints import Endpoints
from rio_ci.commands.bench.loopback import LoopbackServer
from rio_ci.commands.bench.rate_limit import PRIMARY, etag_of, names


class FakeGitHub(Endpoints):
    """Use as a context manager: ``with FakeGitHub() as gh: GitHubForge(gh.repo, gh.token,
    gh.api_url, throttle=False)``."""

    # -- lifecycle -----------------------------------------------------------------------------

    def __enter__(self) -> FakeGitHub:
        self._http = LoopbackServer(_handler_for(self))
        self.api_url = self._http.base_url
        self._http.start()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._http.close()

    def token_of(self, req: Recorded) -> Token | None:
        """The valid token a request carries, or None."""
        kind, _, value = req.headers.get("authorization", "").partition(" ")
        if kind.lower() == "basic":
            try:
                value = base64.b64decode(value).decode().partition(":")[2]
            except (ValueError, UnicodeDecodeError):
                return None
        elif kind.lower() not in ("token", "bearer"):
            return None
        token = self.tokens.get(value)
        return token if token is not None and not token.expired else None

    def _refused(self, token: Token, req: Recorded) -> str | None:
        """The permission a token with limited permissions lacks for this request, as GitHub
        names it in ``X-Accepted-GitHub-Permissions`` (``issues=write``), or None."""
        if token.permissions is None:
            return None
        rest = req.path.removeprefix(f"/repos/{self.repo}")
        for pattern, scope in SCOPES:
            if pattern.fullmatch(rest):
                have = token.permissions.get(scope, "none")
                need = "read" if req.method == "GET" else "write"
                lacking = have == "none" or (need == "write" and have != "write")
                return f"{scope.replace('-', '_')}={need}" if lacking else None
        return None

    def answer(self, req: Recorded) -> tuple[int, bytes, dict[str, str]]:
        """Route one recorded request; returns (status, body, extra headers)."""
        for observe in list(self.observers):
            observe(req)
        if self.git_origin is not None and req.path.startswith(f"/{self.repo}.git/"):
            with self._lock:
                self.requests.append(req)
                token = self.token_of(req)
            return git_origin.serve(self.git_origin, req, token, f"/{self.repo}.git")
        with self._lock:
            self.requests.append(req)
            files = self._file(req)
            if files is not None:
                return files
            status, body, headers = self._api(req)
            query = urllib.parse.urlencode(req.query)
            # an answer's own rate-limit headers (a scripted refusal's) win over the budget's
            return (
                status,
                body,
                {**self.rate.answer(req.method, req.path, query, status), **headers},
            )

    def _api(self, req: Recorded) -> tuple[int, bytes, dict[str, str]]:
        """The API's answer to ``req`` (before the rate-limit headers every answer gets)."""
        token = self.token_of(req)
        if token is None:
            return encode(401, {"message": "Bad credentials"}, {})
        if self.rate.spent():
            return encode(403, {"message": PRIMARY}, {})
        for failure in self.failures:
            if failure.take(req.method, req.path):
                return encode(failure.status, {"message": failure.message}, failure.headers())
        lacking = self._refused(token, req)
        if lacking is not None:
            return encode(
                403,
                {"message": REFUSALS[token.kind]},
                {"X-Accepted-GitHub-Permissions": lacking},
            )
        for method, route, handler in self._routes():
            match = re.fullmatch(route, req.path)
            if match and method == req.method:
                return self._conditional(req, *encode(*handler(req, match)))
        return encode(*not_found())

    def _file(self, req: Recorded) -> tuple[int, bytes, dict[str, str]] | None:
        """The two kinds of download outside the API: an artifact's pre-signed blob URL
        (no token needed, none expected) and a private repository's attachment (the token,
        or a 404); None for anything else."""
        download = re.fullmatch(r"/download/(\d+)", req.path)
        if download:
            blob = self.blobs.get(int(download[1]))
            if blob is None:
                return 404, b"", {}
            return 200, blob, {"Content-Type": "application/zip"}
        asset = re.fullmatch(r"/user-attachments/assets/([\w-]+)", req.path)
        if asset:
            if asset[1] in self.attachment_redirects:
                return 302, b"", {"Location": self.attachment_redirects[asset[1]]}
            found = self.attachments.get(asset[1]) if self.token_of(req) is not None else None
            if found is None:
                return 404, b"Not Found", {}
            return 200, found[0], {"Content-Type": found[1]}
        return None

    def _conditional(
        self, req: Recorded, status: int, body: bytes, headers: dict[str, str]
    ) -> tuple[int, bytes, dict[str, str]]:
        """GitHub's conditional requests: every 200 to a GET carries an ETag (a digest of
        the answer, which changes whenever the resource does); a GET whose If-None-Match
        names the current one gets 304 with no body, which costs no rate limit."""
        if req.method != "GET" or status != 200:
            return status, body, headers
        etag = etag_of(body)
        if names(req.headers.get("if-none-match"), etag):
            self.not_modified.append(req)
            return 304, b"", {"ETag": etag}
        return status, body, {**headers, "ETag": etag}


def _handler_for(fake: FakeGitHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        wbufsize = 1 << 16  # one write per response: avoids Nagle + delayed-ACK stalls

        def _serve(self) -> None:
            split = urllib.parse.urlsplit(self.path)
            if self.headers.get("Transfer-Encoding", "").lower() == "chunked":
                body = self._chunked()  # git sends large pushes this way
            else:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
            query = {k: v[0] for k, v in urllib.parse.parse_qs(split.query).items()}
            headers = {k.lower(): v for k, v in self.headers.items()}
            status, payload, extra = fake.answer(
                Recorded(self.command, split.path, query, headers, body)
            )
            self.send_response(status)
            for name, value in extra.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def _chunked(self) -> bytes:
            parts = []
            while True:
                size = int(self.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    while self.rfile.readline() not in (b"\r\n", b"\n", b""):
                        pass  # trailers
                    return b"".join(parts)
                parts.append(self.rfile.read(size))
                self.rfile.readline()  # the CRLF after each chunk

        do_GET = do_POST = do_PATCH = do_PUT = do_DELETE = _serve

        def log_message(self, format: str, *args: Any) -> None:
            pass  # keep test output clean

    return Handler
