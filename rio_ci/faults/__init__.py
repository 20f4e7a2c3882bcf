"""Fault injection: what lets a test end this process on purpose, the way a power cut or an
OOM kill would (docs/durability.md, "Crash points").

- ``crashpoints``: the named commit boundaries, and ``crash_point(name)`` at each of them.

The rule of this folder: inert unless the process's environment names a point when it starts
(``RIO_CRASH_AT``, which no Worker ever gets); it reads that variable and nothing else, and
imports nothing of rio_ci, so every layer may mark its boundaries with it.
``tests/quality/test_architecture.py`` checks the imports.
"""
