"""Supervision: the Owner and the processes it runs (docs/sessions.md, docs/security.md).

- ``owner``: the lock, recovery, Timers, Controls and dispatch, one Execution at a time;
- ``launch``, ``worker``, ``capture``: the launch protocol, the gated Worker, bounded and
  redacted output up to the result;
- ``survivors``, ``pidrange``: finding and stopping what is left of Workers;
- ``gate``: the pull-request gate — a success checked again, its validators run again as
  Workers, before anything is published;
- ``cell_user``, ``cells``, ``channel``, ``cell_bridge``: Cells under their own user, and
  ``rio_ci.api`` served to them over a socket; ``sudo``: becoming root for them through
  whichever sudo the runner has;
- ``ownership``, ``environment``: holding the Session file, and what a process starts with.

The rule of this folder: the only code that starts and stops a Cell's processes; it records
every outcome through the Session's methods and reads no CI environment.
"""
