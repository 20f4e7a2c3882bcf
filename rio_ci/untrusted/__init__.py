"""What someone else wrote, or could have written, read by the harness: each module reads one
kind of it and decides what to trust (docs/security.md).

- ``jsonio``: JSON text a user or a host hands in (strict: no ``NaN``, no overflow, bounded
  depth), and what rio-ci prints;
- ``treefile``: a file the working tree offers (a guidance file, the repository's config): a
  regular file inside the tree, read without following a link, never past a bound;
- ``programs``: the programs the harness runs, each found once where no Cell can write, and
  the ``PATH`` its own subprocesses get;
- ``gitenv``: the environment of every git rio-ci runs on a tree that may be hostile;
- ``redirects``: HTTP redirects followed by hand, the caller deciding where each hop goes.

The rule of this folder: a module here returns a value or a reason (a skipped file, a missing
program, a refused hop), never runs what it read, and imports nothing of rio_ci but the pure
core, so every layer above may read through it. ``tests/quality/test_architecture.py`` checks the
imports.
"""
