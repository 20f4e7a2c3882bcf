"""What people read about a Session, made only from committed facts, and publishing it:

- ``timeline``: the Timeline (every Execution, round, validator and job), read from the
  Journal once;
- ``live``: the live log of a run (stderr), a line per committed event;
- ``progress``, ``diagram``, ``markdown``: the progress comment, its Gantt chart, and untrusted
  text made safe in Markdown;
- ``pull_request``: the pull request's description;
- ``publish``: the pull-request gate, and writing the comment and the pull request to a Forge.

The rule of this folder: the same on every code host and every machine — nothing here reads
the CI environment or imports the GitHub layer (a caller passes the run's link), and nothing
here writes to a Session but through its methods. ``tests/test_architecture.py`` checks it.
"""
