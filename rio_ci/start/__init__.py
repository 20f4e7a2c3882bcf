"""How a rio-ci process starts: what it does before the command line is imported
(``rio_ci/__main__.py`` runs ``early.begin``, then ``rio_ci.cli``).

- ``invocation``: ``sys.argv`` read once into an ``Invocation``, which every decision below
  reads (the command line's own parser reads it again afterwards, and is its judge);
- ``early``: an Owner command holding a credential re-executes without it before the command
  line's imports, where its arguments and its Session at rest allow;
- ``handover``: that re-execution — the credentials carried over in an anonymous file and read
  back by the new process (the Owner's own start-up does it again after its checks);
- ``preload``: the SDK import started in a thread for a run that talks to a model.

The rule of this folder: what runs here runs in a process that may be thrown away at once,
before anything else is imported; so it imports the standard library's lightest modules, the
pure core, ``rio_ci.store.at_rest`` (``sqlite3`` alone) and the providers table
(``rio_ci.model.providers``: which SDK a model needs), nothing else of rio_ci.
``tests/quality/test_architecture.py`` checks the imports, ``tests/start/test_start.py`` what
is imported.
"""
