"""The round loop (docs/concepts.md): a Session's rounds, run until the run ends, only
something from outside can wake it, or a deadline passes.

- ``loop``: ``RoundLoop`` — supervise through the Owner, prepare a Turn, ask the model, admit
  its patch; every attempt committed before the request, every reply before it is admitted;
- ``guidance``: the repository's guidance for agents, read for every request.

The rule of this folder: it supervises only through the Owner and commits only through the
Session's methods; it reads no CI environment and knows no code host (the GitHub layer hands
it what it needs: a callable between rounds, a job's label). ``tests/quality/test_architecture.py``
checks the imports.
"""
