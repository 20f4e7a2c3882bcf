"""What an Owner is asked of its Cells' confinement: one value, from the command line
(``--cell-user``) or the action (``cell-user``) to the Owner, which builds its
``Confinement`` from it.

Light on purpose: the command line and the GitHub layer read it before they import the
Session or the Owner.
"""

from __future__ import annotations

from dataclasses import dataclass

from rio_ci.run.confinement.user import requested

__all__ = ["ConfinementSettings"]


@dataclass(frozen=True)
class ConfinementSettings:
    """How an Owner is asked to confine its Cells: the one value that travels from the
    command line or the action (``--cell-user``, ``cell-user``) to the Owner.

    ``cell_user``: the unprivileged user every Cell runs as (created when missing), None: the
    harness's own user. ``fresh_home``: empty the Cell user's HOME when the Owner starts
    (every Owner but the action's finish step, which goes on with its run step's)."""

    cell_user: str | None = None
    fresh_home: bool = True

    @classmethod
    def asked(cls, cell_user: str | None) -> ConfinementSettings:
        """The settings a ``--cell-user NAME|none`` (or the action's ``cell-user``) asks
        for; UsageError for a name that is no plain user name."""
        return cls(requested(cell_user))

    def needs_root(self) -> bool:
        """Whether confining Cells so takes root (a Cell user does)."""
        return self.cell_user is not None
