"""The egress policy (docs/network.md, "The allowlist"): host patterns and their one-line
errors, the three modes, the rule for loopback and link-local addresses in every mode, the
default allowlist with a reason for every entry, and the heads the proxy reads and rewrites."""

from __future__ import annotations

import ipaddress
import re

import pytest

from rio_ci.core.errors import UsageError
from rio_ci.egress import default_allow, heads
from rio_ci.egress.policy import (
    BAD_HOST,
    LISTED,
    NETWORK_NONE,
    NOT_LISTED,
    OPEN,
    SPECIAL,
    Pattern,
    Policy,
    Verdict,
    allow_line,
    parse,
    parse_mode,
)
from tests.kit import ROOT


@pytest.mark.parametrize(
    ("text", "shown", "port"),
    [
        ("pypi.org", "pypi.org", None),
        ("PyPI.org.", "pypi.org", None),
        ("*.pythonhosted.org", "*.pythonhosted.org", None),
        ("github.com:443", "github.com:443", 443),
        ("127.0.0.2", "127.0.0.2", None),
        ("127.0.0.2:8080", "127.0.0.2:8080", 8080),
        ("[::1]:8080", "[::1]:8080", 8080),
        ("::1", "[::1]", None),
        ("[::ffff:127.0.0.1]", "127.0.0.1", None),
        ("  _dmarc.example.com  ", "_dmarc.example.com", None),
    ],
)
def test_every_pattern_form_parses_to_its_plain_spelling(
    text: str, shown: str, port: int | None
) -> None:
    pattern = parse(text)
    assert (str(pattern), pattern.port) == (shown, port)
    assert parse(str(pattern)) == pattern


@pytest.mark.parametrize(
    "text",
    [
        "",
        "*",
        "*.",
        "a.*.com",
        "ex ample.com",
        "http://x.com",
        "x.com:0",
        "x.com:65536",
        "x.com:",
        "x.com:+80",
        "[::1",
        "[::1]80",
        "10.0.0.0/8",
        "127.1",
        "2130706433",
        "-x.com",
        "a" * 64 + ".com",
        "é.com",
    ],
)
def test_a_bad_pattern_is_one_line_saying_what_to_write(text: str) -> None:
    with pytest.raises(UsageError) as raised:
        parse(text)
    message = str(raised.value)
    assert "\n" not in message and repr(text) in message and "*.domain" in message


def test_a_mode_is_one_of_three() -> None:
    assert [parse_mode(m) for m in ("allowlist", "open", "none")] == ["allowlist", "open", "none"]
    with pytest.raises(UsageError, match="choose allowlist, open, none"):
        parse_mode("closed")
    with pytest.raises(UsageError, match="not a host pattern"):
        Policy.of("allowlist", ["pypi.org", "bad host"])


LIST = Policy.of("allowlist", ["github.com", "*.pythonhosted.org", "pypi.org:443", "10.1.2.3"])


@pytest.mark.parametrize(
    ("host", "port", "verdict"),
    [
        ("github.com", 443, (True, LISTED)),
        ("GitHub.com.", 22, (True, LISTED)),  # no port in the pattern: every port
        ("api.github.com", 443, (False, NOT_LISTED)),  # a name is exactly itself
        ("files.pythonhosted.org", 443, (True, LISTED)),
        ("a.b.pythonhosted.org", 443, (True, LISTED)),
        ("pythonhosted.org", 443, (False, NOT_LISTED)),  # a wildcard is subdomains only
        ("evilpythonhosted.org", 443, (False, NOT_LISTED)),
        ("pypi.org", 443, (True, LISTED)),
        ("pypi.org", 80, (False, NOT_LISTED)),
        ("10.1.2.3", 5000, (True, LISTED)),
        ("[::ffff:10.1.2.3]", 5000, (True, LISTED)),  # the same address, IPv4-mapped
        ("10.1.2.4", 80, (False, NOT_LISTED)),
        ("140.82.112.3", 443, (False, NOT_LISTED)),  # a name pattern never admits a literal
        ("github.com@evil.com", 443, (False, BAD_HOST)),
        ("127.1", 80, (False, BAD_HOST)),
        ("2130706433", 80, (False, BAD_HOST)),
        ("", 80, (False, BAD_HOST)),
    ],
)
def test_the_allowlist_admits_what_a_pattern_lists(
    host: str, port: int, verdict: tuple[bool, str]
) -> None:
    assert LIST.admits(host, port) == Verdict(*verdict)


SPECIAL_HOSTS = ["127.0.0.1", "127.0.0.2", "[::1]", "169.254.169.254", "0.0.0.0", "224.0.0.1"]
SPECIAL_HOSTS += ["[fe80::1]", "[::ffff:127.0.0.1]", "0.1.2.3"]


@pytest.mark.parametrize("host", SPECIAL_HOSTS)
def test_loopback_and_link_local_need_a_literal_in_every_mode(host: str) -> None:
    for mode in ("allowlist", "open"):
        assert Policy.of(mode).admits(host, 22) == (False, SPECIAL)
        assert Policy.of(mode, ["*.example.com", "10.0.0.1"]).admits(host, 22) == (False, SPECIAL)
        listed = Policy.of(mode, [f"{host}:22"])
        assert listed.admits(host, 22) == (True, LISTED)
        assert listed.admits(host, 23) == (False, SPECIAL)  # the port is part of the listing
    assert Policy.of("none", [host]).admits(host, 22) == (False, NETWORK_NONE)


def test_open_admits_every_host_and_none_refuses_every_host() -> None:
    assert Policy.of("open").admits("anything.example", 443) == (True, OPEN)
    assert Policy.of("open").admits("10.9.9.9", 80) == (True, OPEN)
    assert Policy.of("open", ["pypi.org"]).admits("pypi.org", 443) == (True, LISTED)
    none = Policy.of("none", ["pypi.org", "10.0.0.1"])
    assert none.admits("pypi.org", 443) == (False, NETWORK_NONE)
    assert none.admits("10.0.0.1", 80) == (False, NETWORK_NONE)
    assert none.admits("bad host", 80) == (False, BAD_HOST)


def test_a_name_may_lead_only_to_an_address_that_is_not_special_or_is_listed() -> None:
    policy = Policy.of("open", ["127.0.0.2:8080"])
    v4, v6 = ipaddress.IPv4Address, ipaddress.IPv6Address
    assert policy.reaches(v4("93.184.216.34"), 443)
    assert not policy.reaches(v4("127.0.0.1"), 443)
    assert not policy.reaches(v4("169.254.169.254"), 80)
    assert not policy.reaches(v6("::1"), 443)
    assert policy.reaches(v4("127.0.0.2"), 8080)
    assert not policy.reaches(v4("127.0.0.2"), 8081)


def test_the_line_that_would_admit_a_refused_host() -> None:
    assert allow_line("evil.test", 443, NOT_LISTED) == "--allow-host evil.test:443"
    assert allow_line("::1", 8080, SPECIAL) == "--allow-host [::1]:8080"
    assert allow_line("pypi.org", 443, NETWORK_NONE) == (
        "--network allowlist --allow-host pypi.org:443"
    )
    assert allow_line("x", 80, BAD_HOST) is None
    assert Policy.of("allowlist", ["[::1]:8080"]).admits("[::1]", 8080).allowed


# --- the default allowlist ----------------------------------------------------------------


def test_every_default_entry_has_a_reason_and_parses() -> None:
    entries = default_allow.entries()
    assert len(entries) >= 6
    for pattern, reason in entries:
        assert isinstance(pattern, Pattern) and len(reason.split()) >= 4, pattern
    assert [str(p) for p in default_allow.patterns()] == [str(p) for p, _ in entries]
    defaults = Policy("allowlist", default_allow.patterns())
    for host in ("github.com", "pypi.org", "files.pythonhosted.org", "registry.npmjs.org"):
        assert defaults.admits(host, 443).allowed, host
    assert not defaults.admits("api.github.com", 443).allowed
    assert not defaults.admits("pypi.org", 80).allowed


def test_an_entry_without_a_reason_is_refused() -> None:
    assert default_allow.read("# why\npypi.org\n\n# and why\n*.x.org:8080\n") == (
        (parse("pypi.org"), "why"),
        (parse("*.x.org:8080"), "and why"),
    )
    with pytest.raises(ValueError, match=r"line 3: pypi\.org has no reason"):
        default_allow.read("# a header\n\npypi.org\n")
    with pytest.raises(ValueError, match=r"line 3: b\.org has no reason"):
        default_allow.read("# why\na.org\nb.org\n")


def test_the_network_page_lists_every_default_entry() -> None:
    """docs/network.md names each default pattern, with a source, and nothing else as one."""
    page = (ROOT / "docs" / "network.md").read_text()
    section = page.split("## The default allowlist", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([^`]+)` \| (.+) \|$", section, re.MULTILINE)
    assert [pattern for pattern, _ in rows] == [str(p) for p in default_allow.patterns()]
    assert all("](https://" in why for _, why in rows), "each row cites the provider's page"


# --- heads --------------------------------------------------------------------------------


def test_a_tunnel_request_names_its_host_and_port() -> None:
    request = heads.read_request(b"CONNECT pypi.org:443 HTTP/1.1\r\nHost: pypi.org:443\r\n\r\n")
    assert (request.tunnel, request.host, request.port, request.forward) == (
        True,
        "pypi.org",
        443,
        b"",
    )
    assert heads.read_request(b"CONNECT [::1]:8443 HTTP/1.1\r\n\r\n").host == "[::1]"


def test_a_plain_request_goes_on_in_origin_form_with_connection_close() -> None:
    head = (
        b"GET http://Example.test:8080/a/b?c=d HTTP/1.1\r\nHost: example.test:8080\r\n"
        b"Proxy-Authorization: Basic eDp5\r\nProxy-Connection: keep-alive\r\n"
        b"Connection: keep-alive\r\nKeep-Alive: timeout=5\r\nAccept: */*\r\n\r\n"
    )
    request = heads.read_request(head)
    assert (request.tunnel, request.host, request.port) == (False, "Example.test", 8080)
    assert request.forward == (
        b"GET /a/b?c=d HTTP/1.1\r\nHost: example.test:8080\r\nAccept: */*\r\n"
        b"Connection: close\r\n\r\n"
    )
    assert heads.read_request(b"GET http://x.test HTTP/1.0\r\n\r\n").forward.startswith(
        b"GET / HTTP/1.0\r\n"
    )
    assert heads.read_request(b"GET http://x.test/ HTTP/1.1\r\n\r\n").port == 80


@pytest.mark.parametrize(
    "head",
    [
        b"GET /relative HTTP/1.1\r\n\r\n",
        b"GET https://x.test/ HTTP/1.1\r\n\r\n",
        b"GET http://user:pw@x.test/ HTTP/1.1\r\n\r\n",
        b"CONNECT x.test HTTP/1.1\r\n\r\n",
        b"CONNECT x.test:99999 HTTP/1.1\r\n\r\n",
        b"CONNECT x.test:443 HTTP/2\r\n\r\n",
        b"SSH-2.0-OpenSSH\r\n\r\n",
        b"GET  http://x.test/ HTTP/1.1\r\n\r\n",
    ],
)
def test_anything_else_is_not_a_proxy_request(head: bytes) -> None:
    with pytest.raises(ValueError):
        heads.read_request(head)


def test_a_response_head_is_told_to_close() -> None:
    head = b"HTTP/1.1 200 OK\r\nConnection: keep-alive\r\nKeep-Alive: timeout=5\r\nX: y\r\n\r\n"
    assert heads.closing_response(head) == b"HTTP/1.1 200 OK\r\nX: y\r\nConnection: close\r\n\r\n"
    assert heads.interim(b"HTTP/1.1 100 Continue\r\n\r\n")
    assert not heads.interim(b"HTTP/1.1 200 OK\r\n\r\n")
