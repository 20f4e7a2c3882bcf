"""Taking wake-ups into a Session: the one door from outside (docs/design.md, "What wakes a
Session"). A wake-up enters the Inbox once, under its id; one whose author may not steer
never reaches the model; ``stop`` ends the run through the Owner; a source's marks are kept
as watermarks. Rejections (a full Inbox, an id used for other content, a run that ended
meanwhile) are raised as the Session raises them: the caller decides what to do."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Literal

from rio_ci.run.owner import Owner
from rio_ci.wake.source import Mark, WakeUp

# received: it entered the Inbox; duplicate: it had already; ignored: its author may not
# steer, so nothing of it was kept; stopped: a ``stop`` ended the run; status: a ``status``
# asked for a report (the caller gives it).
Outcome = Literal["received", "duplicate", "ignored", "stopped", "status"]


@dataclass(frozen=True)
class Taken:
    """What became of a wake-up; ``seq``: its message's place in the Journal, if it has one."""

    wake_up: WakeUp
    outcome: Outcome
    seq: int | None = None


def take(owner: Owner, wake_up: WakeUp) -> Taken:
    """Take one wake-up into the Owner's Session (its mark aside: ``take_all`` keeps it)."""
    if not wake_up.may_steer:
        return Taken(wake_up, "ignored")
    if wake_up.command == "stop":
        owner.end_in_failure(f"stopped by @{wake_up.author} ({wake_up.url})")
        return Taken(wake_up, "stopped")
    if wake_up.command == "status":
        return Taken(wake_up, "status")
    ack = owner.session.receive(wake_up.id, wake_up.kind, dict(wake_up.payload))
    return Taken(wake_up, "duplicate" if ack["duplicate"] else "received", ack["seq"])


def take_all(
    owner: Owner,
    items: Iterable[WakeUp | Mark],
    told: Callable[[Taken], None] = lambda taken: None,
) -> list[Taken]:
    """Take a source's wake-ups in order, each told to ``told`` as it is taken, keeping its
    marks (a wake-up's once it is taken); on an ended run, or once it ends (a ``stop``), ask
    the source for nothing more. The Owner is the Session's only writer, so the run can end
    only here between two wake-ups."""
    session, done = owner.session, list[Taken]()
    if session.refresh().ended:  # before the source is asked anything
        return done
    for item in items:
        if isinstance(item, Mark):
            session.set_watermark(item.name, item.value)
            continue
        taken = take(owner, item)
        done.append(taken)
        told(taken)
        if item.mark is not None:
            session.set_watermark(item.mark.name, item.mark.value)
        if session.refresh().ended:  # a stop: the source is asked nothing more
            break
    return done
