"""What people read about a Session, made only from committed facts, and publishing it:

- ``timeline``: the Timeline (every Execution, round, validator and job), read from the
  Journal once;
- ``live``: the live log of a run (stderr), a line per committed event;
- ``progress``, ``diagram``, ``markdown``: the progress comment, its Gantt chart, and untrusted
  text made safe in Markdown;
- ``pull_request``: the pull request's description;
- ``publish``: writing the comment and the pull request to a Forge (the pull request once the
  pull-request gate, ``rio_ci.run.gate``, lets it).

The rule of this folder: the same on every code host and every machine — nothing here reads
the CI environment or imports the GitHub layer (a caller passes the run's link), and nothing
here writes to a Session but through its methods. ``tests/quality/test_architecture.py`` checks it.
"""
