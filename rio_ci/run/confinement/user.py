"""The Cell user is the container (docs/design.md, "The Cell user"; docs/security.md).

When the Owner is root, every Worker runs as a dedicated unprivileged user: created when
missing, with no supplementary groups, ``no_new_privs`` (so no setuid program, ``sudo``
included, can raise it), its own HOME. The working tree is that user's for the run and is
handed back to its owner afterwards; nothing the harness runs or trusts is: the Session file
and its sidecars are the Owner's alone (mode 0600), rio-ci's install and the job's records
belong to the Owner's user. Stopping an Execution stops every process of the Cell user.

Where the Owner cannot be root (not Linux, no root, no passwordless ``sudo``) Cells share the
harness's user, and that is said in the log, the step summary and ``rio-ci show``.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import os
import pwd
import stat
import subprocess
import sys
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from rio_ci.core.errors import RioError
from rio_ci.run.confinement.settings import ConfinementSettings
from rio_ci.run.confinement.spawn import Spawn
from rio_ci.run.confinement.sudo import C_LOCALE, MARK, identify, on_standard_input
from rio_ci.untrusted import programs

# The comment of every user rio-ci creates: the mark of a user whose HOME rio-ci may empty.
COMMENT = "rio-ci Cells"
SUDO_MARK = MARK  # set on the command rio-ci re-executes through sudo (once)
_PR_SET_NO_NEW_PRIVS = 38  # <linux/prctl.h>
# Per-user places a Cell user gets its own of (or none): the harness's would be unreachable
# or, worse, writable by the harness only.
_PER_USER = frozenset(
    {
        "HOME",
        "USER",
        "LOGNAME",
        "MAIL",
        "TMPDIR",
        "XDG_CONFIG_HOME",
        "XDG_CACHE_HOME",
        "XDG_DATA_HOME",
        "XDG_STATE_HOME",
        "XDG_RUNTIME_DIR",
        "UV_CACHE_DIR",
        "UV_PYTHON_INSTALL_DIR",
        "UV_TOOL_DIR",
        "PIP_CACHE_DIR",
        "GIT_CONFIG_GLOBAL",
        "GNUPGHOME",
        "SSH_AUTH_SOCK",
        "SUDO_USER",
        "SUDO_UID",
        "SUDO_GID",
        "SUDO_COMMAND",
    }
)


def separation_problem() -> str | None:
    """Why Cells cannot run as a user of their own here, or None when they can."""
    if not sys.platform.startswith("linux"):
        return f"this is {sys.platform}, not Linux"
    if os.geteuid() != 0:
        return "rio-ci is not root and cannot become root (no passwordless sudo)"
    return None


def become_root(confinement: ConfinementSettings, argv: list[str]) -> None:
    """Re-execute this Owner command as root through ``sudo -n`` when ``confinement`` needs
    root (a Cell user), this process is not root and passwordless sudo works (GitHub-hosted
    runners): only root can run Cells as another user and keep them out of the Owner's
    reach. Classic sudo and sudo-rs alike: the environment crosses as data on standard input
    (rio_ci.run.confinement.sudo), never through sudo's own environment rules (``-E`` is what
    sudo-rs ignores), so the re-executed command and its Cells see what they would have
    seen; the credentials in it are moved out of the initial environment right after, as
    always. Returns when there is nothing to do (then Cells may share the harness's user)."""
    if (
        not confinement.needs_root()
        or not sys.platform.startswith("linux")
        or os.geteuid() == 0
        or os.environ.get(SUDO_MARK)
    ):
        return
    sudo = programs.find("sudo")  # never a sudo of the checkout's, which the job's PATH may name
    if sudo is None:
        return
    probe = subprocess.run(
        [sudo, "-n", "true"],
        env=programs.with_search_path(os.environ),
        capture_output=True,
        check=False,
    )
    if probe.returncode != 0:
        return
    found = identify(sudo)
    # Where rio-ci itself is, for the interpreter to start before it reads the hand-over
    # (sudo drops or resets both); nothing secret, and whoever may sudo without a password
    # may run anything as root anyway.
    kept = [f"{k}={os.environ[k]}" for k in ("PATH", "PYTHONPATH") if k in os.environ]
    sys.stdout.flush()
    sys.stderr.flush()
    with on_standard_input(os.environ, found) as mark:
        os.execve(
            sudo,
            [
                sudo,
                "-n",
                "--",
                "/usr/bin/env",
                *kept,
                f"{SUDO_MARK}={mark}",
                sys.executable,
                "-I",  # isolated: not PYTHONPATH, the user site or the working directory (a Cell's)
                "-m",
                "rio_ci",
                *argv,
            ],
            # sudo runs as root and would read its messages from /usr/share/locale, which a
            # runner image may leave writable by every user; the hand-over restores the
            # job's own locale on arrival.
            {**os.environ, **C_LOCALE},
        )


def _load_prctl() -> Callable[..., int] | None:
    # Resolved in the Owner, once: the child between fork and exec only calls it.
    if not sys.platform.startswith("linux"):
        return None
    prctl: Callable[..., int] = ctypes.CDLL(None, use_errno=True).prctl
    return prctl


_PRCTL = _load_prctl()


def _no_new_privs() -> None:
    """In the Worker, between fork and exec: no exec may ever raise its privileges again
    (setuid and file-capability programs, ``sudo`` among them, run without them)."""
    if _PRCTL is None or _PRCTL(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")


@dataclasses.dataclass(frozen=True)
class CellUser:
    name: str
    uid: int
    gid: int
    home: str
    comment: str = COMMENT

    @classmethod
    def ensure(cls, name: str) -> CellUser:
        """The user ``name``, created when missing (a system user with its own group and
        HOME, no login shell, no other group), checked to be fit for Cells."""
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            _create(name)
            entry = pwd.getpwnam(name)
        user = cls.of(entry)
        problem = user.problem()
        if problem is not None:
            raise RioError(f"the Cell user {name} {problem}; choose another --cell-user")
        user.make_home()
        return user

    @classmethod
    def of(cls, entry: pwd.struct_passwd) -> CellUser:
        return cls(entry.pw_name, entry.pw_uid, entry.pw_gid, entry.pw_dir, entry.pw_gecos)

    def problem(self) -> str | None:
        if self.uid == 0 or self.gid == 0:
            return "is root (or in root's group)"
        if self.uid in (os.getuid(), os.geteuid()) or str(self.uid) == os.environ.get("SUDO_UID"):
            return "is the harness's own user"  # (or the one who ran it through sudo)
        others = sorted(set(os.getgrouplist(self.name, self.gid)) - {self.gid})
        if others:
            return f"belongs to other groups ({others}); a Cell user has none"
        if self.comment != COMMENT:
            # Its HOME is emptied at every Owner's start (home.py): never a user whose
            # HOME holds anything but what Cells left.
            return (
                f"was not created by rio-ci (its comment is not {COMMENT!r}), and rio-ci "
                "empties a Cell user's HOME"
            )
        return None

    def make_home(self) -> None:
        home = Path(self.home)
        if not home.is_absolute() or home == Path("/"):
            raise RioError(f"the Cell user {self.name} has no HOME of its own ({self.home})")
        home.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = os.lstat(home)
        if not stat.S_ISDIR(info.st_mode):
            raise RioError(f"the HOME of the Cell user {self.name} ({home}) is not a directory")
        if info.st_uid != self.uid:
            os.chown(home, self.uid, self.gid)
        home.chmod(0o700)

    def spawn(self) -> Spawn:
        """How a process starts as this user: groups dropped, group then user set, then
        ``no_new_privs``, all before the exec; every process of this user is the Worker's."""
        options = {
            "user": self.uid,
            "group": self.gid,
            "extra_groups": [],
            "preexec_fn": _no_new_privs,
        }
        return Spawn(options=options, uid=self.uid)

    def environment(self, env: Mapping[str, str]) -> dict[str, str]:
        """``env`` with this user's own HOME, name and caches in place of the harness's."""
        kept = {k: v for k, v in env.items() if k not in _PER_USER}
        kept.update(
            HOME=self.home,
            USER=self.name,
            LOGNAME=self.name,
            UV_CACHE_DIR=f"{self.home}/.cache/uv",
        )
        return kept

    def may_enter(self, info: os.stat_result) -> bool:
        """Whether this user may search a directory with ``info`` (it has no other groups)."""
        if info.st_uid == self.uid:
            return bool(info.st_mode & stat.S_IXUSR)
        if info.st_gid == self.gid:
            return bool(info.st_mode & stat.S_IXGRP)
        return bool(info.st_mode & stat.S_IXOTH)


def _create(name: str) -> None:
    useradd = programs.find("useradd")
    if useradd is None:
        raise RioError(f"cannot create the Cell user {name}: {programs.missing('useradd')}")
    done = subprocess.run(
        [
            useradd,
            "--system",
            "--create-home",
            "--user-group",
            "--shell",
            "/usr/sbin/nologin",
            "--comment",
            COMMENT,
            name,
        ],
        env=programs.with_search_path(os.environ),
        capture_output=True,
        text=True,
        check=False,
    )
    exists = 9  # useradd: the name is taken (another Owner created it meanwhile)
    if done.returncode not in (0, exists):
        raise RioError(
            f"cannot create the Cell user {name}: {done.stderr.strip() or done.returncode}"
        )


# --- the working tree, lent to the Cell user --------------------------------------------------


def inside(path: Path, tree: Path) -> bool:
    return path == tree or tree in path.parents


def give_tree(
    tree: Path, user: CellUser, keep_out: Iterable[Path], previous: Mapping[str, Any] | None
) -> dict[str, Any]:
    """Make ``tree`` the Cell user's: every entry owned by the tree's owner is given to the
    user (links themselves, never their targets; nothing in ``keep_out``). Returns what
    ``hand_back`` needs. A tree still the user's from an earlier Owner that never handed it
    back keeps the owner that earlier Owner recorded."""
    info = os.lstat(tree)
    if previous and previous.get("path") == str(tree) and info.st_uid == user.uid:
        owner, group = int(previous["uid"]), int(previous["gid"])
    else:
        owner, group = info.st_uid, info.st_gid
    _chown_tree(tree, owner, user.uid, user.gid, set(keep_out))
    return {"path": str(tree), "uid": owner, "gid": group}


def hand_back(record: Mapping[str, Any], user_uid: int, keep_out: Iterable[Path] = ()) -> None:
    """Give every entry of the tree the Cell user owns back to the tree's recorded owner."""
    tree = Path(record["path"])
    if tree.is_dir():
        try:
            _chown_tree(tree, user_uid, int(record["uid"]), int(record["gid"]), set(keep_out))
        except PermissionError as exc:
            raise RioError(
                f"cannot hand {tree} back from the Cell user to its owner ({exc.strerror}): "
                "only root can; run this Owner with the same --cell-user as the one that "
                "lent it"
            ) from None


def _chown_tree(top: Path, owned_by: int, uid: int, gid: int, keep_out: set[Path]) -> None:
    if owned_by == uid:
        return
    for folder, dirs, files in os.walk(top, followlinks=False):
        base = Path(folder)
        dirs[:] = [d for d in dirs if base / d not in keep_out]
        for name in [".", *dirs, *files]:
            path = base / name if name != "." else base
            if path in keep_out:
                continue
            with contextlib.suppress(FileNotFoundError):
                info = os.lstat(path)
                if info.st_uid == owned_by and (stat.S_ISDIR(info.st_mode) or info.st_nlink == 1):
                    os.lchown(path, uid, gid)


def open_paths(user: CellUser, paths: Iterable[Path]) -> list[list[Any]]:
    """Let ``user`` search every directory on the way to each of ``paths`` (adding the
    others' search bit, never read): ``[[directory, former mode], ...]`` to restore."""
    opened: list[list[Any]] = []
    for path in paths:
        for folder in [*reversed(path.parents), path]:
            with contextlib.suppress(FileNotFoundError):
                info = os.stat(folder)
                if stat.S_ISDIR(info.st_mode) and not user.may_enter(info):
                    mode = stat.S_IMODE(info.st_mode)
                    os.chmod(folder, mode | stat.S_IXOTH)
                    opened.append([str(folder), mode])
    return opened


def close_paths(opened: Iterable[list[Any]]) -> None:
    """Undo ``open_paths`` where nobody changed the mode since."""
    for folder, mode in reversed(list(opened)):
        with contextlib.suppress(FileNotFoundError):
            if stat.S_IMODE(os.stat(folder).st_mode) == int(mode) | stat.S_IXOTH:
                os.chmod(folder, int(mode))


def owner_only(paths: Iterable[Path]) -> None:
    """Mode 0600 for each of ``paths`` that exists (the Session file and its sidecars)."""
    for path in paths:
        with contextlib.suppress(FileNotFoundError):
            if stat.S_IMODE(os.stat(path).st_mode) != 0o600:
                os.chmod(path, 0o600)
