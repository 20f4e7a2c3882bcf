"""What a Session fixes when it is created, the Cells' network among them (docs/design.md,
"Settings: what a Session fixes"; docs/network.md): one frozen value written in the first
event and read back from it, set by ``rio-ci new`` and ``.github/rio.yml``, that no patch and
no later event can change; and how people see the network and the refused hosts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from rio_ci.core.admission import Rejection
from rio_ci.core.errors import Rejected, UsageError
from rio_ci.core.limits import Limits
from rio_ci.core.projection import REFUSED_KEPT
from rio_ci.egress import default_allow
from rio_ci.github.contract import Config
from rio_ci.reports import egress, progress
from rio_ci.reports.pull_request import pull_request_body
from rio_ci.reports.timeline import read_timeline
from rio_ci.session.session import Session
from rio_ci.session.settings import OLD_NETWORK, Network, Settings
from tests.kit import Patch

DEFAULTS = [str(p) for p in default_allow.patterns()]


def refusal(host: str, port: int = 443, *, count: int = 1, cell_id: int | None = 1) -> Any:
    return {
        "cell_id": cell_id,
        "host": host,
        "port": port,
        "allowed": False,
        "reason": "not_listed",
        "bytes_up": 0,
        "bytes_down": 0,
        "count": count,
    }


def test_the_settings_are_written_once_and_read_back_from_the_first_event(tmp_path: Path) -> None:
    settings = Settings(
        cwd=str(tmp_path),
        validators=(("pytest", "-q"),),
        limits=Limits(rounds=7),
        pass_env=("NPM_TOKEN",),
        secrets=("HOOK",),
        network=Network.asked("allowlist", ["crates.io:443", "*.example.test"]),
    )
    session = Session.create(tmp_path / "s.db", "goal", settings)
    try:
        assert session.settings == settings
        first = next(session.events())
        assert first["network"] == {
            "mode": "allowlist",
            "allow": [*DEFAULTS, "crates.io:443", "*.example.test"],
        }
        assert Settings.stored(first) == settings
    finally:
        session.close()


def test_a_session_from_before_the_network_settings_has_open_and_is_made_again_the_same(
    tmp_path: Path,
) -> None:
    old = Settings(cwd=str(tmp_path), network=None)
    session = Session.create(tmp_path / "s.db", "goal", old)
    try:
        first = next(session.events())
        assert "network" not in first
        again = Settings.stored(first)
        assert again.network is None and again.created("x", "goal") == old.created("x", "goal")
        assert Network.stored(None) == OLD_NETWORK == Network("open", ())
        shown = egress.network(session.proj)
        assert (shown["mode"], shown["allow"], shown["isolated"]) == ("open", [], False)
    finally:
        session.close()


def test_the_modes_and_patterns_asked_for(tmp_path: Path) -> None:
    assert Network.asked("open") == Network("open", ())
    assert Network.asked("none", ["[::1]:8080"]) == Network("none", ("[::1]:8080",))
    assert Network.asked("allowlist", ["pypi.org:443"]).allow == tuple(DEFAULTS)  # once
    for mode, allow, message in (
        ("closed", [], "not a network mode: 'closed'"),
        ("allowlist", ["*"], "not a host pattern: '\\*'"),
        ("open", ["http://x.com"], "not a host pattern"),
        ("allowlist", ["10.0.0.0/8"], "not a host pattern"),
    ):
        with pytest.raises(UsageError, match=message):
            Network.asked(mode, allow)


def test_no_patch_and_no_later_event_changes_the_settings(tmp_path: Path) -> None:
    settings = Settings(cwd=str(tmp_path), network=Network.asked("none"))
    session = Session.create(tmp_path / "s.db", "goal", settings)
    try:
        turn = session.prepare_turn()
        for op in (
            {"op": "add", "path": "/network", "value": {"mode": "open"}},
            {"op": "replace", "path": "/runtime/limits/rounds", "value": 10**6},
            {"op": "add", "path": "/settings", "value": {"network": "open"}},
        ):
            patch = Patch(turn["state"])
            patch.ops.append(op)
            outcome = session.step(turn["turn_id"], patch.build())
            assert isinstance(outcome, Rejection), op
        created = next(session.events())
        with pytest.raises((Rejected, ValueError), match="session_created at seq"):
            session.import_tail(
                session.proj.last_seq,
                [
                    {
                        "kind": "session_created",
                        "data": {**created, "network": OLD_NETWORK.to_dict()},
                    }
                ],
            )
        assert Session.open(session.path).settings == settings
    finally:
        session.close()


@pytest.mark.slow
def test_new_takes_the_network_flags_and_refuses_a_bad_one_creating_nothing(
    rio: Any, tmp_path: Path
) -> None:
    made = rio("new", "s.db", "--goal", "g", "--network", "allowlist", "--allow-host", "x.test:8")
    assert made.code == 0
    assert rio("show", "s.db", "--json").out["network"] == {
        "mode": "allowlist",
        "allow": [*DEFAULTS, "x.test:8"],
        "isolated": False,
        "reason": egress.NO_CELL_USER,
    }
    assert rio("new", "d.db", "--goal", "g").code == 0
    assert rio("show", "d.db", "--json").out["network"]["mode"] == "open"  # the default here
    bad = rio("new", "b.db", "--goal", "g", "--allow-host", "a.*.com")
    assert (
        bad.code == 2
        and "--network/--allow-host: not a host pattern: 'a.*.com'" in bad.out["error"]
    )
    assert not (tmp_path / "b.db").exists()


def config(tmp_path: Path, text: str) -> Config:
    (tmp_path / "rio.yml").write_text(text)
    return Config.load(tmp_path, "rio.yml")


def test_the_configuration_sets_the_network_and_the_action_defaults_to_the_allowlist(
    tmp_path: Path,
) -> None:
    assert Config.load(tmp_path, "absent.yml").network == Network("allowlist", tuple(DEFAULTS))
    assert config(tmp_path, "validators: []\n").settings("/w").network == Network(
        "allowlist", tuple(DEFAULTS)
    )
    given = config(tmp_path, "network:\n  mode: allowlist\n  allow: [crates.io:443]\n")
    assert given.network.allow == (*DEFAULTS, "crates.io:443")
    assert config(tmp_path, "network: {mode: none}\n").network == Network("none", ())


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("network: open\n", "network must be a mapping"),
        ("network: {mode: open, deny: [x]}\n", "network must be a mapping"),
        ("network: {mode: 3}\n", "network.mode is one of"),
        ("network: {allow: x.com}\n", "network.mode is one of"),
        ("network: {allow: [3]}\n", "network.allow is a list of host patterns"),
        ("network: {mode: shut}\n", "rio.yml: network: not a network mode: 'shut'"),
        ("network: {allow: ['*']}\n", "rio.yml: network: not a host pattern: '\\*'"),
    ],
)
def test_a_bad_network_configuration_is_one_clear_line(
    tmp_path: Path, text: str, message: str
) -> None:
    with pytest.raises(UsageError, match=message) as raised:
        config(tmp_path, text)
    assert "\n" not in str(raised.value)


def test_the_comment_and_the_pull_request_list_refused_hosts_with_the_line_that_allows_them(
    tmp_path: Path,
) -> None:
    session = Session.create(tmp_path / "s.db", "goal", Settings(cwd=str(tmp_path)))
    try:
        session.record_egress(
            [refusal("evil.test"), refusal("evil.test", count=5, cell_id=2), refusal("b|d`x")]
        )
        proj = session.refresh()
        comment = progress.render(
            proj, status="running", run_url=None, generation=1, operation="op"
        )
        body = pull_request_body(
            3,
            "sid",
            read_timeline(session),
            diffstat=None,
            comment_url=None,
            refused=egress.refused_section(proj),
        )
        for text in (comment, body):
            assert "#### Refused connections" in text
            line = (
                '`evil.test:443`, 6 times (last by cell 2): `network: {allow: ["evil.test:443"]}`'
            )
            assert line in text
            assert "`b\\|d'x:443`, 1 times" in text  # a Cell's text cannot break the list
    finally:
        session.close()


def test_the_refused_hosts_people_see_stay_bounded(tmp_path: Path) -> None:
    session = Session.create(tmp_path / "s.db", "goal", Settings(cwd=str(tmp_path)))
    try:
        hosts = REFUSED_KEPT + 8
        session.record_egress([refusal(f"h{n}.test", count=2) for n in range(hosts)])
        tally = egress.egress(session.refresh())
        assert len(tally["refused"]) == REFUSED_KEPT + 1
        assert tally["refused"][-1]["host"] == "*" and tally["refused"][-1]["count"] == 16
        assert sum(r["count"] for r in tally["refused"]) == 2 * hosts
        others = session.proj.egress["refused"][-1]
        assert egress.allowing(others, config=False) is None
    finally:
        session.close()
