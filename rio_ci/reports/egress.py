"""The Cells' network as people read it (docs/network.md): the mode and patterns the Session
fixed, whether Cells had a network of their own, and the hosts they were refused, each with
the line that would allow it in a new Session (``--allow-host`` on the command line, the
``network:`` entry of ``.github/rio.yml`` on GitHub)."""

from __future__ import annotations

import json
from typing import Any

from rio_ci.core.entities import RefusedHost
from rio_ci.core.events import CellNetwork
from rio_ci.core.projection import Projection
from rio_ci.egress.policy import allow_line
from rio_ci.reports import markdown as md

REFUSED_SHOWN = 20  # hosts listed in the comment and the pull request; show lists them all
OTHERS = "*"  # the host the ledger and the fold count every host past their bound under
NO_CELL_USER = "no Cell user: they run as the harness's user"
OLD_OWNER = "their Owner was a rio-ci that gave Cells no network of their own"


def network(proj: Projection) -> dict[str, Any]:
    """``{mode, allow, isolated, reason}``: what the Session fixed (a Session from before
    Cells had a network: ``open``) and how its Cells last ran (``reason``: why they used the
    host's network)."""
    fixed = proj.session.get("network") or {"mode": "open", "allow": []}
    ran: CellNetwork = {"isolated": False, "reason": NO_CELL_USER}
    if proj.cell_user is not None:
        ran = proj.cell_user.get("network") or {"isolated": False, "reason": OLD_OWNER}
    return {
        "mode": fixed["mode"],
        "allow": list(fixed["allow"]),
        "isolated": bool(ran["isolated"]),
        "reason": ran["reason"],
    }


def egress(proj: Projection) -> dict[str, Any]:
    """``{allowed, refused: [{host, port, count, cell_id}]}`` for ``show --json``."""
    return {
        "allowed": proj.egress["allowed"],
        "refused": [
            {"host": r["host"], "port": r["port"], "count": r["count"], "cell_id": r["cell_id"]}
            for r in proj.egress["refused"]
        ],
    }


def allowing(refused: RefusedHost, *, config: bool) -> str | None:
    """The line that would admit a refused host in a new Session: the command line's
    options, or (``config``) the ``.github/rio.yml`` entry; None where none would."""
    if refused["host"] == OTHERS:  # many hosts counted as one: no one line admits them
        return None
    line = allow_line(refused["host"], refused["port"], str(refused.get("reason")))
    if line is None or not config:
        return line
    pattern = line.rsplit(" ", 1)[1]
    return f"network: {{allow: [{json.dumps(pattern)}]}}"


def refused_section(proj: Projection) -> list[str]:
    """The refused hosts as a Markdown section for the progress comment and the pull
    request's description ([] when none was refused)."""
    refused = proj.egress["refused"]
    if not refused:
        return []
    lines = [
        "",
        "#### Refused connections",
        "",
        "Cells could not reach these hosts (the Session's network is "
        f"{md.code(network(proj)['mode'])}); to allow one in the next Session:",
        "",
    ]
    for entry in refused[:REFUSED_SHOWN]:
        line = allowing(entry, config=True)
        where = f"{entry['host']}:{entry['port']}"
        text = f"- {md.code(where)}, {entry['count']} times" + _by(entry)
        lines.append(text + (f": {md.code(line)}" if line else " (no entry would allow it)"))
    if len(refused) > REFUSED_SHOWN:
        lines.append(f"- and {len(refused) - REFUSED_SHOWN} more (`rio-ci show`)")
    return [*lines, ""]


def _by(entry: RefusedHost) -> str:
    cell = entry["cell_id"]
    return f" (last by cell {cell})" if cell is not None else " (by a validator)"
