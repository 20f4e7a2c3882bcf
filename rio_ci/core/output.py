"""Bounded output, written once: a stream keeps its head and its tail, and the bytes elided
between them are counted and marked. Every reader (the State, ``rio-ci output``, the live
log, a validator's result) joins the parts here, so the marker reads the same everywhere.
"""

from __future__ import annotations


def elided_marker(size: int) -> str:
    """The line that stands for ``size`` bytes kept out of the middle of a stream."""
    return f"\n[… {size} bytes elided …]\n"


def joined(head: str, tail: str, elided: int) -> str:
    """A stream's retained text: its head, then (when bytes between them were elided) the
    marker, then its tail."""
    return head + elided_marker(elided) + tail if elided else head + tail
