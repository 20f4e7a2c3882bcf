"""Supervision: the Owner and the processes it runs (docs/sessions.md, docs/security.md).

- ``owner``: the lock, recovery, Timers, Controls and dispatch, one Execution at a time;
- ``launch``, ``worker``, ``capture``: the launch protocol, the gated Worker, bounded and
  redacted output up to the result;
- ``survivors``, ``pidrange``: finding and stopping what is left of Workers;
- ``gate``: the pull-request gate — a success checked again, its validators run again as
  Workers, before anything is published;
- ``confinement/``: where and as whom a Cell runs and what it can reach (the Cell user,
  becoming root for it, its HOME and Cell folder, and ``rio_ci.api`` served to Cells over a
  socket);
- ``ownership``, ``environment``: holding the Session file, and what a process starts with.
- ``seal``: rio-ci's own install closed to the Cell user before its first Cell runs.

The rule of this folder: the only code that starts and stops a Cell's processes; it records
every outcome through the Session's methods and reads no CI environment.
"""
