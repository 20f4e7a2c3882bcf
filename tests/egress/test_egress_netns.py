"""A Cell's network of its own (docs/network.md): real network namespaces, the real proxy,
real clients (curl, Python, git, uv) run as a Cell user of the test's own, spawned the way a
Worker is (``Popen`` as the user, no groups, ``no_new_privs``, inside
``Netns.entered()``), against servers on 127.0.0.2 and 127.0.0.3 in a process of their own.

An allowed host is reached by every client; a refused one is refused and named; a connection
around the proxy reaches nothing and leaves no account (it never reached the proxy); every
connection that reached it is accounted for under its Execution; a refusal loop stays
bounded; where no namespace can be made, ``problem()`` says why.

These need root (tests run as root here and in CI) and skip elsewhere.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from rio_ci.egress import netns
from rio_ci.egress.connection import Tag, variables
from rio_ci.egress.ledger import Ending
from rio_ci.egress.netns import Netns
from rio_ci.egress.policy import Policy
from rio_ci.run.confinement.user import CellUser
from rio_ci.run.environment import uv_binary
from rio_ci.run.survivors import stop_user
from tests.egress_kit import Names, Rig, certificates, fill, rig, servers, shared_place
from tests.hostile.support import unprivileged_command, unprivileged_env

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not sys.platform.startswith("linux")
        or os.geteuid() != 0
        or not shutil.which("useradd")
        or not shutil.which("openssl")
        or not os.access("/usr/bin/python3", os.X_OK),
        reason="network namespaces and a Cell user need root on Linux (as in CI), openssl "
        "for the test CA and a Python every user may run",
    ),
]
SYSTEM_PYTHON = "/usr/bin/python3"


@pytest.fixture(scope="module")
def place() -> Iterator[Path]:
    with shared_place() as folder:
        fill(folder)
        certificates(folder)
        uv = folder / "uv"  # uv where the Cell user may run it
        try:
            os.link(uv_binary(), uv)
        except OSError:
            shutil.copy2(uv_binary(), uv)
        uv.chmod(0o755)
        yield folder


@pytest.fixture(scope="module")
def ports(place: Path) -> Iterator[dict[str, int]]:
    with servers(place / "www", place / "tls") as found:
        yield found


class Cells:
    """A Cell user's Executions in a network namespace whose only way out is the proxy."""

    def __init__(self, user: CellUser, namespace: Netns, proxy: Rig, place: Path) -> None:
        self.user, self.namespace, self.rig = user, namespace, proxy
        ca = str(place / "tls" / "ca.pem")
        base = {
            "PATH": f"{place}:/usr/local/bin:/usr/bin:/bin",
            "LANG": "C.UTF-8",
            "SSL_CERT_FILE": ca,
            "CURL_CA_BUNDLE": ca,
            "GIT_SSL_CAINFO": ca,
            "GIT_CONFIG_NOSYSTEM": "1",
            "UV_NO_CONFIG": "1",
            "UV_PYTHON_DOWNLOADS": "never",
        }
        self.env = {**user.environment(base), **variables(namespace.port)}

    def run(self, tag: Tag, script: str, timeout: float = 120) -> str:
        """``script`` run by ``sh`` as one Execution ``tag``, spawned as a Worker is; its
        output (stdout and stderr). Every process of the user is stopped afterwards."""
        self.rig.proxy.tag = tag
        with self.namespace.entered():
            child = subprocess.Popen(
                ["/bin/sh", "-c", script],
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                env=self.env,
                cwd=self.user.home,
                start_new_session=True,
                **self.user.spawn().options,
            )
        try:
            output, _ = child.communicate(timeout=timeout)
        finally:
            stop_user(self.user.uid)
        return output.decode(errors="replace")

    def end(self, tag: Tag) -> Ending:
        return self.rig.ending(tag)


@pytest.fixture
def names() -> Names:
    return Names({"pkgs.test": ["127.0.0.2"], "refused.test": ["127.0.0.2"]})


@pytest.fixture
def cells(cell_user: str, place: Path, ports: dict[str, int], names: Names) -> Iterator[Cells]:
    user = CellUser.ensure(cell_user)
    http, https = ports["http"], ports["https"]
    allow = [f"127.0.0.2:{http}", f"127.0.0.2:{https}", f"pkgs.test:{http}"]
    namespace = Netns.make()
    try:
        with rig(Policy.of("allowlist", allow), names, namespace.listener) as proxy:
            yield Cells(user, namespace, proxy, place)
    finally:
        namespace.close()


def lines(output: str) -> list[str]:
    return output.strip().splitlines()


def thread_namespace() -> str:
    return os.readlink("/proc/thread-self/ns/net")


def test_a_cell_starts_in_a_namespace_of_its_own_as_the_cell_user(cells: Cells) -> None:
    before = thread_namespace()
    output = cells.run(
        1,
        "id -u; grep NoNewPrivs /proc/self/status; readlink /proc/self/ns/net;"
        " tail -n +3 /proc/net/dev | cut -d: -f1 | tr -d ' ';"
        " unshare -n true 2>/dev/null && echo unshared || echo unshare-refused;"
        " nsenter --net=/proc/1/ns/net true 2>/dev/null && echo entered || echo nsenter-refused",
    )
    assert lines(output) == [
        str(cells.user.uid),
        "NoNewPrivs:\t1",
        f"net:[{cells.namespace.inode}]",
        "lo",
        "unshare-refused",
        "nsenter-refused",
    ]
    assert thread_namespace() == before != f"net:[{cells.namespace.inode}]"


def test_an_allowed_host_is_reached_by_every_client(
    cells: Cells, ports: dict[str, int], names: Names
) -> None:
    http, https = ports["http"], ports["https"]
    fetch = (
        "import urllib.request, sys; "
        "print(urllib.request.urlopen(sys.argv[1], timeout=20).read().decode(), end='')"
    )
    output = cells.run(
        1,
        f"curl -sS https://127.0.0.2:{https}/hello.txt;"
        f" curl -sS http://pkgs.test:{http}/hello.txt;"
        f' {SYSTEM_PYTHON} -c "{fetch}" https://127.0.0.2:{https}/hello.txt;'
        f" git ls-remote https://127.0.0.2:{https}/repo.git | cut -f2;"
        f" git ls-remote http://127.0.0.2:{http}/repo.git | cut -f2",
    )
    ending = cells.end(1)
    assert lines(output) == ["hello from 127.0.0.2"] * 3 + ["HEAD", "refs/heads/main"] * 2
    assert {(e.tag, e.host, e.port, e.allowed, e.reason) for e in ending.entries} == {
        (1, "127.0.0.2", https, True, "listed"),
        (1, "pkgs.test", http, True, "listed"),
        (1, "127.0.0.2", http, True, "listed"),
    }
    assert sum(e.count for e in ending.entries) >= 6 and ending.refused == ()
    assert names.asked == ["pkgs.test"]


def test_uv_installs_a_wheel_through_the_proxy(cells: Cells, ports: dict[str, int]) -> None:
    index = f"https://127.0.0.2:{ports['https']}/simple/"
    output = cells.run(
        1,
        f"uv pip install -q --target lib --python {SYSTEM_PYTHON} --index-url {index}"
        " rio_bench_tiny && ls lib",
    )
    ending = cells.end(1)
    assert "rio_bench_tiny" in lines(output)
    assert {(e.host, e.port, e.allowed) for e in ending.entries} == {
        ("127.0.0.2", ports["https"], True)
    }


def test_a_refused_host_is_refused_and_named(
    cells: Cells, ports: dict[str, int], names: Names
) -> None:
    fetch = (
        "import urllib.request\ntry:\n urllib.request.urlopen('https://refused.test/', timeout=20)"
        "\nexcept Exception as e:\n print(e)"
    )
    other = f"127.0.0.3:{ports['other']}"
    output = cells.run(
        2,
        "curl -sS https://refused.test/ 2>&1; echo curl=$?;"
        f' {SYSTEM_PYTHON} -c "{fetch}";'
        f" git ls-remote http://{other}/repo.git 2>&1 | tail -1;"
        f" uv pip install -q --target lib --python {SYSTEM_PYTHON}"
        f" --index-url http://{other}/simple/ rio_bench_tiny 2>&1 | tail -1",
    )
    ending = cells.end(2)
    said = lines(output)
    assert "CONNECT tunnel failed, response 403" in said[0] and said[1] == "curl=56"
    assert "403" in said[2] and "refused.test:443 not_listed" in said[2]
    assert "403" in said[3] and "403 Forbidden" in said[4]
    assert [(r.tag, r.host, r.port, r.reason) for r in ending.refused] == [
        (2, "refused.test", 443, "not_listed"),
        (2, "127.0.0.3", ports["other"], "loopback_or_link_local"),
    ]
    assert ending.refused[0].count == 2  # curl, then Python
    assert ending.refused[1].line == f"--allow-host {other}"
    assert names.asked == []  # a refused name never reaches the resolver


def test_around_the_proxy_nothing_is_reached_and_nothing_is_accounted(
    cells: Cells, ports: dict[str, int]
) -> None:
    probe = (
        "import errno, socket\n"
        "u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
        "try:\n u.sendto(b'x', ('10.255.255.1', 53))\n"
        "except OSError as e:\n print('udp', errno.errorcode[e.errno])\n"
        "try:\n socket.getaddrinfo('pypi.org', 443)\n"
        "except OSError as e:\n print('dns', type(e).__name__)\n"
    )
    direct = "curl -sS --noproxy '*' -m 10 -o /dev/null"
    output = cells.run(
        3,
        f"{direct} http://127.0.0.2:{ports['http']}/hello.txt 2>/dev/null; echo other=$?;"
        f" {direct} http://127.0.0.1:{ports['host']}/hello.txt 2>/dev/null; echo host=$?;"
        f" {direct} -g http://[::1]:{ports['host']}/ 2>/dev/null; echo ipv6=$?;"
        f" {direct} http://10.255.255.1/ 2>/dev/null; echo away=$?;"
        f' {SYSTEM_PYTHON} -c "{probe}"',
    )
    ending = cells.end(3)
    assert lines(output) == [
        "other=7",
        "host=7",
        "ipv6=7",
        "away=7",
        "udp ENETUNREACH",
        "dns gaierror",
    ]
    assert ending.entries == () and ending.refused == ()  # it never reached the proxy


def test_a_cells_own_loopback_server_is_reached_directly(cells: Cells, place: Path) -> None:
    """``NO_PROXY`` keeps a Cell's own servers direct; sent to the proxy instead, the same
    address is the host's loopback there, and refused."""
    serve = (  # a server of the Cell's own that says when it listens, through a FIFO
        "import http.server, sys; h = http.server.SimpleHTTPRequestHandler; "
        "s = http.server.HTTPServer(('127.0.0.1', 8000), h); "
        "open(sys.argv[1], 'w').close(); s.serve_forever()"
    )
    output = cells.run(
        7,
        f'mkfifo ready; cd {place}/www && {SYSTEM_PYTHON} -c "{serve}" ~/ready >/dev/null 2>&1 &'
        " cat ~/ready;"
        " curl -sS http://127.0.0.1:8000/hello.txt;"
        " curl -s --noproxy '' -o /dev/null -w '%{http_code}' http://127.0.0.1:8000/hello.txt",
    )
    ending = cells.end(7)
    assert lines(output) == ["hello from 127.0.0.2", "403"]
    assert [(r.host, r.port, r.reason) for r in ending.refused] == [
        ("127.0.0.1", 8000, "loopback_or_link_local")
    ]


def test_every_connection_is_accounted_for_under_its_execution(
    cells: Cells, ports: dict[str, int]
) -> None:
    http = ports["http"]
    script = f"curl -s http://127.0.0.2:{http}/hello.txt; curl -s https://x.evil.test/"
    for tag in (4, 5):  # as the Owner does: run, stop, end, then the next
        cells.run(tag, script)
        ending = cells.end(tag)
        assert sorted((e.tag, e.host, e.allowed, e.count) for e in ending.entries) == [
            (tag, "127.0.0.2", True, 1),
            (tag, "x.evil.test", False, 1),
        ]
        assert [(r.tag, r.host) for r in ending.refused] == [(tag, "x.evil.test")]


def test_a_refusal_loop_stays_bounded(cells: Cells) -> None:
    output = cells.run(6, "curl -s -o /dev/null $(seq -f 'https://evil.test/%g' 500); echo $?")
    ending = cells.end(6)
    assert lines(output) == ["56"]
    assert len(ending.entries) <= 4
    assert sum(e.count for e in ending.entries) == 500
    assert [(r.host, r.count) for r in ending.refused] == [("evil.test", 500)]


def test_entering_a_closed_namespace_fails_and_leaves_the_thread_where_it_was() -> None:
    namespace = Netns.make(0)
    namespace.close()
    before = thread_namespace()
    ran = []
    with pytest.raises(OSError), namespace.entered():
        ran.append(True)
    assert ran == [] and thread_namespace() == before


def python_of(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def test_where_no_namespace_can_be_made_the_problem_says_why(tmp_path: Path) -> None:
    assert netns.problem() is None  # root, here
    probe = "from rio_ci.egress import netns; print(netns.problem())"
    dropped = subprocess.run(
        ["setpriv", "--bounding-set=-sys_admin", "--inh-caps=-sys_admin", *python_of(probe)],
        capture_output=True,
        text=True,
        check=True,
        env=unprivileged_env(),
    )
    assert dropped.stdout.strip() == "network namespaces refused (unshare: Operation not permitted)"
    prefix, python = unprivileged_command()
    with contextlib.chdir(tmp_path):
        unprivileged = subprocess.run(
            [*prefix, python, "-c", probe],
            capture_output=True,
            text=True,
            check=True,
            env=unprivileged_env(),
            cwd="/",
        )
    assert unprivileged.stdout.strip() == (
        "rio-ci is not root, and network namespaces need root (unshare: Operation not permitted)"
    )
