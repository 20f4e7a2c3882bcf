"""The harness side of ``rio_ci.api``: ``python -m rio_ci.cell_bridge DB timer|records ...``.
Prints JSON; errors print ``{"error": reason}`` and exit non-zero."""

from __future__ import annotations

import json
import sys

from rio_ci.errors import RioError
from rio_ci.session import Session


def main(argv: list[str]) -> int:
    try:
        db, verb, *rest = argv
        session = Session.open(db)
        if verb == "timer":
            timer_id, deadline, payload, cell = rest
            ack = session.set_timer(timer_id, float(deadline), json.loads(payload),
                                    int(cell) if cell else None)
            print(json.dumps(ack))
        elif verb == "records":
            for event in session.journal.events(after=int(rest[0])):
                print(json.dumps(event, ensure_ascii=False))
        else:
            raise ValueError(f"unknown verb {verb}")
    except (RioError, ValueError) as exc:
        print(json.dumps({"error": str(exc)}))
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
