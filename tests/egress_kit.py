"""What the egress tests share: a folder every user may read with what the servers serve (a
file, a PEP 503 index with one wheel, a git repository over dumb HTTP), a test CA and a
certificate for 127.0.0.2, the servers in a process of their own, a resolver of the test's
own, and the real proxy with its ledger."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from rio_ci.commands.bench.egress import write_index
from rio_ci.egress import netns
from rio_ci.egress.connection import Tag
from rio_ci.egress.ledger import Ending, Ledger
from rio_ci.egress.policy import Policy
from rio_ci.egress.proxy import MAX_CONNECTIONS, EgressProxy
from tests.kit import ROOT

BIG = 1 << 20  # bytes of www/big.bin
CA = "/CN=rio-ci egress test CA"
GIT = {
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_AUTHOR_NAME": "t",
    "GIT_AUTHOR_EMAIL": "t@example.test",
    "GIT_COMMITTER_NAME": "t",
    "GIT_COMMITTER_EMAIL": "t@example.test",
}


@contextlib.contextmanager
def shared_place() -> Iterator[Path]:
    """A folder under /tmp that every user may enter and read (a test's tmp_path is root's
    alone), removed afterwards."""
    folder = Path(tempfile.mkdtemp(prefix="rio-egress-test-", dir="/tmp"))
    folder.chmod(0o755)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def fill(place: Path) -> Path:
    """The served folder ``place/www``: ``hello.txt``, ``big.bin``, ``simple/`` with its
    wheel, and ``repo.git`` (one commit on ``main``, served by dumb HTTP)."""
    www = place / "www"
    www.mkdir()
    (www / "hello.txt").write_text("hello from 127.0.0.2\n")
    (www / "big.bin").write_bytes(os.urandom(BIG))
    write_index(www)
    work, bare = place / "work", www / "repo.git"
    env = {**os.environ, **GIT}
    for argv in (
        ["git", "init", "-q", "-b", "main", str(work)],
        ["git", "-C", str(work), "commit", "-q", "--allow-empty", "-m", "one"],
        ["git", "clone", "-q", "--bare", str(work), str(bare)],
        ["git", "-C", str(bare), "update-server-info"],
    ):
        subprocess.run(argv, env=env, check=True, capture_output=True)
    subprocess.run(["chmod", "-R", "a+rX", str(place)], check=True)
    return www


def certificates(place: Path) -> Path:
    """A test CA (``ca.pem``) and a certificate for 127.0.0.2 it signed (``cert.pem``,
    ``key.pem``) in ``place/tls``. A CA and a leaf: rustls (uv) refuses a self-signed
    certificate that is its own CA."""
    tls = place / "tls"
    tls.mkdir()
    (tls / "leaf.ext").write_text(
        "subjectAltName=IP:127.0.0.2\nbasicConstraints=critical,CA:FALSE\n"
        "keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n"
    )
    curve = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    tail = {"x509": ["-CAcreateserial", "-out", "cert.pem", "-extfile", "leaf.ext"]}
    for argv in (
        ["req", "-x509", *curve, "-keyout", "ca.key", "-out", "ca.pem", "-days", "2", "-subj", CA],
        ["req", *curve, "-keyout", "key.pem", "-out", "leaf.csr", "-subj", "/CN=127.0.0.2"],
        ["x509", "-req", "-in", "leaf.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-days", "2"],
    ):
        subprocess.run(
            ["openssl", *argv, *tail.get(argv[0], [])], cwd=tls, check=True, capture_output=True
        )
    for path in tls.iterdir():
        path.chmod(0o644)
    return tls


@contextlib.contextmanager
def servers(www: Path, tls: Path) -> Iterator[dict[str, int]]:
    """The servers of ``tests/egress_servers.py`` in a process of their own; their ports."""
    child = subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "egress_servers.py"), str(www), *pem(tls)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None
        yield json.loads(child.stdout.readline())
    finally:
        child.kill()
        child.wait()


def pem(tls: Path) -> list[str]:
    return [str(tls / "cert.pem"), str(tls / "key.pem")]


class Names:
    """A resolver of the test's own: ``*.test`` names to addresses, every call noted."""

    def __init__(self, table: dict[str, list[str]]) -> None:
        self.table = table
        self.asked: list[str] = []

    async def __call__(self, name: str, port: int) -> list[str]:
        self.asked.append(name)
        if name not in self.table:
            raise OSError(f"{name}: no such name")
        return self.table[name]


@dataclasses.dataclass
class Rig:
    """The real proxy with a ledger as its sink, accepting on ``listener``."""

    proxy: EgressProxy
    ledger: Ledger
    port: int

    def ending(self, tag: Tag) -> Ending:
        """``tag``'s connections ended, and what the ledger hands over for it."""
        self.proxy.end(tag)
        return self.ledger.end(tag, time.monotonic())


@contextlib.contextmanager
def rig(
    policy: Policy,
    names: Names | None = None,
    listener: socket.socket | None = None,
    *,
    most: int = MAX_CONNECTIONS,
) -> Iterator[Rig]:
    """The proxy for ``policy`` on ``listener`` (one on the host's 127.0.0.1 by default),
    ``most`` connections open at once."""
    own = listener is None
    listening = netns.listener(0) if listener is None else listener
    ledger = Ledger()
    proxy = EgressProxy(policy, ledger.put, resolve=names, max_connections=most)
    try:
        proxy.serve(listening)
        yield Rig(proxy, ledger, listening.getsockname()[1])
    finally:
        proxy.close()
        if own:
            listening.close()
