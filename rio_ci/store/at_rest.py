"""A Session file read at rest, by a process that has imported almost nothing yet: the
``--secret`` names its first event holds, for ``rio_ci.start``, which must know them before it
re-executes an Owner without its credentials (and before the command line's imports, which
that process would throw away). The standard library's lightest modules and ``sqlite3`` only;
``sessionfile`` takes the format's constants from here, so the two cannot drift apart.
"""

from __future__ import annotations

import json
import os
import sqlite3
import stat

__all__ = ["SCHEMA_VERSION", "SIDECARS", "session_secret_names_at_rest"]

SCHEMA_VERSION = (
    2  # the Session file's format (meta.schema_version); migrations.py moves older ones
)
SIDECARS = ("-wal", "-shm", "-journal")  # the names SQLite opens beside a database


def session_secret_names_at_rest(db: str) -> list[str] | None:
    """The ``--secret`` names of the Session file ``db`` as its first event
    (``session_created``, never rewritten) holds them, or None where that cannot be told
    this way: not a regular file, a sidecar SQLite writes (``-wal``, ``-shm``, ``-journal``)
    beside it (the file alone may then be mid-checkpoint), not a Session of a format this
    rio-ci reads (its own or an older one: the first event never changes), or unreadable.

    Read through an ``immutable`` connection, as ``sessionfile`` first judges a file:
    nothing is created beside ``db``, locked or written. Only ``sqlite3`` is imported, not
    the Journal."""
    try:
        real = os.path.realpath(db)
        info = os.stat(real)
    except (OSError, ValueError):  # ValueError: a NUL in the path
        return None
    if not stat.S_ISREG(info.st_mode) or any(os.path.lexists(real + s) for s in SIDECARS):
        return None
    # SQLite reads %HH escapes in a URI's path and ends the path at ? or #.
    path = real.replace("%", "%25").replace("?", "%3f").replace("#", "%23")
    try:
        conn = sqlite3.connect(f"file://{path}?immutable=1", uri=True)
        try:
            created = _first_event(conn)
        finally:
            conn.close()
    # Not SQLite, not a Session, not JSON (or nested past Python's limit), not UTF-8.
    except (sqlite3.Error, ValueError, RecursionError):
        return None
    names = created.get("secrets", []) if isinstance(created, dict) else None
    if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
        return None
    return names


def _first_event(conn: sqlite3.Connection) -> object:
    """The data of a Session's first event (``session_created``) as JSON, or None. ``meta``
    and ``events`` must be plain tables first: a view (over an endless recursive query, say)
    or a virtual table is not a Session, and is never queried."""
    kinds = dict(
        conn.execute(
            "SELECT name, substr(sql, 1, 13) FROM sqlite_master "
            "WHERE name IN ('meta', 'events') AND type = 'table'"
        ).fetchall()
    )
    if kinds != {"meta": "CREATE TABLE ", "events": "CREATE TABLE "}:
        return None
    version = conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    first = conn.execute("SELECT kind, data FROM events WHERE seq = 1").fetchone()
    readable = {(str(format),) for format in range(1, SCHEMA_VERSION + 1)}
    if version not in readable or first is None or first[0] != "session_created":
        return None
    return json.loads(first[1]) if isinstance(first[1], str) else None
