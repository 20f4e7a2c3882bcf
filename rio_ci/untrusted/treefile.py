"""Reading a file the working tree offers the harness (guidance files, the GitHub config).

The working tree is the agent's: a Cell, or the repository itself, can make ``AGENTS.md`` a
link to ``/dev/zero`` (an endless read), a FIFO (an ``open`` that never returns), or a link
to a file outside the checkout. So such a file is read only when it is a regular file inside
the tree (the resolved path stays under the resolved root), opened without following a final
link and without blocking (``O_NOFOLLOW | O_NONBLOCK``), checked with ``fstat`` on the open
descriptor, and read to at most ``limit + 1`` bytes — never the whole file. Anything else is
skipped, with a reason the caller shows as a warning (docs/tools.md, "Files the harness
reads").
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path

_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_KINDS = {
    stat.S_IFIFO: "a FIFO",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
    stat.S_IFDIR: "a directory",
    stat.S_IFLNK: "a symbolic link",
}


@dataclass(frozen=True)
class TreeFile:
    """What was read: ``data`` (at most ``limit + 1`` bytes; None when nothing was read),
    ``size`` (the file's full size), ``skipped`` (why it was not read, or None when it was
    read or simply absent)."""

    data: bytes | None
    size: int = 0
    skipped: str | None = None

    @property
    def over(self) -> bool:
        return self.data is not None and self.size > len(self.data)


def read_tree_file(root: Path, relative: str, limit: int) -> TreeFile:
    """Read ``root/relative`` as described in the module docstring."""
    base = root.resolve()
    target = base / relative
    try:
        real = target.resolve(strict=True)
    except FileNotFoundError:
        return TreeFile(None)
    except (OSError, RuntimeError) as exc:  # a link loop, a component that is not a dir
        return TreeFile(None, skipped=f"{relative} cannot be resolved ({_why(exc)})")
    if not real.is_relative_to(base):
        return TreeFile(None, skipped=f"{relative} leads out of the checkout (to {real})")
    try:
        descriptor = os.open(real, _FLAGS)
    except OSError as exc:
        return TreeFile(None, skipped=f"{relative} cannot be opened ({_why(exc)})")
    try:
        info = os.fstat(descriptor)
        if not stat.S_ISREG(info.st_mode):
            kind = _KINDS.get(stat.S_IFMT(info.st_mode), "not a regular file")
            return TreeFile(None, skipped=f"{relative} is {kind}, not a regular file")
        return TreeFile(_read_at_most(descriptor, limit + 1), info.st_size)
    except OSError as exc:
        return TreeFile(None, skipped=f"{relative} cannot be read ({_why(exc)})")
    finally:
        os.close(descriptor)


def _read_at_most(descriptor: int, count: int) -> bytes:
    chunks: list[bytes] = []
    left = count
    while left > 0:
        chunk = os.read(descriptor, min(left, 1 << 16))
        if not chunk:
            break
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def _why(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.errno == errno.ELOOP:
        return "a symbolic link"
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return type(exc).__name__
