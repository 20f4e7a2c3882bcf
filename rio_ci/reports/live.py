"""The live log of a run: committed events told as they happen, on stderr.

It is a tail of the Journal, so nothing is shown before it is committed: each round (its
number, the model's rationale, the Cells it added or removed, usage and cost so far), each
Execution's output as it is committed, and its result. In GitHub Actions each round is a
``::group::``, collapsed in the job's log. Output is told in whole lines, each line once: the tail
window of a long output is committed again and again as it slides, and only the bytes not told
before are printed (with a marker where bytes were elided). Every terminal control character
in the log (a Cell's output, the model's text, ids chosen outside) is escaped.
"""

from __future__ import annotations

import time
from typing import Any, TextIO

from rio_ci.core.entities import Cell, ShortCell
from rio_ci.core.output import elided_marker
from rio_ci.core.state import first_meaningful_line
from rio_ci.core.text import clip, escape_control
from rio_ci.session.session import Session


class LiveLog:
    def __init__(self, session: Session, stream: TextIO, *, groups: bool = False):
        self.session = session
        self.stream = stream
        self.groups = groups
        self.after = session.proj.last_seq  # only what happens from now on
        self.grouped = False
        self.partial: dict[tuple[int, str], str] = {}  # an output line not yet ended
        self.tail_told: dict[tuple[int, str], int] = {}  # bytes past the head told so far
        self.asked_at: float | None = None  # when the last model attempt was committed
        self.validator_started: float | None = None

    def update(self) -> None:
        """Tell every event committed since the last call, each line stamped with the time
        its event was committed."""
        lines: list[str] = []
        last = self.after
        for event in self.session.events(after=self.after):
            lines.extend(stamped(event["at"], self._lines(event)))
            last = event["seq"]
        self.after = last
        self._write(lines)

    def validator_starting(self, argv: list[str]) -> None:
        """Told by the Owner as it launches a validator (nothing is committed until the
        validator ends, and a slow one would otherwise leave the log silent)."""
        self.update()
        self.validator_started = time.time()
        self._write(stamped(self.validator_started, [f"   validator {_argv(argv)} started"]))

    def _write(self, lines: list[str]) -> None:
        if lines:
            # Escaped once more as a whole: whatever a Cell, the model or an outside caller
            # chose (an id, an argv, a reason) can never reach the terminal raw.
            self.stream.write(escape_control("\n".join(lines)) + "\n")
            self.stream.flush()

    def close(self) -> None:
        self.update()
        rest = [line for key in list(self.partial) for line in self._flush(key)]
        self._write(stamped(time.time(), rest))
        if self.grouped:
            self.stream.write("::endgroup::\n")
            self.stream.flush()
            self.grouped = False

    def _lines(self, event: dict[str, Any]) -> list[str]:
        kind = event["kind"]
        told = getattr(self, f"_{kind}", None)
        return told(event) if told else []

    def _turn_prepared(self, event: dict[str, Any]) -> list[str]:
        round_number = event["turn_id"].split("-")[1]  # turn-<k>-<random>
        title = f"rio-ci: round {round_number} (revision {event['revision']})"
        lines = []
        if self.groups:
            if self.grouped:
                lines.append("::endgroup::")
            lines.append(f"::group::{title}")
            self.grouped = True
        else:
            lines.append(f"── {title}")
        if event["delivered"]:
            lines.append(
                f"   delivered: {', '.join(event['delivered'][:8])}"
                + (" …" if len(event["delivered"]) > 8 else "")
            )
        return lines

    def _model_attempt(self, event: dict[str, Any]) -> list[str]:
        self.asked_at = event["at"]
        lines = [f"   asking {event['model']} (attempt {event['attempt']})"]
        if event.get("fallback_from"):
            lines.insert(
                0,
                f"   the last reply was a refusal: attempt {event['attempt']} goes to "
                f"{event['model']} (fallback for {event['fallback_from']})",
            )
        return lines

    def _model_response(self, event: dict[str, Any]) -> list[str]:
        lines = [self._answered(event)]
        rationale = (event.get("rationale") or "").strip()
        if rationale:
            lines += ["   model: " + escape_control(clip(rationale, 2000)).replace("\n", "\n   ")]
        if event.get("invalid"):
            lines.append(f"   reply not admitted: {escape_control(event['invalid'])}")
        if event.get("error"):
            error = escape_control(clip(event["error"], 500))
            lines.append(f"   model error: {error} — {self._retry_note(event)}")
        usage = self.session.proj.usage
        if event.get("usage"):
            lines.append(
                f"   usage so far: {usage['rounds']} rounds, "
                f"{usage['input_tokens']} in / {usage['output_tokens']} out tokens, "
                f"${usage['cost_usd']:.4f}"
            )
        return lines

    def _answered(self, event: dict[str, Any]) -> str:
        """The attempt's own figures: how long it took, its tokens and cost."""
        took = "" if self.asked_at is None else f" after {event['at'] - self.asked_at:.1f} s"
        usage = event.get("usage") or {}
        cost = usage.get("cost_usd")
        price = "unknown cost" if cost is None else f"${cost:.4f}"
        what = "answered" if event.get("ok") else "no usable answer"
        return (
            f"   {what}{took}: {usage.get('input_tokens', 0)} in / "
            f"{usage.get('output_tokens', 0)} out tokens, {price}"
        )

    def _patch_rejected(self, event: dict[str, Any]) -> list[str]:
        return [f"   patch rejected: {escape_control(event['reason'])}"]

    def _patch_accepted(self, event: dict[str, Any]) -> list[str]:
        lines = [f"   accepted → revision {event['revision']}"]
        lines += [f"   + [{cell['id']}] {describe(cell)}" for cell in event["cells"]]
        lines += [f"   - [{cell_id}] removed" for cell_id in event["removed"]]
        return lines

    def _retry_note(self, event: dict[str, Any]) -> str:
        """What happens after a failed attempt: how long the retry waits and how much of the
        retry budget is used, or why there is none."""
        if event.get("gave_up"):
            return f"not retried: {event['gave_up']}"
        if not event.get("transient"):
            return "final, not retried"
        at = float(event["at"])
        wait = max(float(event.get("not_before") or at) - at, 0.0)
        used = at - float(event.get("retry_since") or at)
        limit = self.session.limits.provider_retry_seconds
        return (
            f"retrying in {wait:.1f} s (attempt {event['attempt']}, {used:.0f} s of "
            f"{limit:.0f} s used)"
        )

    def _execution_started(self, event: dict[str, Any]) -> list[str]:
        return [f"   [{event['cell_id']}] started"]

    def _output(self, event: dict[str, Any]) -> list[str]:
        key = (int(event["cell_id"]), str(event["stream"]))
        lines = self._told(key, event.get("text") or "")
        if "tail" in event:
            lines += self._tail(key, event["tail"], event.get("elided", 0))
        return lines

    def _tail(self, key: tuple[int, str], tail: str, elided: int) -> list[str]:
        """The part of a committed tail window not told before. ``elided + len(tail)`` is
        every byte past the head so far, so the bytes new since the last window are exact;
        when more came than the window holds, a marker says how many were skipped."""
        data = tail.encode()
        seen = elided + len(data)
        new = seen - self.tail_told.get(key, 0)
        self.tail_told[key] = seen
        if new <= 0:
            return []
        if new <= len(data):
            return self._told(key, data[len(data) - new :].decode("utf-8", "replace"))
        marker = elided_marker(new - len(data)).strip()
        return [*self._flush(key), self._prefix(key) + marker, *self._told(key, tail)]

    def _told(self, key: tuple[int, str], text: str) -> list[str]:
        """Whole lines of ``text`` (after what was held back); an unended line waits."""
        *ended, rest = (self.partial.pop(key, "") + text).split("\n")
        if rest:
            self.partial[key] = rest
        return [self._prefix(key) + escape_control(line) for line in ended]

    def _flush(self, key: tuple[int, str]) -> list[str]:
        rest = self.partial.pop(key, "")
        return [self._prefix(key) + escape_control(rest)] if rest else []

    @staticmethod
    def _prefix(key: tuple[int, str]) -> str:
        return f"   [{key[0]}{' stderr' if key[1] == 'stderr' else ''}] "

    def _execution_finished(self, event: dict[str, Any]) -> list[str]:
        cell_id = int(event["cell_id"])
        lines = [line for stream in ("stdout", "stderr") for line in self._flush((cell_id, stream))]
        result = event["result"]
        detail = f" exit {result['exit_code']}" if result.get("exit_code") is not None else ""
        reason = f" ({result['reason']})" if result.get("reason") else ""
        return [*lines, f"   [{cell_id}] → {result['type']}{detail}{reason}"]

    def _control_rejected(self, event: dict[str, Any]) -> list[str]:
        return [f"   control {event['note_id']} rejected: {escape_control(event['reason'])}"]

    def _validator_result(self, event: dict[str, Any]) -> list[str]:
        result = event["result"]
        took = ""
        if self.validator_started is not None:
            took = f" after {max(0.0, event['at'] - self.validator_started):.1f} s"
            self.validator_started = None
        exit_code = f" (exit {result['exit_code']})" if result.get("exit_code") is not None else ""
        return [f"   validator {_argv(event['argv'])} → {result['type']}{exit_code}{took}"]

    def _timer_fired(self, event: dict[str, Any]) -> list[str]:
        return [f"   timer {event['id']} fired"]

    def _message_received(self, event: dict[str, Any]) -> list[str]:
        message = event["message"]
        return [f"   inbox: {message['kind']} {escape_control(message['id'])}"]

    def _run_ended(self, event: dict[str, Any]) -> list[str]:
        return [f"── run ended: {event['result']} — {escape_control(event['reason'])}"]


def stamped(at: float, lines: list[str]) -> list[str]:
    """Each line (and each line inside one) prefixed with the time ``at`` as HH:MM:SS, local
    time; GitHub's workflow commands (``::group::``) stay at the start of their line."""
    stamp = time.strftime("%H:%M:%S", time.localtime(at))
    return [
        part if part.startswith("::") else f"{stamp} {part}"
        for line in lines
        for part in line.split("\n")
    ]


def _argv(argv: list[str]) -> str:
    return _one_line(clip(" ".join(argv), 200))


def describe(cell: Cell | ShortCell) -> str:
    """One line for a Cell: a note's kind and start; an executable Cell's ``description``
    (when the model gave one) before what it runs (``what_it_runs``)."""
    if cell["kind"] == "note":
        role = f"{cell['role']} " if cell.get("role") else ""
        return _one_line(f"note {role}{clip(cell['text'], 120)}")
    if cell.get("description"):
        return _one_line(clip(str(cell["description"]), 100)) + " · " + what_it_runs(cell)
    return what_it_runs(cell)


def what_it_runs(cell: Cell | ShortCell) -> str:
    """An executable Cell's command, or its script's first meaningful line (never an
    import, a comment or a blank line), after its kind: ``cmd pytest -q``,
    ``code time.sleep(30)``."""
    if cell["kind"] == "cmd":
        return _one_line(clip("cmd " + " ".join(cell.get("argv") or []), 160))
    if cell["kind"] == "code":
        return _one_line(f"code {clip(first_meaningful_line(cell.get('source') or ''), 100)}")
    return _one_line(str(cell["kind"]))


def _one_line(text: str) -> str:
    return escape_control(text.replace("\r", "\\r").replace("\n", "\\n"))
