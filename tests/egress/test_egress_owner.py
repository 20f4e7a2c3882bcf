"""The Owner runs the egress proxy for its Cells (docs/network.md): under a Cell user every
Cell runs in the Session's network namespace, its tools pointed at the proxy, and the Owner
commits one ``egress`` event per connection (identical ones counted); the Cell's result, the
model's to see, and ``rio-ci show`` name the refused hosts with the option that would allow
them. Real namespaces, the real proxy, real clients (curl, Python, git) against servers on
127.0.0.2 and 127.0.0.3, through ``rio-ci`` itself.

These need root (tests run as root here and in CI) and skip elsewhere.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rio_ci.egress.ledger import FIRST
from rio_ci.run.environment import uv_binary
from rio_ci.session.session import Session
from tests.egress_kit import certificates, fill, servers, shared_place
from tests.kit import RIO, cli_env, cmd_cell, note_cell, until
from tests.session_cli import CliSession

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux")
    or os.geteuid() != 0
    or not shutil.which("useradd")
    or not shutil.which("curl")
    or not shutil.which("openssl"),
    reason="network namespaces and a Cell user need root on Linux (as in CI), and curl",
)
LOOP = 40  # refused connections of one Cell to one host

# One Cell, every kind of connection: an allowed host by curl, Python and git; a host that is
# not listed, by curl and by Python; a loop of refusals; and curl straight to the allowed
# host's address, around the proxy.
PROBE = """
set -u
curl -sS http://127.0.0.2:{http}/hello.txt
/usr/bin/python3 - <<'EOF'
import urllib.request, urllib.error
with urllib.request.urlopen("http://127.0.0.2:{http}/hello.txt") as answer:
    print(answer.read().decode().strip(), "by python")
try:
    urllib.request.urlopen("http://refused.test/x")
except urllib.error.HTTPError as exc:
    print("python refused", exc.code)
EOF
git ls-remote http://127.0.0.2:{http}/repo.git | cut -c41-
{uv} pip install -q --no-cache --target lib --python /usr/bin/python3 \
    --index-url http://127.0.0.2:{http}/simple/ rio_bench_tiny && ls lib | grep -v dist-info
curl -sS -o /dev/null -w 'curl other %{{http_code}}\\n' http://127.0.0.3:{other}/hello.txt
for i in $(seq {loop}); do curl -s -o /dev/null http://loop.test/; done
curl -sS --noproxy '*' --max-time 5 http://127.0.0.2:{http}/hello.txt || echo direct failed
"""


@pytest.fixture(scope="module")
def served() -> Iterator[tuple[Path, dict[str, int]]]:
    """A folder every user may read (with uv where the Cell user may run it) and the ports
    of the servers."""
    with shared_place() as folder:
        fill(folder)
        certificates(folder)
        uv = folder / "uv"
        shutil.copy2(uv_binary(), uv)
        uv.chmod(0o755)
        with servers(folder / "www", folder / "tls") as found:
            yield folder, found


@pytest.fixture
def place() -> Iterator[Path]:
    with shared_place() as folder:
        yield folder


def egress(sess: CliSession) -> list[dict[str, Any]]:
    return sess.events("egress")


@pytest.mark.slow
def test_a_cell_reaches_only_allowed_hosts_and_every_connection_is_on_the_record(
    place: Path, cell_user: str, served: tuple[Path, dict[str, int]]
) -> None:
    folder, ports = served
    allowed = f"127.0.0.2:{ports['http']}"
    sess = CliSession.create(
        place / "s",
        validators=["curl -s -o /dev/null http://validator.test/"],
        options=["--network", "allowlist", "--allow-host", allowed],
    )
    probe = PROBE.format(http=ports["http"], other=ports["other"], loop=LOOP, uv=folder / "uv")
    sess.propose(cmd_cell("sh", "-c", probe))

    sess.work(args=["--cell-user", cell_user])

    out = sess.json("output", str(sess.db), "1")["text"]
    assert "hello from 127.0.0.2" in out
    assert "hello from 127.0.0.2 by python" in out
    assert "refs/heads/main" in out and "rio_bench_tiny" in out
    assert "python refused 403" in out and "curl other 403" in out
    assert "direct failed" in out and out.count("hello from 127.0.0.2") == 2
    events = egress(sess)
    admitted = [e for e in events if e["allowed"]]
    assert {(e["host"], e["port"]) for e in admitted} == {("127.0.0.2", ports["http"])}
    assert all(e["cell_id"] == 1 and e["bytes_down"] > 0 for e in admitted)
    # curl, Python, git and uv's requests (git and uv make more than one): every one counted.
    assert sum(e["count"] for e in admitted) >= 5
    refused = {(e["host"], e["port"], e["reason"]) for e in events if not e["allowed"]}
    assert refused == {
        ("refused.test", 80, "not_listed"),
        ("127.0.0.3", ports["other"], "loopback_or_link_local"),
        ("loop.test", 80, "not_listed"),
    }
    # The loop: the first few as events of their own, the rest counted in one.
    loop = [e for e in events if e["host"] == "loop.test"]
    assert len(loop) == FIRST + 1 and sum(e["count"] for e in loop) == LOOP
    # The model sees the refused hosts in the result, each with the option that allows it.
    result = sess.result(1)
    assert result["type"] == "success"
    named = {(r["host"], r["port"]): r for r in result["refused_hosts"]}
    assert named[("loop.test", 80)]["count"] == LOOP
    assert named[("refused.test", 80)]["allow"] == "--allow-host refused.test:80"
    assert (
        named[("127.0.0.3", ports["other"])]["allow"] == f"--allow-host 127.0.0.3:{ports['other']}"
    )
    state = sess.json("state", str(sess.db))
    assert state["runtime"]["cells"]["1"]["result"]["refused_hosts"] == result["refused_hosts"]
    # show: the network, the tally and the refused hosts.
    shown = sess.json("show", str(sess.db), "--json")
    assert shown["network"]["mode"] == "allowlist" and shown["network"]["isolated"] is True
    assert allowed in shown["network"]["allow"] and "pypi.org:443" in shown["network"]["allow"]
    assert shown["egress"]["allowed"] == sum(e["count"] for e in admitted)
    tally = {(r["host"], r["port"]): (r["count"], r["cell_id"]) for r in shown["egress"]["refused"]}
    assert tally[("loop.test", 80)] == (LOOP, 1) and tally[("refused.test", 80)] == (1, 1)
    text = sess.run("show", str(sess.db)).stdout
    assert "network: allowlist (9 host patterns), in a network of their own" in text
    assert "refused loop.test:80 40 times (cell 1): --allow-host loop.test:80" in text
    # A validator runs in the same network, its connections on the record too.
    sess.propose(note_cell("done", role="conclusion", result="success"))
    sess.work(args=["--cell-user", cell_user])
    (validated,) = sess.events("validator_result")
    assert validated["result"]["refused_hosts"][0]["host"] == "validator.test"
    (checked,) = [e for e in egress(sess) if e["host"] == "validator.test"]
    assert checked["cell_id"] is None and not checked["allowed"]


@pytest.mark.slow
def test_without_a_cell_user_cells_use_the_hosts_network_and_show_says_so(
    place: Path,
) -> None:
    sess = CliSession.create(place / "s", options=["--network", "none"])
    sess.propose(cmd_cell("sh", "-c", "echo ${HTTPS_PROXY:-no proxy}"))

    sess.work()

    assert sess.json("output", str(sess.db), "1")["text"].strip() == "no proxy"
    assert egress(sess) == []
    shown = sess.json("show", str(sess.db), "--json")
    assert shown["network"] == {
        "mode": "none",
        "allow": [],
        "isolated": False,
        "reason": "no Cell user: they run as the harness's user",
    }
    text = sess.run("show", str(sess.db)).stdout
    assert "network: none, but Cells use the host's network" in text


@pytest.mark.slow
@pytest.mark.skipif(not shutil.which("setpriv"), reason="setpriv drops CAP_SYS_ADMIN")
def test_where_the_kernel_refuses_a_namespace_cells_use_the_hosts_network_and_it_is_said(
    place: Path, cell_user: str
) -> None:
    sess = CliSession.create(place / "s", options=["--network", "none"])
    sess.propose(cmd_cell("sh", "-c", "echo ${HTTPS_PROXY:-no proxy}"))
    # Root without CAP_SYS_ADMIN, as in a container: a Cell user, but no network namespace.
    work = [*RIO, "work", str(sess.db), "--cell-user", cell_user]
    done = subprocess.run(
        ["setpriv", "--bounding-set", "-sys_admin", "--", *work],
        capture_output=True,
        text=True,
        env=cli_env(),
        timeout=120,
        check=False,
    )

    assert done.returncode == 0, done.stderr
    said = "Cells use the host's network (network namespaces refused (unshare: Operation"
    assert said in done.stderr
    assert sess.json("output", str(sess.db), "1")["text"].strip() == "no proxy"
    (mode,) = sess.events("cell_user")
    assert mode["mode"] == "separate" and mode["network"]["isolated"] is False
    network = sess.json("show", str(sess.db), "--json")["network"]
    assert network["isolated"] is False and "network namespaces refused" in network["reason"]
    assert (
        "but Cells use the host's network (network namespaces refused"
        in sess.run("show", str(sess.db)).stdout
    )


def refusals(db: Path) -> list[dict[str, Any]]:
    """The ``egress`` events committed so far (read while an Owner runs)."""
    session = Session.open(db)
    try:
        return list(session.events(kinds=("egress",)))
    finally:
        session.close()


@pytest.mark.slow
def test_a_cell_cut_off_still_has_its_refused_hosts_in_its_result(
    place: Path, cell_user: str
) -> None:
    sess = CliSession.create(place / "s", options=["--network", "none"])
    sess.propose(cmd_cell("sh", "-c", "curl -s -o /dev/null http://late.test/; sleep 60"))
    owner = sess.start("work", str(sess.db), "--cell-user", cell_user)
    try:
        # The first refusal is committed while the Cell still runs; then the Owner is stopped.
        until(lambda: refusals(sess.db), 60, "the refusal committed while the Cell runs")
        owner.send_signal(signal.SIGTERM)
        out, _ = owner.communicate(timeout=60)
        assert owner.returncode == 1 and json.loads(out)["interrupted"] is True
    finally:
        owner.kill()
        owner.wait()

    result = sess.result(1)
    assert result["type"] == "UnknownExecution" and result["reason"] == "owner_interrupted"
    (refused,) = result["refused_hosts"]
    assert (refused["host"], refused["reason"]) == ("late.test", "network_none")
    assert refused["allow"] == "--network allowlist --allow-host late.test:80"
    (event,) = egress(sess)
    assert (event["cell_id"], event["host"], event["allowed"]) == (1, "late.test", False)
