"""Storage: the only code that runs SQL, and the only code that knows rio's file formats.

- ``journal``: the Journal, the append-only events of a Session file, one ``BEGIN IMMEDIATE``
  transaction per write, with its saved projection (docs/sessions.md);
- ``sessionfile``: a Session file seen from outside the Journal (what a path names, what a
  row holds, read-only looks, single-file copies);
- ``at_rest``: the one row an Owner must read before it imports anything else (its
  ``--secret`` names), and the format's constants;
- ``artifact``: the zip that carries a Session file between jobs, with its manifest;
- ``launch_record``: the launch record's two files (a Journal tail pushed before a launch).

The rule of this folder: nothing else imports ``sqlite3`` (the bench's bare baseline commit
aside, which measures SQLite itself) or reads and writes these formats; nothing here starts a
process, talks to a network, reads the CI environment or writes an event of its own — the
Session (``rio_ci.session.session``) decides every event, the Journal stores it.
``tests/quality/test_architecture.py`` checks the imports.
"""
