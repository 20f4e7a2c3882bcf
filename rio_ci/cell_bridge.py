"""The harness side of ``rio_ci.api``:
``python -m rio_ci.cell_bridge DB timer|cancel_timer|records|output ...``.
Prints JSON; errors print ``{"error": reason}`` and exit non-zero."""

from __future__ import annotations

import json
import math
import sys

from rio_ci.errors import RioError
from rio_ci.session import Session


def main(argv: list[str]) -> int:
    try:
        db, verb, *rest = argv
        session = Session.open(db)
        if verb == "timer":
            timer_id, deadline, payload, cell = rest
            when = float(deadline)
            if not math.isfinite(when):  # NaN never fires and is not JSON; inf never fires
                raise ValueError(f"a Timer deadline must be a finite Unix time, got {deadline}")
            ack = session.set_timer(timer_id, when, json.loads(payload, parse_constant=_no_nan),
                                    int(cell) if cell else None)
            print(json.dumps(ack))
        elif verb == "cancel_timer":
            print(json.dumps(session.cancel_timer(rest[0])))
        elif verb == "output":
            cell_id, which = int(rest[0]), rest[1]
            if which not in ("stdout", "stderr"):
                raise ValueError(f"stream must be stdout or stderr, got {which!r}")
            text = session.output(cell_id, "stdout" if which == "stdout" else "stderr")
            if text is None:
                raise ValueError(f"cell {cell_id} has no Execution")
            print(json.dumps({"text": text}, ensure_ascii=False))
        elif verb == "records":
            for event in session.journal.events(after=int(rest[0])):
                print(json.dumps(event, ensure_ascii=False))
        else:
            raise ValueError(f"unknown verb {verb}")
    except (RioError, ValueError) as exc:
        print(json.dumps({"error": str(exc)}))
        return 1
    return 0


def _no_nan(name: str) -> None:
    raise ValueError(f"a Timer payload must be JSON: {name} is not")


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
