"""What wakes a Session from outside (docs/design.md, "What wakes a Session").

- ``source``: the seam — a ``WakeUp`` (one thing from outside: its id, kind, author, whether
  that author may steer, what the model reads, an optional command), a ``Mark`` (a source's
  place in its host's history), and ``Source``, what every source of them offers;
- ``take``: the one way a wake-up enters a Session (``take``, ``take_all``): idempotent by
  its id, and nothing from an author who may not steer reaches the model;
- ``listen``: a running job's ``Listener``, which asks a ``Watched`` source cheaply whether
  anything changed, at most every interval, and only then takes its wake-ups in.

A source is one module that implements ``Source`` (and ``Watched``, to be listened to while a
job runs; GitHub's: ``rio_ci/github/intake.py``), handed to ``take_all`` and the
``Listener`` where its job is built.

The rule of this folder: it knows no code host and reads no CI environment; it commits only
through the Session's methods and ends a run only through the Owner.
``tests/quality/test_architecture.py`` checks the imports.
"""
