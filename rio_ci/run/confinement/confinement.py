"""How one Owner confines its Cells: as the Cell user (``separate``) or as itself
(``shared``), the Cell folder they read, and the channel ``rio_ci.api`` reaches it through
(docs/design.md, "The Cell user").

The Owner is given one ``ConfinementSettings`` value and builds its ``Confinement`` from it.
The Cell user and the mode are settled when the Owner starts (so recovery can stop that
user's processes), and the Cell user's HOME is emptied then (``home.py``); the tree is lent,
the Session file closed to the Cell user and the mode committed before the first launch;
:meth:`Confinement.hand_back` (the run's end, ``finish`` before its git work) stops every
process of the Cell user and gives the tree back.
"""

from __future__ import annotations

import dataclasses
import os
import stat
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from rio_ci.core import events as ev
from rio_ci.core.errors import RioError
from rio_ci.egress.connection import Tag
from rio_ci.run.confinement import channel, seal
from rio_ci.run.confinement import folder as cell_folder
from rio_ci.run.confinement import home as cell_home
from rio_ci.run.confinement import user as cu
from rio_ci.run.confinement.channel import SOCKET_VAR, Channel
from rio_ci.run.confinement.folder import CellFolder
from rio_ci.run.confinement.network import CellNetwork
from rio_ci.run.confinement.settings import ConfinementSettings
from rio_ci.run.confinement.spawn import Spawn
from rio_ci.run.environment import scratch_dir, worker_environment
from rio_ci.run.survivors import stop_user
from rio_ci.session.session import Session
from rio_ci.session.settings import OLD_NETWORK
from rio_ci.store.at_rest import SIDECARS

SHARED_NOTICE = "Cells share the harness's user"


class Confinement:
    """One Owner's confinement of its Cells, built from its ``ConfinementSettings``."""

    def __init__(self, settings: ConfinementSettings, notice: Callable[[str], None]):
        self.settings = settings
        self.requested = settings.cell_user
        self.user: cu.CellUser | None = None
        self.reason: str | None = None
        if self.requested is not None:
            self.reason = cu.separation_problem()
            if self.reason is None:
                self.user = cu.CellUser.ensure(self.requested)
                if settings.fresh_home:
                    cell_home.fresh(self.user)
                seal.seal(self.user, notice)  # rio-ci's own install closed to it
            else:
                notice(
                    f"{SHARED_NOTICE} ({self.reason}): they can reach everything the "
                    "harness can, its Session file and its memory included"
                )
        self.channel: Channel | None = None
        self.folder: CellFolder | None = None
        self.tree: dict[str, Any] | None = None  # while the tree is lent: its owner
        self.opened: list[list[Any]] = []
        self._recorded: ev.CellUserMode | None = None
        self._notice = notice
        self.network: CellNetwork | None = None  # made before the first launch (prepare)

    @property
    def separate(self) -> bool:
        return self.user is not None

    def spawn(self) -> Spawn:
        """How a Worker of this Owner is started: as the Cell user, in the Cells' network
        namespace where they have one, or as the harness."""
        if self.user is None:
            return Spawn()
        assert self.network is not None, "prepare() comes first"
        return dataclasses.replace(self.user.spawn(), around=self.network.entered)

    def environment(self, env: dict[str, str]) -> dict[str, str]:
        """A Worker's environment: the channel's path, and under a Cell user its own HOME
        (and no path to the Session file it could not open anyway) and the proxy's
        variables where Cells have a network of their own."""
        assert self.channel is not None and self.network is not None, "prepare() comes first"
        env = {**env, SOCKET_VAR: str(self.channel.path)}
        if self.user is None:
            return env
        env.pop("RIO_SESSION_DB", None)
        return self.network.environment(self.user.environment(env))

    # --- the Cells' network ----------------------------------------------------------------

    def begin(self, tag: Tag) -> None:
        """An Execution (``tag``: its Cell id, or a validator's name) is about to be
        released."""
        if self.network is not None:
            self.network.begin(tag)

    def end(self, tag: Tag) -> tuple[list[ev.Egress], list[ev.RefusedHost]]:
        """Its processes are stopped: its ``egress`` events still to commit, and the hosts
        it was refused (for its result)."""
        return self.network.end(tag) if self.network is not None else ([], [])

    def egress_due(self) -> list[ev.Egress]:
        """The ``egress`` events to commit now."""
        return self.network.due() if self.network is not None else []

    def _network(self, session: Session) -> CellNetwork:
        """The Cells' network for what the Session fixed: their own where they run as the
        Cell user (and a namespace can be made), else the host's, said in the log."""
        why = None
        if self.user is None:
            why = self.reason or "no Cell user: they run as the harness's user"
        made = CellNetwork(session.settings.network or OLD_NETWORK, why)
        if self.requested is not None and (line := made.notice()) is not None:
            self._notice(line)
        return made

    # --- before the first launch ---------------------------------------------------------

    def sweep_stale(self, session: Session) -> None:
        """Remove the channel folders and Cell folders that Owners of this Session killed
        before they could close left behind; this Owner's own stay."""
        channel.sweep_stale(session.path, keep=self.channel.dir if self.channel else None)
        cell_folder.sweep_stale(session.path, keep=self.folder.path if self.folder else None)

    def prepare(self, session: Session) -> None:
        """Idempotent; before every launch. Under a Cell user: the Session's files the
        Owner's alone, nothing of the user running, the tree lent, the user let through to
        the tree and the Cell folder. Then the channel, and the mode committed."""
        if self.channel is not None and (self.user is None or self.tree is not None):
            return
        scratch = scratch_dir(session)
        if self.network is None:
            self.network = self._network(session)
        if self.folder is None:
            self.folder = (
                CellFolder.beside(session)
                if self.user is None
                else CellFolder.for_cell_user(session.path, self.user.gid)
            )
        if self.user is not None and self.tree is None:
            self._lend(session, self.user, scratch, self.folder)
        if self.channel is None:
            db = session.path
            uid, gid = (self.user.uid, self.user.gid) if self.user else (os.geteuid(), -1)
            # No credential and none of the Session's --secret values: a Cell of the same
            # user may read a bridge's /proc/<pid>/environ while it answers.
            env = worker_environment(os.environ, extra=session.proj.session.get("secrets", []))
            channel.sweep_stale(db)  # also when no recovery ran first
            self.channel = Channel(db, uid, gid, env, scratch)
        if self.requested is not None and self._recorded != (mode := self._mode()):
            session.record_cell_user(mode)
            self._recorded = mode

    def _lend(self, session: Session, user: cu.CellUser, scratch: Path, folder: CellFolder) -> None:
        db = session.path
        tree = Path(os.path.realpath(session.proj.session["cwd"]))
        files = _session_files(db)
        for path in [db, scratch]:
            if cu.inside(path, tree):
                raise RioError(
                    f"{path} is inside the working directory {tree}, which the Cell user "
                    f"{user.name} is given: keep the Session outside it"
                )
        if cu.inside(folder.path, tree):
            raise RioError(
                f"the working directory {tree} holds {folder.path.parent}, where Cells read "
                "rio-ci from: choose a working directory that does not"
            )
        parent = os.stat(db.parent)
        if _writable_by(parent, user) and not parent.st_mode & stat.S_ISVTX:
            raise RioError(
                f"the Cell user {user.name} may write {db.parent}, so it could remove or "
                "replace the Session file: keep the Session in a folder it cannot write"
            )
        cu.owner_only(files)
        self.stop_processes(session)
        recorded: Mapping[str, Any] = session.proj.cell_user or {}  # any release's
        self.tree = cu.give_tree(tree, user, [*files, scratch], recorded.get("tree"))
        opened = cu.open_paths(user, [tree, folder.path, Path(folder.uv).parent])
        known = {str(p) for p, _ in self.opened}
        self.opened += [e for e in [*recorded.get("opened", []), *opened] if e[0] not in known]

    def _mode(self) -> ev.CellUserMode:
        assert self.requested is not None
        if self.user is None:
            return {
                "mode": "shared",
                "user": self.requested,
                "uid": None,
                "gid": None,
                "reason": self.reason,
                "tree": None,
                "opened": [],
                "network": self._network_record(),
            }
        return {
            "mode": "separate",
            "user": self.user.name,
            "uid": self.user.uid,
            "gid": self.user.gid,
            "reason": None,
            "tree": self.tree,
            "opened": list(self.opened),
            "network": self._network_record(),
        }

    def _network_record(self) -> ev.CellNetwork:
        assert self.network is not None
        return self.network.record()

    # --- stopping and handing back ---------------------------------------------------------

    def stop_processes(self, session: Session) -> None:
        """Stop every process of this Owner's Cell user and of the one the Session last
        recorded (an earlier Owner's), or raise RecoveryError. An Owner that may not signal
        that user fails here if anything of it runs: closed, never open."""
        uids = {self.user.uid} if self.user else set()
        recorded: Mapping[str, Any] = session.proj.cell_user or {}  # any release's
        if recorded.get("mode") == "separate" and recorded.get("uid") is not None:
            uids.add(int(recorded["uid"]))
        for uid in sorted(uids - {os.getuid(), os.geteuid()}):
            stop_user(uid)

    def hand_back(self, session: Session) -> None:
        """Stop every process of the Cell user, then give the tree back to the owner
        recorded when it was lent (by this Owner or an earlier one that never could), and
        take back the search bits. Safe to call when nothing is lent."""
        recorded: Mapping[str, Any] = session.refresh().cell_user or {}
        if recorded.get("mode") != "separate" and self.user is None:
            return
        self.stop_processes(session)
        tree = self.tree or recorded.get("tree")
        uid = self.user.uid if self.user else recorded.get("uid")
        if tree and uid is not None:
            db = session.path
            cu.hand_back(tree, int(uid), [*_session_files(db), scratch_dir(session)])
        cu.close_paths(self.opened or recorded.get("opened", []))
        self.tree = None

    def close(self, session: Session) -> None:
        try:
            if self.tree is not None:
                self.hand_back(session)
        finally:
            try:
                self._close_network(session)
            finally:
                self._close_channel()

    def _close_network(self, session: Session) -> None:
        """Stop the proxy (every process of the Cells is stopped by now) and commit what its
        ledger still holds; a Session that commits nothing more loses only that count."""
        if self.network is not None:
            rest, self.network = self.network.close(), None
            if rest:
                session.record_egress(rest)

    def _close_channel(self) -> None:
        if self.channel is not None:
            self.channel.close()
            self.channel = None
        if self.folder is not None:
            self.folder.remove()
            self.folder = None


def _writable_by(info: os.stat_result, user: cu.CellUser) -> bool:
    if info.st_uid == user.uid:
        return bool(info.st_mode & stat.S_IWUSR)
    if info.st_gid == user.gid:
        return bool(info.st_mode & stat.S_IWGRP)
    return bool(info.st_mode & stat.S_IWOTH)


def _session_files(db: Path) -> list[Path]:
    """The Session file and the sidecars SQLite opens beside it."""
    return [db, *(db.with_name(db.name + suffix) for suffix in SIDECARS)]
