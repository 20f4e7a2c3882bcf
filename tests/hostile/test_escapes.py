"""Terminal control sequences a Cell prints, or an issue's text carries: ``show``, the
progress comment, the live log and ``--human`` output print them escaped — no clear-screen,
no window-title or hyperlink OSC, no C1 CSI, no carriage return faking a status line, and no
bidirectional control reordering what a reader sees (docs/security.md)."""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any

from conftest import accept, succeed

from rio_ci.reports import progress
from rio_ci.reports.live import LiveLog
from rio_ci.session.session import Session
from rio_ci.session.settings import Settings
from tests.hostile.support import rio
from tests.kit import cmd_cell

HOSTILE = (
    "\x1b[2J\x1b[H"  # clear the screen, cursor home
    "\x1b]0;pwned\x07"  # OSC: set the window title
    "\x1b]8;;https://evil.example\x1b\\click\x1b]8;;\x1b\\"  # OSC 8 hyperlink
    "\u009b31m"  # C1 CSI (one code point) turning text red
    "\rENDED: success — all validators passed\n"  # a fake status line over the line
    "\x00\x7f\x85\n"
    "approved = \u202e\u2066eurt\u2069\u2067\u202c\u202a\u202b\u202d"  # bidi overrides
    " \u200e\u200f\u061c\u2068\n"  # marks and isolates
)
BIDI = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
# Everything a terminal acts on except newline and tab (C0, DEL, C1), and every bidi control.
CONTROL = re.compile(f"[\\x00-\\x08\\x0b-\\x1f\\x7f-\\x9f{BIDI}]")


def session_with_output(tmp_path: Path, text: str) -> Session:
    session = Session.create(tmp_path / "s.db", f"goal {HOSTILE}", Settings(cwd=str(tmp_path)))
    accept(session, lambda p: p.add(cmd_cell("true")))
    succeed(session, 1, output=text)
    session.set_timer(f"timer {HOSTILE}", 4_000_000_000, None)
    return session


def test_show_prints_control_sequences_escaped(tmp_path: Path) -> None:
    session_with_output(tmp_path, HOSTILE).close()
    done = rio("show", str(tmp_path / "s.db"), cwd=tmp_path)
    assert done.returncode == 0
    text = done.stdout.decode("utf-8")
    assert CONTROL.findall(text) == []
    assert "\\x1b[2J" in text and "\\x9b31m" in text and "\\x07" in text
    assert "\\x0dENDED: success" in text  # visible, not a line of its own
    assert "\\u202e\\u2066eurt" in text
    assert not re.search(r"^\s*ENDED", text, re.M)


def test_the_progress_comment_prints_control_sequences_escaped(tmp_path: Path) -> None:
    session = session_with_output(tmp_path, HOSTILE)
    proj: Any = session.refresh()
    body = progress.render(
        proj,
        status=progress.status_of(proj, None),
        run_url=None,
        generation=1,
        operation="op",
        note=f"note {HOSTILE}",
    )
    session.close()
    assert CONTROL.findall(body) == []
    assert "\\x1b[2J" in body and "\\x9b31m" in body and "\\x0dENDED" in body
    assert "\\u202e" in body and "\\u2069" in body
    assert "\nENDED" not in body


def test_the_live_log_prints_control_sequences_escaped(tmp_path: Path) -> None:
    session = Session.create(tmp_path / "s.db", f"goal {HOSTILE}", Settings(cwd=str(tmp_path)))
    stream = io.StringIO()
    live = LiveLog(session, stream)  # tells what happens from now on
    accept(session, lambda p: p.add(cmd_cell("true")))
    succeed(session, 1, output=HOSTILE)
    session.receive(f"comment {HOSTILE}", "comment", {"body": HOSTILE})
    live.update()
    live.close()
    session.close()
    text = stream.getvalue()
    assert "approved" in text and "comment" in text
    assert CONTROL.findall(text) == []
    assert "\\u202e" in text


def test_human_output_prints_control_sequences_escaped(tmp_path: Path) -> None:
    session_with_output(tmp_path, HOSTILE).close()
    done = rio("state", str(tmp_path / "s.db"), "--human", cwd=tmp_path)
    assert done.returncode == 0
    text = done.stdout.decode("utf-8")
    assert "goal" in text
    assert CONTROL.findall(text) == []
    assert "\\u202e\\u2066eurt" in text
