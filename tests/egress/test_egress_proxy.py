"""The egress proxy (docs/network.md, "The proxy", "On the record"), the real one with real
clients (curl, Python's urllib, raw sockets) against servers on 127.0.0.2 and 127.0.0.3 in a
process of their own. It listens on the host's loopback here: what a namespace adds is in
test_egress_netns.py. An allowed host is reached and a refused one is not, a refused name is
never resolved, every connection is accounted for under the Execution it was accepted for,
and a refusal loop stays bounded."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from rio_ci.egress.ledger import Ending
from rio_ci.egress.policy import Policy
from tests.egress_kit import BIG, Names, certificates, fill, rig, servers, shared_place

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux") or not os.access("/usr/bin/openssl", os.X_OK),
    reason="the test servers sit on 127.0.0.2 and 127.0.0.3 (Linux) and need openssl",
)
CLEAN = {"PATH": "/usr/local/bin:/usr/bin:/bin"}  # no proxy variables of the test's own


@pytest.fixture(scope="module")
def place() -> Iterator[Path]:
    with shared_place() as folder:
        fill(folder)
        certificates(folder)
        yield folder


@pytest.fixture(scope="module")
def ports(place: Path) -> Iterator[dict[str, int]]:
    with servers(place / "www", place / "tls") as found:
        yield found


def curl(port: int, *args: str) -> subprocess.CompletedProcess[str]:
    argv = ["curl", "-sS", "-m", "20", "-x", f"http://127.0.0.1:{port}", *args]
    return subprocess.run(argv, capture_output=True, text=True, env=CLEAN, check=False)


def opener(port: int) -> urllib.request.OpenerDirector:
    proxy = f"http://127.0.0.1:{port}"
    return urllib.request.build_opener(urllib.request.ProxyHandler({"http": proxy, "https": proxy}))


def tunnel(port: int, target: str) -> tuple[socket.socket, bytes]:
    """A raw ``CONNECT target`` through the proxy: the socket and the proxy's answer head."""
    client = socket.create_connection(("127.0.0.1", port), timeout=20)
    client.sendall(f"CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = client.recv(4096)
        if not chunk:
            break
        head += chunk
    return client, head


def accounts(ending: Ending) -> list[tuple[object, str, int, bool, str]]:
    return [(e.tag, e.host, e.port, e.allowed, e.reason) for e in ending.entries]


def test_an_allowed_host_is_reached_and_accounted_for(place: Path, ports: dict[str, int]) -> None:
    http, https = ports["http"], ports["https"]
    policy = Policy.of("allowlist", [f"127.0.0.2:{http}", f"127.0.0.2:{https}"])
    with rig(policy) as r:
        r.proxy.tag = 11
        tunnelled = curl(r.port, "-p", f"http://127.0.0.2:{http}/hello.txt")
        secure = curl(
            r.port,
            "--cacert",
            str(place / "tls" / "ca.pem"),
            f"https://127.0.0.2:{https}/hello.txt",
        )
        plain = opener(r.port).open(f"http://127.0.0.2:{http}/hello.txt", timeout=20).read()
        ending = r.ending(11)
    assert tunnelled.stdout == secure.stdout == plain.decode() == "hello from 127.0.0.2\n"
    assert sorted(accounts(ending)) == sorted(
        [(11, "127.0.0.2", port, True, "listed") for port in (http, https, http)]
    )
    assert all(e.bytes_up > 0 and e.bytes_down > len(plain) for e in ending.entries)
    assert ending.refused == ()


def test_bytes_are_counted_each_way(ports: dict[str, int]) -> None:
    http = ports["http"]
    with rig(Policy.of("allowlist", [f"127.0.0.2:{http}"])) as r:
        r.proxy.tag = 1
        client, head = tunnel(r.port, f"127.0.0.2:{http}")
        request = b"GET /big.bin HTTP/1.1\r\nHost: 127.0.0.2\r\nConnection: close\r\n\r\n"
        client.sendall(request)
        received = b""
        while chunk := client.recv(65536):
            received += chunk
        client.close()
        (entry,) = r.ending(1).entries
    assert head == b"HTTP/1.1 200 Connection established\r\n\r\n"
    assert len(received) > BIG
    assert (entry.bytes_up, entry.bytes_down) == (len(request), len(received))


def test_a_plain_request_goes_on_rewritten_and_comes_back_closing(ports: dict[str, int]) -> None:
    http = ports["http"]
    with rig(Policy.of("allowlist", [f"127.0.0.2:{http}"])) as r:
        r.proxy.tag = 2
        request = urllib.request.Request(
            f"http://127.0.0.2:{http}/echo", headers={"Proxy-Authorization": "Basic eDp5"}
        )
        with opener(r.port).open(request, timeout=20) as response:
            echoed = response.read().decode()
            closing = response.headers["Connection"]
        r.ending(2)
    assert echoed.startswith("GET /echo HTTP/1.1\r\n")  # origin form for the host
    assert "Proxy-Authorization" not in echoed and "Connection: close" in echoed
    assert closing == "close"  # the server said keep-alive


def test_a_large_body_goes_up_while_the_host_reads_it(ports: dict[str, int]) -> None:
    http, body = ports["http"], os.urandom(4 * BIG)
    with rig(Policy.of("allowlist", [f"127.0.0.2:{http}"])) as r:
        r.proxy.tag = 3
        answer = opener(r.port).open(f"http://127.0.0.2:{http}/echo", data=body, timeout=30)
        read = answer.read()
        (entry,) = r.ending(3).entries
    assert read == f"read {len(body)}\n".encode()
    assert entry.bytes_up > len(body)


def test_an_interim_continue_is_passed_on_before_the_answer(
    place: Path, ports: dict[str, int]
) -> None:
    http, body = ports["http"], place / "www" / "big.bin"
    with rig(Policy.of("allowlist", [f"127.0.0.2:{http}"])) as r:
        r.proxy.tag = 3
        sent = curl(
            r.port,
            "-v",
            "-H",
            "Expect: 100-continue",
            "--data-binary",
            f"@{body}",
            f"http://127.0.0.2:{http}/echo",
        )
        r.ending(3)
    assert "< HTTP/1.1 100 Continue" in sent.stderr
    assert sent.stdout == f"read {BIG}\n"
    assert "< Connection: close" in sent.stderr  # the answer's head, not only the interim one
    assert "< Connection: keep-alive" not in sent.stderr


def test_a_refused_host_is_refused_named_and_never_resolved(ports: dict[str, int]) -> None:
    names = Names({"refused.test": ["127.0.0.2"], "pkgs.test": ["127.0.0.2"]})
    http = ports["http"]
    with rig(Policy.of("allowlist", [f"pkgs.test:{http}", f"127.0.0.2:{http}"]), names) as r:
        r.proxy.tag = 4
        refused = curl(r.port, "https://refused.test/")
        with pytest.raises(urllib.error.URLError) as told:
            opener(r.port).open("https://refused.test:8443/", timeout=20)
        reached = curl(r.port, f"http://pkgs.test:{http}/hello.txt")
        other = curl(
            r.port,
            f"http://127.0.0.3:{ports['other']}/hello.txt",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
        )
        ending = r.ending(4)
    assert refused.returncode == 56 and "CONNECT tunnel failed, response 403" in refused.stderr
    assert "refused.test:8443 not_listed" in str(told.value)  # urllib shows the status line
    assert reached.stdout == "hello from 127.0.0.2\n"
    assert other.stdout == "403"
    assert names.asked == ["pkgs.test"]  # the refused name never reached the resolver
    assert [(r.host, r.port, r.reason, r.count) for r in ending.refused] == [
        ("refused.test", 443, "not_listed", 1),
        ("refused.test", 8443, "not_listed", 1),
        ("127.0.0.3", ports["other"], "loopback_or_link_local", 1),
    ]
    assert ending.refused[0].line == "--allow-host refused.test:443"


def test_a_name_leading_to_loopback_needs_its_address_listed(ports: dict[str, int]) -> None:
    http = ports["http"]
    names = Names({"sneaky.test": ["127.0.0.2"]})
    url = f"http://sneaky.test:{http}/hello.txt"
    with rig(Policy.of("allowlist", [f"sneaky.test:{http}"]), names) as r:
        r.proxy.tag = 5
        refused = curl(r.port, url, "-o", "/dev/null", "-w", "%{http_code}")
        ending = r.ending(5)
    with rig(Policy.of("allowlist", [f"sneaky.test:{http}", f"127.0.0.2:{http}"]), names) as r:
        r.proxy.tag = 6
        reached = curl(r.port, url)
        r.ending(6)
    assert refused.stdout == "403"
    assert accounts(ending) == [
        (5, "sneaky.test", http, False, "resolves_to_loopback_or_link_local")
    ]
    assert reached.stdout == "hello from 127.0.0.2\n"


def test_open_accounts_for_everything_and_refuses_only_special_addresses(
    ports: dict[str, int],
) -> None:
    http = ports["http"]
    names = Names({"anything.test": ["127.0.0.2"], "localhost": ["127.0.0.1", "::1"]})
    with rig(Policy.of("open", [f"127.0.0.2:{http}"]), names) as r:
        r.proxy.tag = 7
        reached = curl(r.port, f"http://anything.test:{http}/hello.txt")
        codes = [
            curl(r.port, url, "-o", "/dev/null", "-w", "%{http_code}").stdout
            for url in (
                f"http://127.0.0.3:{ports['other']}/",
                f"http://127.0.0.1:{ports['host']}/",
                f"http://localhost:{ports['host']}/",
                "http://nowhere.test/",
            )
        ]
        ending = r.ending(7)
    assert reached.stdout == "hello from 127.0.0.2\n"
    assert codes == ["403", "403", "403", "502"]
    assert accounts(ending) == [
        (7, "anything.test", http, True, "open"),
        (7, "127.0.0.3", ports["other"], False, "loopback_or_link_local"),
        (7, "127.0.0.1", ports["host"], False, "loopback_or_link_local"),
        (7, "localhost", ports["host"], False, "resolves_to_loopback_or_link_local"),
        (7, "nowhere.test", 80, True, "unresolved"),
    ]


def test_none_refuses_everything_even_what_is_listed(ports: dict[str, int]) -> None:
    http = ports["http"]
    names = Names({})
    with rig(Policy.of("none", [f"127.0.0.2:{http}", "pypi.org"]), names) as r:
        r.proxy.tag = 8
        codes = [
            curl(r.port, url, "-o", "/dev/null", "-w", "%{http_code}").stdout
            for url in (f"http://127.0.0.2:{http}/hello.txt", "http://pypi.org/simple/")
        ]
        ending = r.ending(8)
    assert codes == ["403", "403"]
    assert {e.reason for e in ending.entries} == {"network_none"}
    assert ending.refused[1].line == "--network allowlist --allow-host pypi.org:80"
    assert names.asked == []


def test_what_is_not_a_proxy_request_is_answered_and_accounted_for() -> None:
    with rig(Policy.of("open")) as r:
        r.proxy.tag = 9
        client = socket.create_connection(("127.0.0.1", r.port), timeout=20)
        client.sendall(b"SSH-2.0-OpenSSH_9.6\r\n\r\n")
        answer = client.recv(4096)
        client.close()
        socket.create_connection(("127.0.0.1", r.port), timeout=20).close()  # says nothing
        ending = r.ending(9)
    assert answer.startswith(b"HTTP/1.1 400 ")
    assert sorted(accounts(ending)) == [
        (9, "", 0, False, "bad_request"),
        (9, "", 0, False, "no_request"),
    ]
    assert ending.refused == ()  # no host was named


def test_an_admitted_host_that_cannot_be_reached_is_a_bad_gateway(ports: dict[str, int]) -> None:
    closed = socket.socket()
    closed.bind(("127.0.0.2", 0))
    port = closed.getsockname()[1]  # bound, not listening: connections to it are refused
    with rig(Policy.of("allowlist", [f"127.0.0.2:{port}"])) as r:
        r.proxy.tag = 10
        _, head = tunnel(r.port, f"127.0.0.2:{port}")
        ending = r.ending(10)
    closed.close()
    assert head.startswith(b"HTTP/1.1 502 ")
    assert accounts(ending) == [(10, "127.0.0.2", port, True, "unreachable")]
    assert ending.refused == ()


def test_a_connection_keeps_the_tag_it_was_accepted_under_and_ends_with_it(
    ports: dict[str, int],
) -> None:
    http = ports["http"]
    with rig(Policy.of("allowlist", [f"127.0.0.2:{http}"])) as r:
        r.proxy.tag = 21
        first, _ = tunnel(r.port, f"127.0.0.2:{http}")  # held open: the server waits for a request
        r.proxy.tag = 22
        second, _ = tunnel(r.port, f"127.0.0.2:{http}")
        ended = r.ending(21)
        first_closed = first.recv(1) == b""
        second.sendall(b"GET /hello.txt HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        answer = b""
        while chunk := second.recv(4096):  # still open: it is 22's
            answer += chunk
        later = r.ending(22)
    assert first_closed and answer.endswith(b"hello from 127.0.0.2\n")
    assert accounts(ended) == [(21, "127.0.0.2", http, True, "listed")]
    assert accounts(later) == [(22, "127.0.0.2", http, True, "listed")]


def test_connections_still_queued_at_the_end_are_the_ending_executions(
    ports: dict[str, int],
) -> None:
    http = ports["http"]
    with rig(Policy.of("allowlist", [f"127.0.0.2:{http}"]), most=1) as r:
        r.proxy.tag = 31
        held, _ = tunnel(r.port, f"127.0.0.2:{http}")
        queued = socket.create_connection(("127.0.0.1", r.port), timeout=20)
        queued.sendall(f"CONNECT 127.0.0.2:{http} HTTP/1.1\r\n\r\n".encode())
        ending = r.ending(31)  # one connection at a time: the second was never accepted
        with pytest.raises(ConnectionResetError):
            queued.recv(4096)  # closed with its request unread, never served
    held.close()
    assert sorted(accounts(ending)) == [
        (31, "", 0, False, "no_request"),
        (31, "127.0.0.2", http, True, "listed"),
    ]


def test_a_refusal_loop_stays_bounded() -> None:
    with rig(Policy.of("allowlist", ["pypi.org"])) as r:
        r.proxy.tag = 41
        for _ in range(500):
            client, head = tunnel(r.port, "evil.test:443")
            client.close()
            assert head.startswith(b"HTTP/1.1 403 ")
        ending = r.ending(41)
    assert len(ending.entries) <= 4
    assert sum(e.count for e in ending.entries) == 500
    assert [(e.host, e.count) for e in ending.refused] == [("evil.test", 500)]
