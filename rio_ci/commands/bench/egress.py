"""What the egress proxy costs a Cell (docs/performance.md, "Egress"): a ``uv pip install`` of a
local wheel through the proxy against the same install without it, and what a new connection
costs through it.

Everything is made here, at bench time, and stays on this machine: a one-module wheel written
as a zip (no build backend, no network), a PEP 503 index beside it, served by ``http.server``
in a process of its own (``TCP_NODELAY`` on, as a CDN has it; a server sharing the bench's
interpreter would share the proxy's GIL too). The proxied side runs in a network namespace of
its own through the real proxy, as a Cell would; where no namespace can be made (not root, not
Linux) it runs on the host through the same proxy, and ``egress_isolated`` says so. Both sides
run as the bench's own user, with the same environment but the proxy's variables.
"""

from __future__ import annotations

import base64
import contextlib
import dataclasses
import hashlib
import os
import shutil
import statistics
import subprocess
import sys
import time
import zipfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import IO, Any

from rio_ci.commands.bench.common import ms
from rio_ci.egress import netns
from rio_ci.egress.connection import variables
from rio_ci.egress.ledger import Ledger
from rio_ci.egress.netns import Netns
from rio_ci.egress.policy import Policy
from rio_ci.egress.proxy import EgressProxy
from rio_ci.run.environment import uv_binary

PACKAGE, VERSION = "rio_bench_tiny", "1.0"
WHEEL = f"{PACKAGE}-{VERSION}-py3-none-any.whl"
HOST = "127.0.0.1"  # the index's address: reached through the proxy as a listed literal
TAG = "bench"

# The index server: the folder to serve and the address; prints its port, serves until its
# standard input closes.
SERVER = """\
import functools, http.server, socket, sys, threading
class Handler(http.server.SimpleHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def log_message(self, *args):
        pass
    def setup(self):
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
handler = functools.partial(Handler, directory=sys.argv[1])
server = http.server.ThreadingHTTPServer((sys.argv[2], 0), handler)
threading.Thread(target=server.serve_forever, daemon=True).start()
print(server.server_address[1], flush=True)
sys.stdin.read()
"""
# New connections, each with one small GET read to its end: direct, or through a CONNECT.
# Arguments: direct|proxied, host, port, proxy port, count; prints the median in ms.
PROBE = """\
import socket, statistics, sys, time
mode, host = sys.argv[1], sys.argv[2]
port, proxy, count = (int(arg) for arg in sys.argv[3:6])
def once():
    if mode == "direct":
        s = socket.create_connection((host, port))
    else:
        s = socket.create_connection(("127.0.0.1", proxy))
        s.sendall(f"CONNECT {host}:{port} HTTP/1.1\\r\\nHost: {host}:{port}\\r\\n\\r\\n".encode())
        head = b""
        while b"\\r\\n\\r\\n" not in head:
            chunk = s.recv(4096)
            if not chunk:
                raise SystemExit("the proxy closed the connection")
            head += chunk
        if not head.startswith(b"HTTP/1.1 200"):
            raise SystemExit(head[:100].decode("latin-1"))
    request = f"GET /simple/ HTTP/1.1\\r\\nHost: {host}\\r\\nConnection: close\\r\\n\\r\\n"
    s.sendall(request.encode())
    while s.recv(65536):
        pass
    s.close()
times = []
for _ in range(count):
    started = time.perf_counter()
    once()
    times.append(time.perf_counter() - started)
print(statistics.median(times) * 1000)
"""


def measure_egress(root: Path, quick: bool) -> dict[str, Any]:
    """The egress figures: both install medians and their ratio, the median of the pairs'
    ratios, and the new-connection medians, direct and through the proxy."""
    pairs, connections = (6, 50) if quick else (20, 300)
    index = write_index(root / "egress-index")
    with serving(index) as port, proxied(Policy.of("allowlist", [f"{HOST}:{port}"])) as route:
        figures = _installs(root, port, route, pairs)
        figures.update(_connections(port, route, connections))
    ending = route.ledger.end(TAG, time.monotonic())
    admitted = sum(entry.count for entry in ending.entries if entry.allowed)
    if admitted < pairs + 1 + connections or ending.refused:  # each proxied run went through
        raise RuntimeError(f"bench: the proxy saw {admitted} connections, refused {ending.refused}")
    figures["egress_proxied_connections"] = admitted
    return figures


@dataclasses.dataclass
class Route:
    """How the proxied side runs: inside ``namespace`` (or on the host where there is none),
    through the proxy at 127.0.0.1:``port``."""

    port: int
    namespace: Netns | None
    ledger: Ledger

    @property
    def isolated(self) -> bool:
        return self.namespace is not None

    def start(
        self, argv: list[str], env: Mapping[str, str], **options: Any
    ) -> subprocess.Popen[str]:
        """``argv`` started on this route's side, with the proxy's variables added to ``env``."""
        inside = self.namespace.entered() if self.namespace else contextlib.nullcontext()
        proxied = {**env, **variables(self.port)}
        for name in ("NO_PROXY", "no_proxy"):  # the index is on loopback: send it through too
            proxied.pop(name)
        with inside:
            return subprocess.Popen(argv, env=proxied, text=True, **options)


@contextlib.contextmanager
def proxied(policy: Policy) -> Iterator[Route]:
    """The real proxy, serving a namespace of its own (or the host's loopback)."""
    namespace = Netns.make() if netns.problem() is None else None
    listener = namespace.listener if namespace else netns.listener(0)
    ledger = Ledger()
    proxy = EgressProxy(policy, ledger.put)
    try:
        proxy.serve(listener)
        proxy.tag = TAG
        yield Route(listener.getsockname()[1], namespace, ledger)
        proxy.end(TAG)
    finally:
        proxy.close()
        if namespace:
            namespace.close()
        else:
            listener.close()


def _installs(root: Path, port: int, route: Route, pairs: int) -> dict[str, Any]:
    target = root / "egress-target"
    argv = [uv_binary(), "pip", "install", "-q", "--no-cache", "--target", str(target)]
    argv += ["--python", sys.executable, "--index-url", f"http://{HOST}:{port}/simple/", PACKAGE]
    env = {
        "PATH": os.environ.get("PATH", os.defpath),
        "HOME": str(root),
        "UV_CACHE_DIR": str(root / "egress-uv-cache"),
        "UV_NO_CONFIG": "1",
        "UV_PYTHON_DOWNLOADS": "never",
    }

    def install(via: Route | None) -> float:
        shutil.rmtree(target, ignore_errors=True)
        started = time.perf_counter()
        options: dict[str, Any] = {"stdout": subprocess.PIPE, "stderr": subprocess.STDOUT}
        run = (
            via.start(argv, env, **options)
            if via
            else subprocess.Popen(argv, env=env, text=True, **options)
        )
        output, _ = run.communicate(timeout=300)
        if run.returncode != 0:
            raise RuntimeError(f"bench: uv pip install failed ({run.returncode}): {output[-500:]}")
        return time.perf_counter() - started

    install(None), install(route)  # warm-up: the interpreter, uv and the page cache
    samples = [(install(None), install(route)) for _ in range(pairs)]
    direct = statistics.median(d for d, _ in samples)
    through = statistics.median(p for _, p in samples)
    return {
        "egress_isolated": route.isolated,
        "egress_install_ms_direct": ms(direct),
        "egress_install_ms_proxied": ms(through),
        "ratio_egress_install": round(through / direct, 3),
        "ratio_egress_install_pairs": round(statistics.median(p / d for d, p in samples), 3),
        "egress_install_pairs": pairs,
    }


def _connections(port: int, route: Route, count: int) -> dict[str, Any]:
    def probe(mode: str) -> float:
        argv = [
            sys.executable,
            "-I",
            "-c",
            PROBE,
            mode,
            HOST,
            str(port),
            str(route.port),
            str(count),
        ]
        options: dict[str, Any] = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE}
        run = (
            route.start(argv, {}, **options)
            if mode == "proxied"
            else subprocess.Popen(argv, text=True, **options)
        )
        output, errors = run.communicate(timeout=300)
        if run.returncode != 0:
            raise RuntimeError(f"bench: the connection probe failed: {errors[-500:]}")
        return float(output)

    direct, through = probe("direct"), probe("proxied")
    return {
        "egress_connect_ms_direct": round(direct, 3),
        "egress_connect_ms_proxied": round(through, 3),
        "egress_connect_overhead_ms": round(through - direct, 3),
        "egress_connect_samples": count,
    }


@contextlib.contextmanager
def serving(folder: Path, host: str = HOST) -> Iterator[int]:
    """``folder`` served over HTTP on ``host`` by a process of its own; yields the port."""
    server = subprocess.Popen(
        [sys.executable, "-I", "-c", SERVER, str(folder), host],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        yield int(server.stdout.readline())
    finally:
        _stop(server, server.stdin)


def _stop(server: subprocess.Popen[str], stdin: IO[str] | None) -> None:
    if stdin is not None:
        with contextlib.suppress(OSError):
            stdin.close()
    try:
        server.wait(timeout=5)
    except subprocess.TimeoutExpired:
        server.kill()
        server.wait()


def write_index(folder: Path) -> Path:
    """A PEP 503 index in ``folder`` (``simple/``) serving one wheel beside it; ``folder``."""
    wheel = write_wheel(folder)
    digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
    project = PACKAGE.replace("_", "-")
    pages = folder / "simple" / project
    pages.mkdir(parents=True)
    (folder / "simple" / "index.html").write_text(f'<a href="{project}/">{project}</a>\n')
    link = f'<a href="../../{WHEEL}#sha256={digest}">{WHEEL}</a>\n'
    (pages / "index.html").write_text(link)
    return folder


def write_wheel(folder: Path) -> Path:
    """A one-module wheel of ``PACKAGE`` written straight as a zip, its RECORD hashed."""
    dist = f"{PACKAGE}-{VERSION}.dist-info"
    metadata = f"Metadata-Version: 2.1\nName: {PACKAGE}\nVersion: {VERSION}\n"
    files = {
        f"{PACKAGE}/__init__.py": b"VALUE = 1\n",
        f"{dist}/METADATA": metadata.encode(),
        f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: rio-ci bench\nRoot-Is-Purelib: true\n"
        b"Tag: py3-none-any\n",
    }
    record = [f"{name},sha256={_digest(data)},{len(data)}" for name, data in files.items()]
    files[f"{dist}/RECORD"] = ("\n".join([*record, f"{dist}/RECORD,,"]) + "\n").encode()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / WHEEL
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return path


def _digest(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
