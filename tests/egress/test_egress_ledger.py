"""The egress ledger (docs/network.md, "On the record"): within an Execution the first few
identical connections are entries of their own and the rest one counted entry, admitted and
refused alike; made-up host names are bounded too; every connection is still counted; the
refused hosts come back for the Cell's result."""

from __future__ import annotations

import threading

from rio_ci.egress.connection import Connection
from rio_ci.egress.ledger import FIRST, HOSTS, OTHERS, WAIT, Entry, Ledger, Refusal


def refused(tag: int | str, host: str = "evil.test", port: int = 443) -> Connection:
    return Connection(tag, host, port, False, "not_listed")


def admitted(tag: int | str, up: int, down: int, host: str = "pypi.org") -> Connection:
    return Connection(tag, host, 443, True, "listed", up, down)


def test_a_refusal_loop_is_a_few_entries_that_count_every_connection() -> None:
    ledger = Ledger()
    for _ in range(500):
        ledger.put(refused(7))
    early = ledger.drain(now=0.0)
    ending = ledger.end(7, now=1.0)
    entries = early + list(ending.entries)
    assert len(entries) == FIRST + 1 <= 4
    assert [e.count for e in entries] == [1, 1, 1, 497]
    assert {(e.tag, e.host, e.port, e.allowed, e.reason) for e in entries} == {
        (7, "evil.test", 443, False, "not_listed")
    }
    assert ending.refused == (Refusal(7, "evil.test", 443, "not_listed", 500),)
    assert ending.refused[0].line == "--allow-host evil.test:443"


def test_admitted_connections_are_counted_the_same_way_with_their_bytes() -> None:
    ledger = Ledger()
    for n in range(1, 11):
        ledger.put(admitted(3, up=n, down=10 * n))
    entries = ledger.drain(now=0.0) + list(ledger.end(3, now=0.0).entries)
    assert [(e.count, e.bytes_up, e.bytes_down) for e in entries] == [
        (1, 1, 10),
        (1, 2, 20),
        (1, 3, 30),
        (7, sum(range(4, 11)), 10 * sum(range(4, 11))),
    ]
    assert all(e.allowed and e.reason == "listed" for e in entries)


def test_a_count_is_handed_over_once_it_has_waited_and_counting_goes_on() -> None:
    ledger = Ledger()
    for _ in range(FIRST + 2):
        ledger.put(refused(1))
    assert [e.count for e in ledger.drain(now=100.0)] == [1] * FIRST
    assert ledger.drain(now=100.0 + WAIT - 1) == []  # not yet
    ledger.put(refused(1))
    assert [e.count for e in ledger.drain(now=100.0 + WAIT)] == [3]  # waited long enough
    ledger.put(refused(1))
    assert ledger.drain(now=100.0 + WAIT) == []  # a new count starts
    assert [e.count for e in ledger.end(1, now=100.0 + WAIT).entries] == [1]


def test_made_up_host_names_cannot_flood_the_journal_either() -> None:
    ledger = Ledger()
    for n in range(1000):
        ledger.put(refused(5, host=f"x{n}.evil.test"))
    entries = ledger.drain(now=0.0)
    ending = ledger.end(5, now=0.0)
    entries += ending.entries
    assert len(entries) <= HOSTS + FIRST + 1
    assert sum(e.count for e in entries) == 1000
    assert [e.host for e in entries[:HOSTS]] == [f"x{n}.evil.test" for n in range(HOSTS)]
    assert {e.host for e in entries[HOSTS:]} == {OTHERS}
    assert len(ending.refused) == HOSTS + 1
    assert ending.refused[-1] == Refusal(5, OTHERS, 0, "not_listed", 1000 - HOSTS)
    assert ending.refused[-1].line is None


def test_each_execution_is_counted_apart_and_forgotten_at_its_end() -> None:
    ledger = Ledger()
    for tag in (1, 2, 1, 2, 1, 2, 1, 2):
        ledger.put(refused(tag))
    ledger.put(Connection(2, "", 0, False, "bad_request"))  # no host: not a refused host
    first = ledger.end(1, now=0.0)
    # Draining hands over what came in for every Execution; only 1's count is closed.
    assert sorted((e.tag, e.count) for e in first.entries) == [(1, 1)] * 3 + [(1, 1)] + [(2, 1)] * 4
    assert first.refused == (Refusal(1, "evil.test", 443, "not_listed", 4),)
    second = ledger.end(2, now=0.0)
    assert [(e.tag, e.count) for e in second.entries] == [(2, 1)]
    assert second.refused == (Refusal(2, "evil.test", 443, "not_listed", 4),)
    ledger.put(refused(1))  # an Execution that ran again counts afresh
    assert ledger.end(1, now=0.0).entries == (
        Entry(1, "evil.test", 443, False, "not_listed", 0, 0),
    )


def test_the_sink_takes_accounts_from_any_thread() -> None:
    ledger = Ledger()
    threads = [
        threading.Thread(target=lambda: [ledger.put(refused(9)) for _ in range(250)])
        for _ in range(4)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    ending = ledger.end(9, now=0.0)
    assert sum(e.count for e in ending.entries) == 1000
    assert ending.refused[0].count == 1000
