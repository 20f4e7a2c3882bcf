"""The rio-ci commands that do more than call the Session: ``run`` and ``work`` (``run``),
``show``, ``demo``, ``eval`` (with its cases, report and chart) and ``bench/`` (all the
benchmark code), with ``human`` for the readable output every command offers.

The rule of this folder: only ``rio_ci.cli`` (and the ``rio-ci`` entry above it) imports it;
nothing of the Session, the Owner, the harness or the GitHub layer depends on a command.
``tests/quality/test_architecture.py`` checks it.
"""
