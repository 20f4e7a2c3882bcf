"""A Cell's confinement (docs/design.md, "The Cell user"; docs/security.md).

- ``settings``: ``ConfinementSettings``, the one value an Owner is given (``--cell-user``,
  the action's ``cell-user``);
- ``confinement``: ``Confinement``, what an Owner builds from it: the mode (``separate`` or
  ``shared``), the tree lent and handed back, how a Worker starts (``spawn``: a ``Spawn``)
  and what its environment says of the confinement;
- ``user``: the Cell user (created, checked, its ``no_new_privs`` spawn, the tree lent to
  it); ``sudo``: becoming root for it through whichever sudo the runner has; ``home``: its
  HOME emptied in every job; ``folder``: the Cell folder, what a Worker reads of rio-ci;
- ``channel`` and ``bridge``: ``rio_ci.api`` served to Cells over a socket, answered only
  for their user;
- ``network``: ``CellNetwork``, the Cells' network namespace behind the egress proxy (under
  the Cell user), or the host's network and why.

The rule of this folder: the only code that decides where and as whom a Cell runs and what
it can reach. The Owner, the launch, the Worker and the capture apply what it decides (a
``Spawn``, an environment, a tag to begin and end) without knowing why, so a new kind of
confinement lands here and nowhere else.
"""
