"""What admission asks of the Journal beyond the projection (``rio_ci.core.admission.Facts``),
answered inside the step's transaction: the kinds of committed events a rule cites, and
whether a Cell's Execution ever finished (the projection drops settled ones)."""

from __future__ import annotations

from rio_ci.store.journal import Journal

__all__ = ["JournalFacts"]


class JournalFacts:
    """``admission.Facts`` answered from ``journal``."""

    def __init__(self, journal: Journal):
        self._journal = journal

    def kinds_of(self, seqs: set[int]) -> dict[int, str]:
        return self._journal.kinds_of(seqs) if seqs else {}

    def execution_recorded(self, cell_id: int) -> bool:
        return self._journal.find(str(cell_id), "execution_finished") is not None
