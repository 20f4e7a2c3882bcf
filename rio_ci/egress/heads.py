"""The HTTP heads the proxy reads and rewrites (docs/network.md, "The proxy").

A client asks the proxy either to open a tunnel (``CONNECT host:port``, what every HTTPS
client does) or to fetch a plain-HTTP URL for it (``GET http://host[:port]/path``). The proxy
reads the host and port from the request line alone; the headers never choose where a
connection goes. A plain-HTTP request is sent on in origin form (``GET /path``), its
``Proxy-*``, ``Connection`` and ``Keep-Alive`` headers dropped and ``Connection: close`` set, and
the response's head gets ``Connection: close`` too: one request per connection. Without it a
client keeps the connection to the proxy and sends its next request down it, which may be for
another host (curl does, across hosts), and uv, finding the pooled connection closed, sleeps in
its retry loop (about 1.3 s each time).
"""

from __future__ import annotations

import dataclasses
import re

from rio_ci.egress.policy import split_host_port

END = b"\r\n\r\n"
ESTABLISHED = b"HTTP/1.1 200 Connection established\r\n\r\n"
_ABSOLUTE = re.compile(r"http://([^/?#]+)([^#]*)", re.IGNORECASE)
_VERSIONS = ("HTTP/1.0", "HTTP/1.1")


@dataclasses.dataclass(frozen=True)
class Request:
    """What a client asked the proxy for: where (``host`` as written, ``port``), and what goes
    to that host first: nothing for a tunnel, the rewritten head for plain HTTP."""

    method: str
    host: str
    port: int
    forward: bytes = b""

    @property
    def tunnel(self) -> bool:
        return self.method == "CONNECT"


def read_request(head: bytes) -> Request:
    """The request a head (through its blank line) makes; ValueError for anything that is
    not a ``CONNECT host:port`` or an absolute ``http://`` request of HTTP/1.0 or 1.1."""
    lines = head.removesuffix(END).split(b"\r\n")
    method, target, version = lines[0].decode("latin-1").split(" ")
    if version not in _VERSIONS or not method.isalpha():
        raise ValueError(lines[0])
    if method == "CONNECT":
        host, port = split_host_port(target, None)
        if port is None:
            raise ValueError(target)
        return Request(method, host, port)
    match = _ABSOLUTE.fullmatch(target)
    if match is None or "@" in match.group(1):
        raise ValueError(target)  # not absolute, or credentials in the URL
    host, port = split_host_port(match.group(1), 80)
    assert port is not None
    first = f"{method} {match.group(2) or '/'} {version}".encode("latin-1")
    return Request(method, host, port, _closing(first, lines[1:]))


def closing_response(head: bytes) -> bytes:
    """A response head (through its blank line) with ``Connection: close`` in place of its
    connection headers."""
    lines = head.removesuffix(END).split(b"\r\n")
    return _closing(lines[0], lines[1:])


def interim(head: bytes) -> bool:
    """Whether a response head is an interim one (``100 Continue``): more heads follow."""
    parts = head.split(b" ", 2)
    return len(parts) > 1 and parts[1].startswith(b"1") and len(parts[1]) == 3


def _closing(first: bytes, headers: list[bytes]) -> bytes:
    kept = [line for line in headers if line and not _hop_by_hop(line)]
    return b"\r\n".join([first, *kept, b"Connection: close"]) + END


def _hop_by_hop(line: bytes) -> bool:
    name = line.partition(b":")[0].strip().lower()
    return name in (b"connection", b"keep-alive") or name.startswith(b"proxy-")
