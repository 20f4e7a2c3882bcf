"""The harness side of ``rio_ci.api``:
``python -m rio_ci.run.confinement.bridge DB timer|cancel_timer|records|output ...``.
Prints strict JSON; errors print ``{"error": reason}`` and exit non-zero."""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Iterator

from rio_ci.core.errors import RioError
from rio_ci.core.json_value import MAX_SEQ
from rio_ci.session.session import Session
from rio_ci.untrusted import jsonio


def main(argv: list[str]) -> int:
    try:
        if len(argv) < 2:
            raise ValueError("usage: python -m rio_ci.run.confinement.bridge DB VERB ARGS...")
        db, verb, *rest = argv
        answer = _VERBS.get(verb)
        if answer is None:
            raise ValueError(f"unknown verb {verb}")
        for value in answer(Session.open(db), rest):
            _print(value)
    except (RioError, ValueError, IndexError) as exc:
        _print({"error": str(exc)})
        return 1
    return 0


def _timer(session: Session, rest: list[str]) -> Iterator[object]:
    timer_id, deadline, payload, cell = rest
    when = float(deadline)
    if not math.isfinite(when):  # NaN never fires and is not JSON; inf never fires
        raise ValueError(f"a Timer deadline must be a finite Unix time, got {deadline}")
    payload_value = jsonio.loads(payload, "the Timer payload")
    yield session.set_timer(timer_id, when, payload_value, int(cell) if cell else None)


def _cancel_timer(session: Session, rest: list[str]) -> Iterator[object]:
    yield session.cancel_timer(rest[0])


def _output(session: Session, rest: list[str]) -> Iterator[object]:
    cell_id, which = int(rest[0]), rest[1]
    if which not in ("stdout", "stderr"):
        raise ValueError(f"stream must be stdout or stderr, got {which!r}")
    text = session.output(cell_id, "stdout" if which == "stdout" else "stderr")
    if text is None:
        raise ValueError(f"cell {cell_id} has no Execution")
    yield {"text": text}


def _records(session: Session, rest: list[str]) -> Iterator[object]:
    after = int(rest[0])
    if not -MAX_SEQ <= after <= MAX_SEQ:
        raise ValueError(f"after must be a Journal position, got {after}")
    yield from session.events(after=after)


_VERBS: dict[str, Callable[[Session, list[str]], Iterator[object]]] = {
    "timer": _timer,
    "cancel_timer": _cancel_timer,
    "output": _output,
    "records": _records,
}


def _print(value: object) -> None:
    sys.stdout.write(jsonio.dumps(jsonio.printable_value(value)) + "\n")


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
