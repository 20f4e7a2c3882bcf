"""The GitHub layer (docs/github.md): the action's phases, intake of events and comments, Session
artifacts and their generations, the progress comment, the working tree on a branch, and the
Forge (GitHub through PyGithub).

The rule of this folder: it is the only code that reads the Actions environment (``GITHUB_*``
and ``RUNNER_*`` variables); everything below it (the Session, the Owner, the harness) works
the same on a laptop. ``tests/test_architecture.py`` checks it."""
