"""Secrets (docs/security.md): a Cell finds no credential in any environment it
can read — its own, its ancestors', every readable /proc/*/environ — however large the
credentials are; what it prints of one is ``***`` before it is committed, so neither the
Journal nor ``show``, ``events``, ``output`` or ``state`` ever holds it; and the Owner's own
/proc entries are closed to a script of the same user."""

from __future__ import annotations

import base64
import json
import sys
import textwrap
from pathlib import Path

import pytest

from tests import session_cli
from tests.hostile.support import (
    one_error,
    rio,
    shared_folder,
    unprivileged_env,
    unprivileged_python,
    unprivileged_rio,
)
from tests.kit import cli_env, cmd_cell
from tests.session_cli import New

new = session_cli.new  # the shared fixture
pytestmark = pytest.mark.slow

CANARIES = {
    "ANTHROPIC_API_KEY": "canary-anthropic-71c3a9",
    "GITHUB_TOKEN": "canary-github-5e82d0",
    "DATABASE_URL": "canary-named-by-secret-b4f1",
}  # not credential-named: --secret

# Reads every environment it can and says which canaries it found, by name only.
GREP = textwrap.dedent("""
    import json, os, sys
    canaries = json.loads(sys.argv[1])
    def environ(pid):
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                return f.read()
        except OSError:
            return None
    def parent(pid):
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    chain, pid = [], os.getpid()
    while pid > 1:
        chain.append(pid)
        pid = parent(pid)
    readable, found = 0, set()
    for pid in set(chain) | {int(p) for p in os.listdir("/proc") if p.isdigit()}:
        block = environ(pid)
        if block is None:
            continue
        readable += 1
        found |= {name for name, value in canaries.items() if value.encode() in block}
    found |= {name for name, value in canaries.items()
              if any(value in v for v in os.environ.values())}
    print(json.dumps({"ancestors": len(chain), "readable": readable, "found": sorted(found)}))
""")


def with_secret(sess: session_cli.CliSession) -> session_cli.CliSession:
    """``sess`` pointed at a new Session that names DATABASE_URL with ``--secret``."""
    sess.db = sess.root / "secret.db"
    sess.json(
        "new",
        str(sess.db),
        "--goal",
        "hunt for canaries",
        "--cwd",
        str(sess.cwd),
        "--secret",
        "DATABASE_URL",
    )
    return sess


def canaries_for_cell() -> str:
    """The canary values, reversed: a Cell can look for them without its source (which
    the Journal keeps) holding one."""
    return json.dumps({k: v[::-1] for k, v in CANARIES.items()})


def cell_that_greps() -> dict[str, object]:
    script = GREP.replace(
        "canaries = json.loads(sys.argv[1])",
        "canaries = {k: v[::-1] for k, v in json.loads(sys.argv[1]).items()}",
    )
    return cmd_cell(sys.executable, "-c", script, canaries_for_cell())


@pytest.mark.parametrize("bulk", [0, 70_000], ids=["small", "over 60 KB"])
def test_no_readable_environment_holds_a_credential(new: New, bulk: int) -> None:
    sess = with_secret(new())
    sess.propose(cell_that_greps())
    env = cli_env(**CANARIES, BULKY_PRIVATE_KEY="k" * bulk)
    out = sess.work(env=env)
    assert out["ran"] == [1]
    report = json.loads(sess.runtime(1)["stdout"])
    assert report["found"] == [], report
    assert report["ancestors"] >= 2 and report["readable"] >= 1  # it did look


def test_printed_credentials_are_redacted_before_they_are_committed(new: New) -> None:
    sess = with_secret(new())
    db = sess.db
    hidden = base64.b64encode(json.dumps(CANARIES).encode()).decode()
    printer = textwrap.dedent(f"""
        import base64, json, sys, time
        canaries = json.loads(base64.b64decode({hidden!r}))
        for name, value in canaries.items():
            print(f"{{name}}={{value}}", flush=True)
        split = canaries["GITHUB_TOKEN"]
        sys.stdout.write("split:" + split[:9]); sys.stdout.flush()
        time.sleep(0.5)  # the Owner commits output every 0.1 s: the halves meet only here
        sys.stdout.write(split[9:] + ":end\\n"); sys.stdout.flush()
        print(canaries["ANTHROPIC_API_KEY"], file=sys.stderr, flush=True)
    """)
    sess.propose(cmd_cell(sys.executable, "-c", printer))
    out = sess.work(env=cli_env(**CANARIES))
    assert out["ran"] == [1]

    shown = {
        "state": sess.run("state", str(db)).stdout,
        "events": sess.run("events", str(db)).stdout,
        "show": sess.run("show", str(db)).stdout,
        "output": sess.run("output", str(db), "1").stdout,
        "output stderr": sess.run("output", str(db), "1", "--stream", "stderr").stdout,
    }
    for where, text in shown.items():
        for value in CANARIES.values():
            assert value not in text, where
    stdout = json.loads(shown["output"])["text"]
    assert stdout.count("***") == 4 and "split:***:end" in stdout
    assert "ANTHROPIC_API_KEY=***" in stdout and "DATABASE_URL=***" in stdout
    assert json.loads(shown["output stderr"])["text"].strip() == "***"
    files = [p for p in sess.root.rglob("*") if p.is_file()]
    for value in CANARIES.values():
        assert all(value.encode() not in p.read_bytes() for p in files)


def test_the_owner_is_not_readable_by_a_script_of_the_same_user() -> None:
    with shared_folder() as folder:
        python = unprivileged_python()
        env = unprivileged_env()
        db = folder / "s.db"
        made = unprivileged_rio(
            "new", str(db), "--goal", "peek at the Owner", "--cwd", str(folder), env=env, cwd=folder
        )
        assert made.returncode == 0, made.stdout + made.stderr
        peek = textwrap.dedent("""
            import json, os
            owner = os.getppid()
            seen = {}
            for entry in ("environ", "mem", "cmdline"):
                try:
                    with open(f"/proc/{owner}/{entry}", "rb") as f:
                        f.read(1)
                    seen[entry] = "readable"
                except OSError as exc:
                    seen[entry] = exc.strerror
            print(json.dumps({"uid": os.getuid(), "seen": seen}))
        """)
        turn = json.loads(unprivileged_rio("turn", str(db), env=env, cwd=folder).stdout)
        patch = [
            {"op": "test", "path": "/revision", "value": 0},
            {
                "op": "add",
                "path": "/cells/-",
                "value": {
                    "id": 1,
                    "previous_id": None,
                    "kind": "cmd",
                    "argv": [python, "-c", peek],
                },
            },
        ]
        (folder / "patch.json").write_text(json.dumps(patch))
        stepped = unprivileged_rio(
            "step", str(db), turn["turn_id"], str(folder / "patch.json"), env=env, cwd=folder
        )
        assert stepped.returncode == 0, stepped.stdout
        worked = unprivileged_rio("work", str(db), env={**env, **CANARIES}, cwd=folder)
        assert json.loads(worked.stdout).get("ran") == [1], worked.stdout + worked.stderr
        state = json.loads(unprivileged_rio("state", str(db), env=env, cwd=folder).stdout)
        report = json.loads(state["runtime"]["cells"]["1"]["stdout"])
        assert report["uid"] != 0
        assert report["seen"]["environ"] != "readable" and report["seen"]["mem"] != "readable"
        assert report["seen"]["cmdline"] == "readable"  # the Owner itself was there to see


def test_a_forged_secrets_descriptor_stops_the_owner(tmp_path: Path) -> None:
    made = rio("new", str(tmp_path / "s.db"), "--goal", "g", cwd=tmp_path)
    assert made.returncode == 0
    done = rio(
        "work", str(tmp_path / "s.db"), cwd=tmp_path, env=cli_env(RIO_SECRETS_FD="not-a-descriptor")
    )
    assert "RIO_SECRETS_FD" in one_error(done, 1)
