"""The Cell folder: what a Worker reads of rio-ci, and nothing else (docs/design.md, "The
Cell user is the container").

It holds the in-Cell modules (``pylib/rio_ci/``: ``api.py`` and ``tools/``, standard library
only, on the Worker's ``PYTHONPATH``), the code Cell's script (``cells/cell.py``: one path
for every code Cell of an Owner, since uv keys its cached script environment by the script's
path) and, under a Cell user, uv itself.

Cells that share the harness's user read it beside the Session (``<session>.d``). Under a
Cell user it is a folder of its own under /tmp, made by the Owner for its run and removed when
it closes: the Owner writes it, the Cell user's group may read it, nobody else may enter. So
the Session's folder and the job's records (a GitHub job's ``$RUNNER_TEMP/rio``, which also
holds rio-ci's uv) need no door for the Cell user, and a Cell cannot change what later Cells
import or run.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from rio_ci.run.environment import scratch_dir, uv_binary
from rio_ci.session.session import Session

_PACKAGE = Path(__file__).parents[2]  # rio_ci/


# Where a Cell folder may go: the first of these that exists and may hold programs.
_BASES = ("/tmp", "/var/tmp")


def _bases() -> list[Path]:
    return [Path(p) for p in dict.fromkeys((*_BASES, tempfile.gettempdir())) if os.path.isdir(p)]


def _base() -> tuple[Path, bool]:
    """The folder a Cell folder goes in, and whether uv can be run from there (not where
    every candidate is mounted ``noexec``, as hardened machines mount /tmp)."""
    bases = _bases()
    for base in bases:
        if not os.statvfs(base).f_flag & os.ST_NOEXEC:
            return base, True
    return bases[0], False


def prefix_of(db: Path) -> str:
    """The name every Cell folder of the Session file ``db`` starts with (keyed on the
    file, like its lock, so only its own Owner ever matches it)."""
    info = os.stat(db)
    return f"rio-cells-{info.st_dev:x}-{info.st_ino:x}-"


@dataclass(frozen=True)
class CellFolder:
    path: Path
    uv: str  # the uv a code Cell runs
    own: bool = False  # for a Cell user (removed at close), not the one beside the Session

    @property
    def pylib(self) -> Path:
        return self.path / "pylib"

    @property
    def script(self) -> Path:
        return self.path / "cells" / "cell.py"

    @classmethod
    def beside(cls, session: Session) -> CellFolder:
        """Beside the Session, for Cells of the harness's own user: rio-ci's uv."""
        folder = cls(scratch_dir(session), uv_binary())
        folder.write_modules()
        return folder

    @classmethod
    def for_cell_user(cls, db: Path, gid: int) -> CellFolder:
        """A fresh folder under /tmp that group ``gid`` (the Cell user's) may read and only
        this process may write, with a copy of uv (a hard link where the file system
        allows; where no candidate folder may hold programs, rio-ci's own uv, whose folders
        the Cell user is then let through). Earlier Owners' folders of ``db`` go first."""
        sweep_stale(db)
        base, runnable = _base()
        path = Path(tempfile.mkdtemp(prefix=prefix_of(db), dir=base))
        try:
            os.chown(path, -1, gid)
            path.chmod(0o750)
            folder = cls(path, _uv_in(path) if runnable else uv_binary(), own=True)
            folder.write_modules()
        except BaseException:
            shutil.rmtree(path, ignore_errors=True)
            raise
        return folder

    def write_modules(self) -> None:
        """Copy the in-Cell modules into ``pylib/`` (only files that differ), readable by
        everyone who may enter the folder, whatever this process's umask."""
        package = self.pylib / "rio_ci"
        for folder in (self.pylib, package, package / "tools", self.script.parent):
            folder.mkdir(exist_ok=True)
            folder.chmod(0o755)
        sources = [_PACKAGE / "api.py", *sorted((_PACKAGE / "tools").glob("*.py"))]
        copies = {package / "__init__.py": ""}
        copies.update({package / p.relative_to(_PACKAGE): p.read_text() for p in sources})
        for copy, text in copies.items():
            if not copy.exists() or copy.read_text() != text:
                _write(copy, text)

    def write_script(self, source: str) -> Path:
        _write(self.script, source)
        return self.script

    def remove(self) -> None:
        """Remove a folder made for a Cell user; the one beside the Session stays."""
        if self.own:
            shutil.rmtree(self.path, ignore_errors=True)


def _uv_in(folder: Path) -> str:
    uv = folder / "uv"
    try:
        os.link(uv_binary(), uv)
    except OSError:  # another file system, or a link the kernel refuses
        shutil.copyfile(uv_binary(), uv)
        uv.chmod(0o755)
    return str(uv)


def _write(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(0o644)


def sweep_stale(db: Path, keep: Path | None = None) -> None:
    """Remove the Cell folders that earlier Owners of ``db`` left (killed before they could
    close); the caller holds the Session's lock, so none is in use but ``keep``."""
    for base in _bases():
        for path in base.glob(prefix_of(db) + "*"):
            if path != keep and path.is_dir() and not path.is_symlink():
                with contextlib.suppress(OSError):
                    shutil.rmtree(path)
