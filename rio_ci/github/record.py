"""Pushing the launch record: a write-ahead copy of the Journal's tail, before every launch.

A runner can vanish before the finish step (no ``if: always()``, no artifact). So before a
Worker is spawned, the job pushes one small commit to ``refs/rio/sessions/<issue>`` in the
repository itself, through the git remote the checkout came from; what the commit holds is
``rio_ci.store.launch_record``'s format (``record.json`` and ``tail.jsonl``), whose last event
is the ``execution_started`` of the Cell about to launch. The ref is outside ``refs/heads/``
and its commits carry no ``.github/workflows/``, so no workflow runs; the push needs only
``contents: write``. It is made with ``--force-with-lease`` on the value this job last saw: a
job that is no longer the Session's only writer fails to push and so never launches
(``Fenced``). A job's first record has no parent; later ones have the previous record as
parent, so git sends the grown tail as a delta against the one the remote already has.

Restore (``generations.restore``) reads the record and merges it (``merge``).

A record never outlives its generation: once finish has written generation N + 1 (which
holds everything the record's tail holds), it pushes the same record once more with
``"superseded_by": N + 1`` in its header (``LaunchRecord.supersede``). Restore never rebuilds
or extends a Session from a superseded record: with generation N + 1 or later restored it is
history; with an older one (or none: every generation is gone) it is left out, failing closed
if it shows a launch the restored Session would run again.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rio_ci.core.errors import ForgeError
from rio_ci.core.json_value import ascii_int
from rio_ci.github.git import EMAIL, NAME, Git
from rio_ci.session.session import Session
from rio_ci.store.launch_record import (
    HEADER,
    MAX_HEADER_BYTES,
    MAX_TAIL_BYTES,
    SCHEMA,
    TAIL,
    Record,
    event_line,
    header_text,
    read,
)

PUSH_ATTEMPTS = 3


class RecordError(ForgeError):
    """The launch record could not be pushed (or read): nothing may be launched."""


class Fenced(RecordError):
    """The ref moved since this job last saw it: another job writes the Session now."""


def ref_for(issue: int) -> str:
    return f"refs/rio/sessions/{issue}"


def tail_events(session: Session, after: int) -> Iterator[dict[str, Any]]:
    """The Session's events after ``after`` in the tail's shape."""
    for event in session.events(after=after):
        yield json.loads(event_line(event))


class LaunchRecord:
    """Pushes launch records of one issue's Session to ``remote`` from a bare repository of
    its own at ``git_dir`` (never the checkout, which the Cells may change)."""

    def __init__(
        self, git_dir: Path, remote: str, token: str | None, issue: int, run_id: str = ""
    ) -> None:
        self.git_dir, self.remote, self.token, self.issue = git_dir, remote, token, issue
        self.run_id = run_id
        self.lease: str | None = None  # the ref's value as this job last saw it
        self.parent: str | None = None  # this job's previous record
        self.begin(0, 0)
        self.repo = Git(git_dir)  # the harness's own: no Cell writes its config or hooks
        if not (git_dir / "HEAD").exists():
            git_dir.mkdir(parents=True, exist_ok=True)
            self.repo.run("init", "--quiet", "--bare", "--object-format=sha1")

    def begin(self, generation: int, after_seq: int) -> None:
        """Records from now on carry the tail after ``after_seq``, the last seq of the
        restored ``generation`` (0 and 0: this job created the Session)."""
        self.generation, self.after_seq = generation, after_seq
        self._lines: list[str] = []
        self._last = after_seq
        self._session_id = ""

    @property
    def ref(self) -> str:
        return ref_for(self.issue)

    def _git(self, *args: str, check: bool = True, stdin: str | None = None) -> str:
        return self.repo.run(
            *args, remote=self.remote, token=self.token, check=check, stdin=stdin
        ).stdout

    # --- reading -------------------------------------------------------------------------

    def fetch(self) -> Record | str | None:
        """Read the remote's record and remember its commit as the lease. None: there is
        none; a string: why the one there cannot be read (treated as no record by callers,
        who log it). A remote that cannot be asked raises ``RecordError``."""
        try:
            listed = self._git("ls-remote", self.remote, self.ref).split()
            if not listed:
                self.lease = None
                return None
            self.lease = listed[0]
            self._git("fetch", "--quiet", "--no-tags", self.remote, f"+{self.ref}:{self.ref}")
        except ForgeError as exc:
            raise RecordError(f"cannot read the launch record {self.ref}: {exc}") from None
        return self.read(self.lease)

    def read(self, commit: str) -> Record | str:
        """The record in ``commit``, or why it cannot be used: its contents come from a ref
        anyone with push access can write, so sizes, JSON (of any depth) and shapes are
        checked, and every failure is a reason, never an exception."""
        for name, limit in ((HEADER, MAX_HEADER_BYTES), (TAIL, MAX_TAIL_BYTES)):
            size = self._git("cat-file", "-s", f"{commit}:{name}", check=False).strip()
            if (bytes_ := ascii_int(size)) is None or bytes_ > limit:
                return f"{self.ref}: no readable {name} (or over {limit} bytes)"
        try:
            header = self._git("cat-file", "blob", f"{commit}:{HEADER}")
            tail = self._git("cat-file", "blob", f"{commit}:{TAIL}")
        except ForgeError as exc:
            return f"{self.ref}: unreadable: {' '.join(str(exc).split())[:300]}"
        found = read(header, tail)
        return found if isinstance(found, Record) else f"{self.ref}: {found}"

    # --- writing -------------------------------------------------------------------------

    def push(self, session: Session, cell_id: int) -> str:
        """Push the tail since ``after_seq`` (up to the Session's last event) with a lease
        on the ref's last seen value; returns the new commit. Transient failures are tried
        again; a moved ref raises ``Fenced``, anything else ``RecordError``."""
        self._extend(session)
        header = {
            "schema": SCHEMA,
            "session_id": self._session_id,
            "issue": self.issue,
            "generation": self.generation,
            "after_seq": self.after_seq,
            "last_seq": self._last,
            "cell_id": cell_id,
            "run_id": self.run_id,
        }
        blobs = {
            HEADER: self._object("blob", header_text(header)),
            TAIL: self._object("blob", "".join(self._lines).encode()),
        }
        commit = self._commit(
            blobs, self.parent, f"rio-ci: launch of Cell {cell_id} (run {self.run_id})"
        )
        self.parent = commit
        return commit

    def supersede(self, generation: int) -> bool:
        """Mark the remote's record as superseded by ``generation`` (which finish has just
        written): the same header and tail, plus ``superseded_by``, pushed with a lease on
        the value read. False when there is nothing to mark: no record, one already marked
        by this or a later generation, or a record of a later generation than this job's
        (another job's). A moved ref raises ``Fenced``."""
        found = self.fetch()
        if found is None or self.lease is None:
            return False
        if isinstance(found, Record):
            if (found.superseded_by or 0) >= generation or found.generation >= generation:
                return False
            header = self._git("cat-file", "blob", f"{self.lease}:{HEADER}")
            data = {**json.loads(header), "superseded_by": generation}
            tail = self._git("rev-parse", f"{self.lease}:{TAIL}").strip()
        else:  # unreadable: replaced by an empty record that says only this
            data = {
                "schema": SCHEMA,
                "session_id": "",
                "issue": self.issue,
                "generation": generation - 1,
                "after_seq": 0,
                "last_seq": 0,
                "cell_id": 0,
                "run_id": self.run_id,
                "superseded_by": generation,
            }
            tail = self._object("blob", b"")
        blobs = {
            HEADER: self._object("blob", header_text(data)),
            TAIL: tail,
        }
        self._commit(blobs, self.lease, f"rio-ci: superseded by generation {generation}")
        return True

    def _commit(self, blobs: dict[str, str], parent: str | None, message: str) -> str:
        """A commit of ``blobs`` (name → blob id) on ``parent``, pushed to the ref."""
        tree = self._object(
            "tree",
            b"".join(
                f"100644 {name}".encode() + b"\0" + bytes.fromhex(sha)
                for name, sha in sorted(blobs.items())
            ),
        )
        stamp = f"{NAME} <{EMAIL}> {int(time.time())} +0000"
        line = f"parent {parent}\n" if parent else ""
        commit = self._object(
            "commit",
            f"tree {tree}\n{line}author {stamp}\ncommitter {stamp}\n\n{message}\n".encode(),
        )
        self._push(commit)
        self.lease = commit
        return commit

    def _extend(self, session: Session) -> None:
        self._session_id = session.proj.session["id"]
        for event in session.events(after=self._last):
            self._lines.append(event_line(event) + "\n")
            self._last = event["seq"]

    def _object(self, kind: str, body: bytes) -> str:
        """Store one git object (loose, as git itself would) and return its id: three
        fewer processes per launch than hash-object, mktree and commit-tree."""
        data = f"{kind} {len(body)}\0".encode() + body
        sha = hashlib.sha1(data).hexdigest()  # git's object id (not a security use)
        path = self.git_dir / "objects" / sha[:2] / sha[2:]
        if not path.exists():
            path.parent.mkdir(exist_ok=True)
            partial = path.with_name(f"{sha[2:]}.partial")
            partial.write_bytes(zlib.compress(data, 1))
            os.replace(partial, path)
        return sha

    def _push(self, commit: str) -> None:
        lease = f"--force-with-lease={self.ref}:{self.lease or ''}"
        problem = ""
        for attempt in range(PUSH_ATTEMPTS):
            done = self.repo.run(
                "push",
                "--porcelain",
                "--no-verify",
                lease,
                self.remote,
                f"{commit}:{self.ref}",
                remote=self.remote,
                token=self.token,
                check=False,
            )
            if done.returncode == 0:
                return
            output = done.stdout + done.stderr
            if "stale info" in output or "(fetch first)" in output:
                raise Fenced(
                    f"the launch record {self.ref} moved since this job read it "
                    "(another job writes this Session now); nothing is launched"
                )
            lines = output.strip().splitlines()
            problem = lines[-1] if lines else f"exit {done.returncode}"
            time.sleep(0.5 * 2**attempt)
        raise RecordError(f"cannot push the launch record {self.ref}: {problem}")
