"""``Retention``: a stream's retained text, redacted before anything is kept (docs/sessions.md).

A secret cut by a read boundary must still be caught, and nothing else may wait: a short line
is committed within ``flush_seconds`` even when no more output follows (the live log and the
model see it while the Cell runs)."""

from __future__ import annotations

from rio_ci.run.capture import REDACTED, Retention

SECRET = "sk-ant-api03-canary-Zq8"


def committed(retention: Retention) -> str:
    return "".join(p.text or "" for p in retention.pieces("stdout", with_tail=True))


def test_a_secret_cut_anywhere_by_reads_is_still_redacted() -> None:
    text = f"key={SECRET} and again {SECRET}\n".encode()
    for cut in range(1, len(text)):
        retention = Retention(16_000, [SECRET, "other-secret-value"])
        retention.take(text[:cut])
        first = committed(retention)
        retention.take(text[cut:])
        retention.close()
        whole = first + committed(retention)
        assert whole == f"key={REDACTED} and again {REDACTED}\n", cut


def test_a_line_that_cannot_start_a_secret_is_not_held_back() -> None:
    retention = Retention(16_000, [SECRET])
    retention.take(b"first-marker\n")
    assert committed(retention) == "first-marker\n"  # before the stream ends or grows


def test_only_an_ending_that_could_start_a_secret_waits() -> None:
    retention = Retention(16_000, [SECRET])
    retention.take(b"running sk-an")
    assert committed(retention) == "running "
    retention.take(b"chor\n")
    assert committed(retention) == "sk-anchor\n"
