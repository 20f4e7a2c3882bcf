"""The forward proxy, a Cell's only way out (docs/network.md; docs/design.md, "Egress: the
mechanism").

An asyncio event loop on a thread of its own (named ``egress``) accepts on listening sockets
it is handed (:meth:`EgressProxy.serve`; the one made inside a Cells' network namespace) and
opens its outbound connections from that thread, which stays in the host's namespace. For
each connection it reads one request (``rio_ci.egress.heads``), asks the policy, and only for
an admitted host resolves a name (never a refused one: a Cell cannot use the resolver to
carry anything out) and refuses it still if it resolves to a special address. It then tunnels
(``CONNECT``) or forwards one plain-HTTP request, counting the bytes each way. No TLS is
opened: the proxy sees a host, a port and byte counts, never content.

Every connection it accepts ends as exactly one :class:`Connection` handed to the sink (from
the proxy's thread; ``queue.SimpleQueue.put`` is the Owner's), tagged with :attr:`tag` as it
was when the connection was accepted: the Owner sets it to the Execution it is about to
release, and :meth:`end` closes that Execution's connections once its Worker is stopped.

A refusal is answered ``403`` with the host, port and reason in the status line (Python's
clients show it) and the option that would admit it in the body. At most ``MAX_CONNECTIONS``
are open at once (each holds two descriptors of the Owner's); the rest wait in the listening
socket's queue.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from rio_ci.egress import heads
from rio_ci.egress.connection import Connection, Tag
from rio_ci.egress.heads import Request
from rio_ci.egress.policy import (
    BAD_HOST,
    RESOLVES_TO_SPECIAL,
    Address,
    Policy,
    address_of,
    allow_line,
    normal_name,
)

Sink = Callable[[Connection], None]
Resolve = Callable[[str, int], Awaitable[list[str]]]  # (name, port) -> addresses
T = TypeVar("T")

HEAD_LIMIT = 64 * 1024  # the most a request head may take
HEAD_SECONDS = 30.0  # how long a client may take to send it
CONNECT_SECONDS = 15.0  # resolving and connecting to the host
CHUNK = 256 * 1024
MAX_CONNECTIONS = 256
# Reasons of the proxy's own, beside the policy's (rio_ci.egress.policy.REASONS).
BAD_REQUEST = "bad_request"  # a head that is not a proxy request
UNRESOLVED = "unresolved"  # admitted, but the name did not resolve
UNREACHABLE = "unreachable"  # admitted, but no connection could be made


class EgressProxy:
    """The proxy's loop on a thread of its own; build it outside any network namespace."""

    def __init__(
        self,
        policy: Policy,
        sink: Sink,
        *,
        resolve: Resolve | None = None,
        max_connections: int = MAX_CONNECTIONS,
    ) -> None:
        """``resolve`` turns an admitted name into addresses (the system's resolver by
        default; tests map names of their own)."""
        self.policy = policy
        self.tag: Tag | None = None  # set by the Owner before each release
        self._sink = sink
        self._resolve = resolve or self._system_resolve
        self._loop = asyncio.new_event_loop()
        self._open: dict[Tag | None, set[asyncio.Task[None]]] = {}
        self._listeners: list[socket.socket] = []
        self._most, self._active = max_connections, 0
        self._closed = False
        self._thread = threading.Thread(target=self._loop.run_forever, name="egress", daemon=True)
        self._thread.start()

    def serve(self, listener: socket.socket) -> None:
        """Accept on ``listener`` (a listening TCP socket; the caller keeps and closes it)."""
        self._run(self._serve(listener))

    def end(self, tag: Tag) -> None:
        """Close every connection of ``tag``, the ones still waiting to be accepted included
        (call it once the Execution's processes are stopped: whatever is queued is theirs),
        and return once each has been handed to the sink."""
        self._run(self._end(tag))

    def close(self) -> None:
        """Stop accepting, close every connection (each handed to the sink) and stop the
        thread. Closing twice does nothing."""
        if self._closed:
            return
        self._closed = True
        self._run(self._close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join()
        self._loop.close()

    def _run(self, work: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(work, self._loop).result()

    # --- accepting ---------------------------------------------------------------------
    # A listener is read by a callback that accepts every waiting connection and starts its
    # task at once, with the tag of that moment: no connection is ever accepted and not yet
    # known, which ``end`` relies on. While ``_most`` are open the listeners are not read.

    async def _serve(self, listener: socket.socket) -> None:
        listener.setblocking(False)
        self._listeners.append(listener)
        self._watch(listener)

    def _watch(self, listener: socket.socket) -> None:
        if listener.fileno() >= 0 and listener in self._listeners:
            self._loop.add_reader(listener, self._take, listener, None)

    def _unwatch(self) -> None:
        for listener in self._listeners:
            if listener.fileno() >= 0:
                self._loop.remove_reader(listener)

    def _take(self, listener: socket.socket, tag: Tag | None) -> None:
        """Accept what waits on ``listener``, as connections of ``tag`` (the current one
        when None), while there is room (always, for an ending tag)."""
        while tag is not None or self._active < self._most:
            try:
                client, _ = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError:  # out of descriptors, most likely: let some close first
                self._loop.remove_reader(listener)
                self._loop.call_later(0.1, self._watch, listener)
                return
            self._start(client, self.tag if tag is None else tag)
        self._unwatch()  # full: the rest wait in the queue until a connection closes

    def _start(self, client: socket.socket, tag: Tag | None) -> None:
        """Serve ``client`` in a task of its own; its account goes to the sink when the task
        is done, however it ends (cancelled before it ever ran included)."""
        with contextlib.suppress(OSError):
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        account = Connection(tag)
        task = self._loop.create_task(self._client(client, account))
        self._open.setdefault(tag, set()).add(task)
        self._active += 1

        def done(finished: asyncio.Task[None]) -> None:
            self._open.get(tag, set()).discard(finished)
            client.close()
            self._active -= 1
            if self._active == self._most - 1 and not self._closed:
                for listener in self._listeners:  # room again
                    self._watch(listener)
            self._sink(account)

        task.add_done_callback(done)

    async def _end(self, tag: Tag) -> None:
        for listener in self._listeners:
            if listener.fileno() >= 0:
                self._take(listener, tag)
        await self._cancel(self._open.pop(tag, set()))

    async def _close(self) -> None:
        self._unwatch()
        self._listeners.clear()
        for tag in list(self._open):
            await self._cancel(self._open.pop(tag, set()))

    @staticmethod
    async def _cancel(tasks: set[asyncio.Task[T]]) -> None:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await asyncio.sleep(0)  # the done callbacks (the sink) run before this returns

    # --- one connection ------------------------------------------------------------------

    async def _client(self, client: socket.socket, account: Connection) -> None:
        writer: asyncio.StreamWriter | None = None
        try:
            reader, writer = await asyncio.open_connection(sock=client, limit=HEAD_LIMIT)
            request = await self._read(reader, writer, account)
            if request is not None:
                await self._handle(request, reader, writer, account)
        except OSError:
            pass  # the client went away; the account says how far it got
        finally:
            if writer is not None:
                writer.close()

    async def _read(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, account: Connection
    ) -> Request | None:
        """The client's request, or None once it has been answered (a bad head) or is gone."""
        try:
            head = await asyncio.wait_for(reader.readuntil(heads.END), HEAD_SECONDS)
            return heads.read_request(head)
        except (asyncio.IncompleteReadError, TimeoutError) as exc:
            if isinstance(exc, asyncio.IncompleteReadError) and exc.partial:
                account.reason = BAD_REQUEST
            return None
        except (asyncio.LimitOverrunError, ValueError, UnicodeError):
            account.reason = BAD_REQUEST
            await _answer(writer, 400, "Bad Request", "rio-ci egress: not a proxy request\n")
            return None

    async def _handle(
        self,
        request: Request,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        account: Connection,
    ) -> None:
        verdict = self.policy.admits(request.host, request.port)
        account.host, account.port = _shown(request.host), request.port
        account.allowed, account.reason = verdict
        if verdict.allowed:
            upstream = await self._connect(request, account)
            if upstream is not None:
                await _relay(request, (reader, writer), upstream, account)
                return
        if not account.allowed:
            await _refuse(writer, account)
        else:
            await _answer(writer, 502, "Bad Gateway", f"rio-ci egress: {account.reason}\n")

    async def _connect(
        self, request: Request, account: Connection
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        """A connection to the admitted host, or None with the account saying why not."""
        try:
            async with asyncio.timeout(CONNECT_SECONDS):
                addresses = await self._addresses(request, account)
                return await _open_first(addresses, request.port) if addresses else None
        except (TimeoutError, OSError):
            account.reason = UNREACHABLE
        return None

    async def _addresses(self, request: Request, account: Connection) -> list[Address]:
        """Where the host is: its literal, or what its name resolves to. None, the account
        saying why, when the name does not resolve or leads to a special address that is not
        listed (then the host is refused)."""
        literal = address_of(request.host)
        if literal is not None:
            return [literal]
        try:
            found = [address_of(text) for text in await self._resolve(account.host, request.port)]
        except OSError:
            found = []
        addresses = [address for address in found if address is not None]
        if not addresses:
            account.reason = UNRESOLVED
        elif not all(self.policy.reaches(a, request.port) for a in addresses):
            account.allowed, account.reason = False, RESOLVES_TO_SPECIAL
            return []
        return addresses

    async def _system_resolve(self, name: str, port: int) -> list[str]:
        infos = await self._loop.getaddrinfo(name, port, type=socket.SOCK_STREAM)
        return [str(info[4][0]) for info in infos]


def _shown(host: str) -> str:
    """How an account names a host: a name in lower case, an address in its compressed form,
    anything else cut to the longest a name can be."""
    address = address_of(host)
    if address is not None:
        return address.compressed
    return normal_name(host) or host[:253]


async def _open_first(
    addresses: list[Address], port: int
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection to the first of ``addresses`` that answers."""
    failure: OSError | None = None
    for address in addresses:
        try:
            return await asyncio.open_connection(str(address), port, limit=CHUNK)
        except OSError as exc:
            failure = exc
    assert failure is not None
    raise failure


Streams = tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def _relay(request: Request, client: Streams, upstream: Streams, account: Connection) -> None:
    """Carry the connection both ways until the host is done with it (or the client fails),
    counting bytes; a plain-HTTP response gets ``Connection: close`` in its head."""
    try:
        if request.tunnel:
            client[1].write(heads.ESTABLISHED)
        else:
            upstream[1].write(request.forward)
            account.bytes_up += len(request.forward)
        up = asyncio.ensure_future(_copy(client[0], upstream[1], account, up=True))
        down = asyncio.ensure_future(_down(request, upstream[0], client[1], account))
        try:
            await asyncio.wait((up, down), return_when=asyncio.FIRST_COMPLETED)
            if not down.done() and not up.cancelled() and up.result():
                await down  # the client only finished sending: the host still answers
        finally:
            for task in (up, down):
                task.cancel()
            await asyncio.gather(up, down, return_exceptions=True)
    finally:
        upstream[1].close()


async def _down(
    request: Request,
    upstream: asyncio.StreamReader,
    client: asyncio.StreamWriter,
    account: Connection,
) -> bool:
    """The host's side: a plain-HTTP response's head rewritten (``100 Continue`` passed on as
    it is), then the rest copied as it comes."""
    if not request.tunnel:
        try:
            head = await upstream.readuntil(heads.END)
            while heads.interim(head):
                client.write(head)
                account.bytes_down += len(head)
                head = await upstream.readuntil(heads.END)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            await _answer(client, 502, "Bad Gateway", "rio-ci egress: no response head\n")
            return False
        head = heads.closing_response(head)
        client.write(head)
        account.bytes_down += len(head)
    return await _copy(upstream, client, account, up=False)


async def _copy(
    source: asyncio.StreamReader, target: asyncio.StreamWriter, account: Connection, *, up: bool
) -> bool:
    """Copy until ``source`` ends (then half-close ``target``: True) or either side fails
    (False)."""
    try:
        while data := await source.read(CHUNK):
            target.write(data)
            if up:
                account.bytes_up += len(data)
            else:
                account.bytes_down += len(data)
            await target.drain()
        if target.can_write_eof():
            target.write_eof()
    except OSError:
        return False
    return True


async def _refuse(writer: asyncio.StreamWriter, account: Connection) -> None:
    """A ``403`` naming the host (a bad one left out) and the option that would admit it."""
    where = "" if account.reason == BAD_HOST else f"{account.host}:{account.port} "
    line = allow_line(account.host, account.port, account.reason)
    body = f"rio-ci egress refused {where}({account.reason})"
    body += f"; to allow it: {line}\n" if line else "\n"
    await _answer(writer, 403, f"Forbidden by rio-ci egress ({where}{account.reason})", body)


async def _answer(writer: asyncio.StreamWriter, code: int, phrase: str, body: str) -> None:
    data = body.encode()
    head = (
        f"HTTP/1.1 {code} {phrase}\r\nContent-Type: text/plain\r\n"
        f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n"
    )
    writer.write(head.encode() + data)
    with contextlib.suppress(OSError):
        await writer.drain()
