"""The channel through which ``rio_ci.api`` reaches the Owner (docs/design.md, "The Cell
user").

A Cell never opens the Session file (under a Cell user it cannot): the Owner listens on a
Unix socket in a directory only the Cell user (and root) may enter, whose path reaches the
Worker as ``RIO_API_SOCKET``. A connection is answered only when the peer's user id
(``SO_PEERCRED``) is the one Cells run as. One request per connection: one JSON object
``{"args": [VERB, ...]}``, the client then shuts its writing side; the answer is
``{"code", "stdout", "stderr"}`` of ``python -I -m rio_ci.run.confinement.bridge DB VERB ...``
run by the Owner's interpreter as the Owner's user — the same commit path as before, isolated
(``-I``) from the Cells' ``PYTHONPATH`` and working directory, whose folders they may write.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path

SOCKET_VAR = "RIO_API_SOCKET"
VERBS = frozenset({"timer", "cancel_timer", "records", "output"})
MAX_REQUEST = 1 << 20  # bytes: a Timer payload travels as one argument (the kernel's limit)
_TIMEOUT = 60.0
_AT_ONCE = 4  # requests answered at the same time


def _base() -> Path:
    return Path("/tmp" if os.path.isdir("/tmp") else tempfile.gettempdir())  # short: sun_path


def prefix_of(db: Path) -> str:
    """The name every channel directory of the Session file ``db`` starts with: keyed on the
    file, like its lock, so only its own Owner ever matches it."""
    info = os.stat(db)
    return f"rio-api-{info.st_dev:x}-{info.st_ino:x}-"


def sweep_stale(db: Path, keep: Path | None = None) -> None:
    """Remove the channel directories an earlier Owner of ``db`` left (killed before it
    could): the caller holds the Session's lock, so none of them is in use but its own
    (``keep``: an Owner that recovers again, as a GitHub job does between two runs of its
    rounds, keeps serving its Cells)."""
    for path in _base().glob(prefix_of(db) + "*"):
        if path == keep:
            continue
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)


class Channel:
    def __init__(self, db: Path, peer_uid: int, peer_gid: int, env: Mapping[str, str], cwd: Path):
        self.db, self.peer_uid, self.env, self.cwd = db, peer_uid, dict(env), cwd
        self.dir = Path(tempfile.mkdtemp(prefix=prefix_of(db), dir=_base()))
        self.path = self.dir / "api.sock"
        self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self._sock.bind(str(self.path))
            self._sock.listen(16)
            self._sock.settimeout(0.25)  # how soon the serving thread sees close()
            if peer_uid != os.geteuid():
                os.chown(self.path, peer_uid, peer_gid)
                os.chown(self.dir, peer_uid, peer_gid)
        except BaseException:
            self.close()
            raise
        self._closed = threading.Event()
        # Each request starts a bridge process as the Owner's user: a Cell that opens
        # connections in a loop gets them answered a few at a time, never without bound.
        self._answering = threading.BoundedSemaphore(_AT_ONCE)
        # The bridges running now; under the lock, so that close() sees every one started
        # before it and none starts after it.
        self._bridges: set[subprocess.Popen[str]] = set()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._serve, name="rio-api", daemon=True)
        self._thread.start()

    def close(self) -> None:
        """Stop answering, and stop every bridge still running: once it returns, no process
        this channel started is left to write to the Session (the Cell that asked is being
        stopped too, so nobody waits for the answer)."""
        closed = getattr(self, "_closed", None)
        if closed is not None:
            with self._lock:
                closed.set()
                bridges = list(self._bridges)
            self._thread.join(timeout=2)
            for bridge in bridges:
                bridge.kill()
            for bridge in bridges:
                bridge.wait()
        self._sock.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _serve(self) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            conn.settimeout(_TIMEOUT)
            try:
                with self._answering:
                    reply = self._reply(conn)
            except subprocess.TimeoutExpired:
                reply = {"code": 1, "stdout": "", "stderr": f"no answer within {_TIMEOUT:g} s"}
            except (OSError, ValueError) as exc:
                reply = {"code": 1, "stdout": "", "stderr": f"bad request: {exc}"}
            with contextlib.suppress(OSError):
                conn.sendall(json.dumps(reply).encode())

    def _reply(self, conn: socket.socket) -> dict[str, object]:
        uid = peer_uid(conn)
        data = _read(conn)  # whole, even when refused: unread bytes would reset the answer
        if uid is not None and uid != self.peer_uid:
            return {"code": 1, "stdout": "", "stderr": f"user {uid} may not use this channel"}
        return self._bridge(_request(data))

    def _bridge(self, args: list[str]) -> dict[str, object]:
        """The bridge's answer to ``args``; none once the channel is closed. A bridge that
        takes longer than ``_TIMEOUT`` is killed (``TimeoutExpired``)."""
        with self._lock:
            if self._closed.is_set():
                return {"code": 1, "stdout": "", "stderr": "the channel is closed"}
            process = subprocess.Popen(
                [sys.executable, "-I", "-m", "rio_ci.run.confinement.bridge", str(self.db), *args],
                env=self.env,
                cwd=self.cwd,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
            )
            self._bridges.add(process)
        with process:
            try:
                stdout, stderr = process.communicate(timeout=_TIMEOUT)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
                raise
            finally:
                with self._lock:
                    self._bridges.discard(process)
        return {"code": process.returncode, "stdout": stdout, "stderr": stderr}


def peer_uid(conn: socket.socket) -> int | None:
    """The user id of the process at the other end (Linux ``SO_PEERCRED``), or None where
    the system has no such option (there the directory's mode alone keeps others out)."""
    option = getattr(socket, "SO_PEERCRED", None)
    if option is None:
        return None
    size = struct.calcsize("3i")
    _pid, uid, _gid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, option, size))
    return int(uid)


def _read(conn: socket.socket) -> bytes:
    data = bytearray()
    while chunk := conn.recv(65536):
        data += chunk
        if len(data) > MAX_REQUEST:
            raise ValueError(f"a request is at most {MAX_REQUEST} bytes")
    return bytes(data)


def _request(data: bytes) -> list[str]:
    request = json.loads(data.decode("utf-8"))
    args = request.get("args") if isinstance(request, dict) else None
    if (
        not isinstance(args, list)
        or not args
        or not all(isinstance(a, str) and "\0" not in a for a in args)
        or args[0] not in VERBS
    ):
        raise ValueError(f'a request is {{"args": [VERB, ...]}} with VERB one of {sorted(VERBS)}')
    return args
