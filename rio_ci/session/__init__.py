"""The Session (docs/sessions.md): the one writer of events.

- ``session``: ``Session``, every outcome a method (``receive``, ``prepare_turn``, ``step``,
  ``set_timer``, ``record_result`` …), each one transaction of the Journal;
- ``facts``: what admission asks of the Journal beyond the projection, answered inside the
  step's transaction;
- ``settings``: ``Settings``, what the Session's first event fixes (its network among them),
  built by ``rio-ci new``, ``.github/rio.yml`` and the action.

The rule of this folder: it is the only code that writes events, and it builds them only with
the constructors of ``rio_ci.core.events``; nobody outside it (and the store) reaches the
Journal. Below it: the core, the store and the model's values; nothing here starts a process or
reads the CI environment. ``tests/quality/test_architecture.py`` checks it.
"""
