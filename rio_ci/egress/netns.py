"""A network namespace for a Session's Cells (docs/design.md, "Egress: the mechanism").

:meth:`Netns.make` creates a network namespace whose only interface is its own loopback,
brings that loopback up and creates in it the proxy's listening socket (127.0.0.1, ``PORT``),
then returns the calling thread to where it was. Nothing routes out of it: a process inside
reaches its own loopback, and the world only through that socket, which the proxy accepts
from outside (a socket stays in the namespace it was made in, whoever uses it).

A process starts in the network namespace of the thread that creates it, so a Worker is
spawned inside by wrapping only its ``Popen`` in :meth:`Netns.entered`: that thread enters,
``Popen`` forks, the thread returns. Every other thread stays where it is, and the user,
groups and ``no_new_privs`` a ``Popen`` applies are untouched (they are applied after the
fork, in the child, which is already inside; a ``preexec_fn`` cannot do the entering itself,
since CPython calls it after it has dropped to the Cell user, who may not).

No binary is needed (``ip``, ``nsenter``): ``unshare``, ``setns`` and one ``ioctl``. The
namespace lives as long as its file descriptor, its listening socket or a process in it, and
leaves nothing on disk.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import functools
import os
import socket
import struct
import sys
import threading
from collections.abc import Iterator

from rio_ci.core.errors import NamespaceError

CLONE_NEWNET = 0x40000000  # <linux/sched.h>
PORT = 3128  # the proxy's port in every namespace: each one is empty, so one number serves all
_SIOCGIFFLAGS = 0x8913  # <linux/sockios.h>
_SIOCSIFFLAGS = 0x8914
_IFF_UP = 0x1  # <linux/if.h>
_IFREQ = "16sH22x"  # struct ifreq: the name, then ifr_flags, padded to 40 bytes
_BACKLOG = 128


@functools.cache
def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _call(name: str, *args: int) -> None:
    """libc's ``name(*args)``; OSError naming the call when it fails."""
    if getattr(_libc(), name)(*args) != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{name}: {os.strerror(code)}")


def _current() -> int:
    """A descriptor of this thread's network namespace (namespaces belong to threads)."""
    return os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)


def _return_to(host: int) -> None:
    """Back to the namespace ``host`` names; NamespaceError when the kernel refuses."""
    try:
        _call("setns", host, CLONE_NEWNET)
    except OSError as exc:
        raise NamespaceError(
            f"a thread could not return to the host's network namespace ({exc.strerror}); "
            "rio-ci stops rather than go on from it"
        ) from exc


def _loopback_up() -> None:
    """``ip link set lo up``, for this thread's namespace: its flags read and written back."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        request = struct.pack(_IFREQ, b"lo", 0)
        flags = struct.unpack(_IFREQ, fcntl.ioctl(probe, _SIOCGIFFLAGS, request))[1]
        fcntl.ioctl(probe, _SIOCSIFFLAGS, struct.pack(_IFREQ, b"lo", flags | _IFF_UP))


def listener(port: int) -> socket.socket:
    """A TCP socket listening on 127.0.0.1:``port`` of the calling thread's network namespace
    (where no namespace can be made, the host's: there a Cell's tools reach the proxy only if
    they honour its variables, and nothing stops one that does not). It is made with
    ``IPPROTO_TCP`` named: asyncio sets ``TCP_NODELAY`` on the sockets a listener accepts only
    when its protocol says TCP, and without it each response in a tunnel waits ~40 ms."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        listener.bind(("127.0.0.1", port))
        listener.listen(_BACKLOG)
    except BaseException:
        listener.close()
        raise
    return listener


class Netns:
    """A network namespace with only its loopback, and the proxy's listening socket in it."""

    def __init__(self, fd: int, listener: socket.socket) -> None:
        """Use :meth:`make`."""
        self._fd = fd
        self.listener = listener
        self.port: int = listener.getsockname()[1]
        self.inode = os.fstat(fd).st_ino  # the namespace's identity (/proc/PID/ns/net)

    @classmethod
    def make(cls, port: int = PORT) -> Netns:
        """A new namespace, the calling thread back where it was. OSError when the kernel
        refuses one (not root, no ``CAP_SYS_ADMIN``, a seccomp filter, a limit: see
        :func:`problem`); NamespaceError when the thread could not come back."""
        host = _current()
        try:
            _call("unshare", CLONE_NEWNET)
            try:
                made = _current()
                try:
                    _loopback_up()
                    return cls(made, listener(port))
                except BaseException:
                    os.close(made)
                    raise
            finally:
                _return_to(host)
        finally:
            os.close(host)

    @contextlib.contextmanager
    def entered(self) -> Iterator[None]:
        """The calling thread in this namespace for the block, then back: wrap a ``Popen`` and
        nothing else. OSError when it cannot enter (nothing ran inside); NamespaceError when
        it cannot come back (it fails closed: the thread stays where nothing is reachable,
        and the caller must stop)."""
        host = _current()
        try:
            _call("setns", self._fd, CLONE_NEWNET)
            try:
                yield
            finally:
                _return_to(host)
        finally:
            os.close(host)

    def close(self) -> None:
        """Close the listening socket and the namespace's descriptor; the namespace goes when
        its last process does. Closing twice does nothing."""
        self.listener.close()
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


def problem() -> str | None:
    """Why no network namespace can be made here, in words for the log and ``show``, or None
    when one can. It makes one (and closes it) in a thread of its own, which ends with it."""
    if not sys.platform.startswith("linux"):
        return f"this is {sys.platform}, not Linux"
    found: list[str | None] = []
    probe = threading.Thread(target=lambda: found.append(_try()), name="netns-probe")
    probe.start()
    probe.join()
    return found[0]


def _try() -> str | None:
    try:
        Netns.make(0).close()
    except NamespaceError as exc:
        return str(exc)
    except OSError as exc:
        return refusal(exc)
    return None


def refusal(exc: OSError) -> str:
    """Why :meth:`Netns.make` raised ``exc``, in words for the log and ``show``."""
    if exc.errno == errno.EPERM and os.geteuid() != 0:
        return f"rio-ci is not root, and network namespaces need root ({exc.strerror})"
    return f"network namespaces refused ({exc.strerror})"
