"""The pull-request gate: a success is believed only after it is checked again, here.

The Session file lives where the Cells run, and a Cell can write to it like any file when Cells
share the harness's user. So before a pull request is opened or updated, the publisher checks,
in its own process (which no Cell started), that the run ended the way only the Owner ends it
— the ``conclusion`` Control applied and the run ended in one transaction — and has the Owner
run every validator once more as a Worker under the same supervision (their results are
committed as ``validator_result``s). Any failure means no pull request. The GitHub job's finish
step and ``rio-ci demo`` ask it before they publish (``rio_ci.reports.publish``).
"""

from __future__ import annotations

from rio_ci.run.owner import Owner

__all__ = ["pull_request_gate"]


def pull_request_gate(owner: Owner) -> str | None:
    """None when the run's success stands; otherwise why no pull request may be opened."""
    session = owner.session
    proj = session.refresh()
    ended = proj.ended
    if not ended or ended["result"] != "success":
        return "the run did not end in success"
    seq = int(ended["seq"])
    before, last = [*session.events(after=seq - 2, limit=2), {}, {}][:2]
    note = last.get("note_id")
    if last.get("kind") != "run_ended" or not (
        before.get("kind") == "control_applied"
        and before.get("role") == "conclusion"
        and before.get("result") == "success"
        and isinstance(note, int)
        and before.get("note_id") == note
    ):
        return (
            "the Journal's success was not committed by the Owner (no applied "
            "success conclusion right before it): the Session file was changed"
        )
    for index, argv in enumerate(proj.session["validators"]):
        result = owner.launch.validator(note, index, argv, owner.interrupted)
        if result["type"] != "success":
            why = result.get("reason") or f"exit {result.get('exit_code')}"
            return f"validator {index} ({' '.join(argv)}) failed in the finish step: {why}"
    return None
