"""The harness side of ``rio_ci.api``:
``python -m rio_ci.cell_bridge DB timer|cancel_timer|records|output ...``.
Prints strict JSON; errors print ``{"error": reason}`` and exit non-zero."""

from __future__ import annotations

import math
import sys

from rio_ci import jsonio
from rio_ci.errors import RioError
from rio_ci.session import Session

MAX_SEQ = 2**63 - 1  # SQLite's largest integer


def main(argv: list[str]) -> int:
    try:
        if len(argv) < 2:
            raise ValueError("usage: python -m rio_ci.cell_bridge DB VERB ARGS...")
        db, verb, *rest = argv
        session = Session.open(db)
        if verb == "timer":
            timer_id, deadline, payload, cell = rest
            when = float(deadline)
            if not math.isfinite(when):  # NaN never fires and is not JSON; inf never fires
                raise ValueError(f"a Timer deadline must be a finite Unix time, got {deadline}")
            ack = session.set_timer(
                timer_id,
                when,
                jsonio.loads(payload, "the Timer payload"),
                int(cell) if cell else None,
            )
            _print(ack)
        elif verb == "cancel_timer":
            _print(session.cancel_timer(rest[0]))
        elif verb == "output":
            cell_id, which = int(rest[0]), rest[1]
            if which not in ("stdout", "stderr"):
                raise ValueError(f"stream must be stdout or stderr, got {which!r}")
            text = session.output(cell_id, "stdout" if which == "stdout" else "stderr")
            if text is None:
                raise ValueError(f"cell {cell_id} has no Execution")
            _print({"text": text})
        elif verb == "records":
            after = int(rest[0])
            if not -MAX_SEQ <= after <= MAX_SEQ:
                raise ValueError(f"after must be a Journal position, got {after}")
            for event in session.events(after=after):
                _print(event)
        else:
            raise ValueError(f"unknown verb {verb}")
    except (RioError, ValueError, IndexError) as exc:
        _print({"error": str(exc)})
        return 1
    return 0


def _print(value: object) -> None:
    sys.stdout.write(jsonio.dumps(jsonio.printable_value(value)) + "\n")


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
