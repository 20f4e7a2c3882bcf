"""Named crash points for fault injection.

``crash_point(name)`` does nothing unless the environment variable ``RIO_CRASH_AT`` names
this point, as ``name`` or ``name:N`` (the N-th time this process passes it, 1-based). Then
the process SIGKILLs itself on the spot — no cleanup, no flush — the way a power cut or an
OOM kill would end it. ``POINTS`` lists every point so the fault suite can iterate over them.
"""

from __future__ import annotations

import os
import signal

POINTS = (
    "model_reply_before_commit",  # a complete model reply in memory, not yet committed
    "reply_before_admit",  # the model reply committed, not yet admitted
    "accept_before_commit",  # inside the accept transaction, before COMMIT
    "accept_after_commit",  # the patch committed, nothing dispatched
    "launch_before_spawn",  # `started` committed, no process yet
    "worker_before_release",  # Worker spawned and registered, not yet told to launch
    "script_running",  # the script is running (after release)
    "result_before_commit",  # the script exited, result not committed
    "result_after_commit",  # the result and its Inbox notice committed
    "timer_due_before_commit",  # a Timer is due, its message not committed
    "timer_after_commit",  # the Timer's message committed
    "inbox_before_commit",  # receive(): inside the transaction, before COMMIT
    "inbox_after_commit",  # receive(): committed, not yet acknowledged
    "recovery_midway",  # recovery stopped Workers, UnknownExecutions not yet committed
    "wal_checkpoint",  # during a WAL checkpoint
    "journal_before_commit",  # any write transaction, before COMMIT (:N picks the N-th)
    "journal_after_commit",  # any write transaction, COMMIT returned (:N picks the N-th)
    "turn_after_commit",  # a Turn prepared and committed, the model not yet asked
    "attempt_after_commit",  # a model attempt committed, the request not yet sent
    "worker_spawned",  # the gated Worker exists, its identity not yet committed
    "output_before_commit",  # output read from a running script, not yet committed
    "output_after_commit",  # an output chunk committed, the script still running
    "recovery_after_commit",  # recovery's UnknownExecutions committed, nothing dispatched
    "control_after_commit",  # a cancel Control applied and committed
    "conclusion_before_commit",  # validators ran and committed, the run ending not yet
)
# Points of ``rio-ci action finish`` replacing the artifact directory (the Owner's fault
# workload never passes them; tests/github/test_action_finish.py crashes each one).
FINISH_POINTS = (
    "artifact_pack_midway",  # the new snapshot written aside, its manifest not yet
    "artifact_aside_written",  # the new generation complete aside, not yet swapped in
    "artifact_swapped",  # the new generation in place, the old one not yet removed
)
# A migration of an older Session file (rio_ci/store/migrations.py; tests/store/test_migrations.py
# crashes it): its changes made, the transaction not yet committed.
MIGRATION_POINTS = ("migration_before_commit",)

_target = os.environ.get("RIO_CRASH_AT", "")
_name, _, _nth = _target.partition(":")
_wanted = int(_nth) if _nth.isascii() and _nth.isdigit() else 1
_seen = 0


def crash_point(name: str) -> None:
    """SIGKILL this process if ``RIO_CRASH_AT`` names ``name`` (and its occurrence)."""
    global _seen
    if name != _name:
        return
    _seen += 1
    if _seen == _wanted:
        os.kill(os.getpid(), signal.SIGKILL)
