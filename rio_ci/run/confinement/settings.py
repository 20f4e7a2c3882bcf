"""What an Owner is asked of its Cells' confinement: one value, from the command line
(``--cell-user``) or the action (``cell-user``) to the Owner, which builds its
``Confinement`` from it.

Light on purpose: the command line and the GitHub layer read it before they import the
Session or the Owner.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from rio_ci.core.errors import UsageError

__all__ = ["NONE", "ConfinementSettings", "requested"]

NONE = "none"  # --cell-user none: Cells run as the harness's user
_NAME = re.compile(r"[a-z_][a-z0-9_-]{0,30}")


def requested(text: str | None) -> str | None:
    """The Cell user a command asks for: a user name, or None for ``none`` or nothing.
    UsageError for a name that is not a plain system user name."""
    value = (text or "").strip()
    if value in ("", NONE):
        return None
    if not _NAME.fullmatch(value):
        raise UsageError(
            f"--cell-user {value!r}: a Cell user is a plain user name (lower-case letters, "
            "digits, '-' and '_', at most 31) or none"
        )
    return value


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
