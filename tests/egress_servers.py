"""The servers the egress tests reach, run as a program of its own so they never share the
proxy's interpreter (``python tests/egress_servers.py FOLDER CERT KEY``).

It prints one JSON line of ports, then serves until its standard input closes:

- ``http`` and ``https`` on 127.0.0.2 (the certificate names that address): the files of
  FOLDER, and ``/echo``, which answers with the request head it received (GET) or the length
  of the body it read (POST), so a test sees what the proxy sent on;
- ``other``, plain HTTP on 127.0.0.3, and ``host``, plain HTTP on 127.0.0.1: the host's
  loopback, which a Cell reaches only through the proxy and only when it is listed.

``TCP_NODELAY`` is set as a CDN sets it: without it, each keep-alive response waits ~40 ms.
"""

from __future__ import annotations

import functools
import http.server
import json
import socket
import ssl
import sys
import threading
from typing import Any


class Handler(http.server.SimpleHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        pass

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def do_GET(self) -> None:
        if self.path == "/echo":
            self._reply(f"{self.requestline}\r\n{self.headers}".encode("latin-1"))
        else:
            super().do_GET()

    def do_POST(self) -> None:
        left = int(self.headers.get("Content-Length", "0"))
        while left:
            left -= len(self.rfile.read(min(left, 65536)))
        self._reply(f"read {self.headers.get('Content-Length', '0')}\n".encode())

    def _reply(self, body: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "keep-alive")
        self.end_headers()
        self.wfile.write(body)


class Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    tls: ssl.SSLContext | None = None

    def get_request(self) -> tuple[socket.socket, Any]:
        """TLS is set up in the handler's thread (on its first read), so a client that
        connects and says nothing holds up no one else."""
        client, address = super().get_request()
        if self.tls is None:
            return client, address
        return self.tls.wrap_socket(
            client, server_side=True, do_handshake_on_connect=False
        ), address


def serve(folder: str, address: str, tls: ssl.SSLContext | None = None) -> int:
    server = Server((address, 0), functools.partial(Handler, directory=folder))
    server.tls = tls
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return int(server.server_address[1])


def main(folder: str, cert: str, key: str) -> None:
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    ports = {
        "http": serve(folder, "127.0.0.2"),
        "https": serve(folder, "127.0.0.2", tls),
        "other": serve(folder, "127.0.0.3"),
        "host": serve(folder, "127.0.0.1"),
    }
    print(json.dumps(ports), flush=True)
    sys.stdin.read()


if __name__ == "__main__":
    main(*sys.argv[1:4])
