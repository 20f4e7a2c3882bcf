"""``rio-ci demo [DIR]`` (docs/cli.md): offline, SIGKILL mid-script, UnknownExecution, resolution
with evidence, a passing validator and a success conclusion, told as a short story."""

from __future__ import annotations

import html
import json
import os
import re
import subprocess
import sys
import urllib.parse
from collections import Counter
from pathlib import Path

import pytest

from rio_ci.forge.local import LocalForge
from tests import mermaid
from tests.kit import events, run_cli


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    root = tmp_path_factory.mktemp("demo") / "fresh"  # does not exist yet: the demo makes it
    return root, run_cli("demo", str(root))


def test_demo_succeeds_and_tells_where_the_session_is(
    demo: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    root, done = demo
    assert done.returncode == 0, done.stdout + done.stderr
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["status"] == "succeeded"
    db = Path(summary["db"])
    assert db.is_file() and db.parent == root.resolve()
    assert str(db) in done.stderr  # the story names the Session file
    assert "UnknownExecution" in done.stderr and "SIGKILL" in done.stderr


def test_the_demo_works_an_issue_of_the_local_forge_and_publishes_there(
    demo: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    """docs/cli.md: the demo starts a Session with the scripted model and the local forge; the
    progress comment and the pull request of its success land there."""
    _, done = demo
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    forge = LocalForge(Path(summary["forge"]).parent)
    (issue,) = forge.issues_with_label("rio")
    (created,) = [e for e in events(Path(summary["db"])) if e["kind"] == "session_created"]
    assert f"# {issue.title}" in created["goal"] and issue.body in created["goal"]
    progress = forge.find_comment(issue.number, "<!-- rio-ci:progress -->")
    assert progress is not None and "### rio-ci: succeeded" in progress.body
    (pull,) = forge.pull_requests()
    assert summary["pull_request"] == pull["url"] and pull["head"] == f"rio/issue-{issue.number}"
    assert pull["body"].startswith(f"Fixes #{issue.number}")
    assert "-    return a - b\n+    return a + b" in pull["body"]  # the fix's diff


def test_demo_journal_shows_one_interruption_resolved_and_a_validated_success(
    demo: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    root, done = demo
    assert done.returncode == 0, done.stdout + done.stderr
    evs = events(root / "session.sqlite3")
    finished = [e for e in evs if e["kind"] == "execution_finished"]
    unknown = [e for e in finished if e["result"]["type"] == "UnknownExecution"]
    assert len(unknown) == 1
    # Committed by the next Owner's recovery: the first one died by SIGKILL, not a signal
    # it could handle.
    assert unknown[0]["result"]["reason"] == "worker_lost_before_result_commit"
    (target,) = [e["cell_id"] for e in unknown]
    # Never rerun: no Cell was launched twice, the interrupted one included.
    launches = Counter(e["cell_id"] for e in evs if e["kind"] == "execution_started")
    assert launches[target] == 1 and max(launches.values()) == 1
    # The interrupted Cell was killed while its script ran, and resolved with other evidence.
    resolutions = [
        c
        for e in evs
        if e["kind"] == "patch_accepted"
        for c in e["controls"]
        if c["role"] == "resolution"
    ]
    assert [c["target_cell_id"] for c in resolutions] == [target]
    own = unknown[0]["result"]["evidence_refs"]
    cited = resolutions[0]["evidence_refs"]
    assert cited and not set(cited) & set(own)
    # The fix was written as a new version of the interrupted Cell, and it ran.
    versions = [
        c
        for e in evs
        if e["kind"] == "patch_accepted"
        for c in e["cells"]
        if c.get("previous_id") == target
    ]
    assert len(versions) == 1
    assert any(
        e["cell_id"] == versions[0]["id"] and e["result"]["type"] == "success" for e in finished
    )
    validators = [e for e in evs if e["kind"] == "validator_result"]
    (ended,) = [e for e in evs if e["kind"] == "run_ended"]
    assert ended["result"] == "success"
    # The Owner's validator run before the success, and the gate's own run after it, before
    # the pull request (rio_ci.reports.publish, as the GitHub job's finish step does).
    before = [e for e in validators if e["seq"] < ended["seq"]]
    after = [e for e in validators if e["seq"] > ended["seq"]]
    assert [e["result"]["type"] for e in before[-1:] + after] == ["success", "success"]
    assert "return a + b" in (root / "project" / "calc.py").read_text()


def test_demo_session_can_be_read_with_rio_ci_events(
    demo: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    root, _ = demo
    done = run_cli("events", str(root / "session.sqlite3"))
    assert done.returncode == 0
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert lines[0]["kind"] == "session_created"
    assert [e["seq"] for e in lines] == list(range(1, len(lines) + 1))
    # After the end, only what publishing commits: the gate's validator run and the pull
    # request's number.
    end = [e["kind"] for e in lines].index("run_ended")
    after = [(e["kind"], e.get("name")) for e in lines[end + 1 :]]
    assert after == [("validator_result", None), ("watermark", "pull_request")]


def test_show_on_the_demo_session_lists_every_execution_with_its_resolution(
    demo: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    root, _ = demo
    db = root / "session.sqlite3"
    evs = events(db)
    finished = {str(e["cell_id"]): e["result"] for e in evs if e["kind"] == "execution_finished"}
    (unknown,) = [k for k, r in finished.items() if r["type"] == "UnknownExecution"]
    (note_id,) = [
        c["note_id"]
        for e in evs
        if e["kind"] == "patch_accepted"
        for c in e["controls"]
        if c["role"] == "resolution"
    ]
    shown = json.loads(run_cli("show", str(db), "--json").stdout)["executions"]
    assert {k: ex["result"] for k, ex in shown.items()} == finished
    assert shown[unknown]["resolved_by"] == note_id
    text = run_cli("show", str(db)).stdout
    assert f"[{unknown}] fix add() in calc.py" in text  # its description
    assert f"resolved by cell {note_id}" in text


@pytest.mark.parametrize("target", [".", "keep.txt"], ids=["non-empty-dir", "a-file"])
def test_demo_refuses_anything_but_a_fresh_directory(tmp_path: Path, target: str) -> None:
    (tmp_path / "keep.txt").write_text("mine")
    done = run_cli("demo", str(tmp_path / target))
    assert done.returncode == 2, done.stderr
    assert "error" in json.loads(done.stdout.strip().splitlines()[-1])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep.txt"]
    assert (tmp_path / "keep.txt").read_text() == "mine"


def test_the_progress_comment_tells_the_whole_interrupted_session(
    demo: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    """The demo's Session was cut off mid-Cell, resolved and concluded: its progress comment
    names each Cell's command and duration, the UnknownExecution (its Cell was replaced) with
    its resolution and the evidence cited, the validator's result, the conclusion, the pull
    request's link, and draws a Mermaid chart the real parser accepts."""
    root, done = demo
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    forge = LocalForge(Path(summary["forge"]).parent)
    (issue,) = forge.issues_with_label("rio")
    comment = forge.find_comment(issue.number, "<!-- rio-ci:progress -->")
    assert comment is not None
    body = comment.body
    evs = events(root / "session.sqlite3")
    accepted = [e for e in evs if e["kind"] == "patch_accepted"]
    cells = {c["id"]: c for e in accepted for c in e["cells"]}
    rows = {line.split("|")[1].strip(): line for line in body.splitlines() if line[:2] == "| "}
    for e in evs:
        if e["kind"] != "execution_finished":
            continue
        cell, row = cells[e["cell_id"]], rows[str(e["cell_id"])]
        assert cell["description"] in row  # what it is for, in the model's words
        if cell["kind"] == "cmd":
            assert "`cmd " in row  # and what it ran
        else:
            assert "import" not in row and "`code " in row
        assert e["result"]["type"] in row
        if e["result"]["type"] == "UnknownExecution":
            assert "| cut off (its end is unknown) |" in row  # no duration is made up
        else:
            assert re.search(r"\| [0-9.]+ s \|", row)  # its duration
    (unknown,) = [e for e in evs if e["kind"] == "execution_finished" and e["cell_id"] == 3]
    (resolution,) = [c for e in accepted for c in e["controls"] if c["role"] == "resolution"]
    assert unknown["result"]["type"] == "UnknownExecution"
    assert f"**cell {unknown['cell_id']}**" in body and unknown["result"]["reason"] in body
    assert f"Resolved by note {resolution['note_id']}" in body
    for ref in resolution["evidence_refs"]:
        assert f"`{ref}`" in body
    assert cells[resolution["note_id"]]["text"] in body
    validators = [e for e in evs if e["kind"] == "validator_result"]
    assert re.search(r"\| `[^|]*-m unittest -q` \| success \|", body)
    assert [v["result"]["type"] for v in validators] == ["success", "success"]  # and the gate's
    (conclusion,) = [c for c in cells.values() if c.get("role") == "conclusion"]
    assert "**Conclusion (success):**" in body and f"> {conclusion['text']}" in body
    assert f"**Pull request:** [{summary['pull_request']}]({summary['pull_request']})" in body
    (chart,) = mermaid.blocks(body)
    parsed = mermaid.parse(chart)
    assert parsed.get("type") == "gantt", parsed
    tasks = {t["task"]: t for t in parsed["tasks"]}
    assert tasks["cut off"]["milestone"] and tasks["cut off"]["section"].startswith("job 1, ")
    resolved = tasks[f"cell 3 resolved by note {resolution['note_id']}"]
    assert resolved["milestone"] and resolved["section"].startswith("job 2, ")
    assert resolved["section"].endswith(" later")  # the gap between the jobs is named
    (crit,) = [t for t in parsed["tasks"] if t["crit"]]
    assert crit["task"].startswith("cell 3 UnknownExecution")


def test_the_pull_request_link_opens_a_page_and_its_body_says_how_it_was_verified(
    demo: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    _, done = demo
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["pull_request"] in done.stderr  # the story prints the link
    text = opened(summary["pull_request"]).read_text()
    (pull,) = LocalForge(Path(summary["forge"]).parent).pull_requests()
    # Rendered as a code host shows it: headings, code, no visible marker.
    assert f"<title>#{pull['number']} {html.escape(pull['title'])}</title>" in text
    assert "<h3>What changed</h3>" in text and "rio-ci:op" not in text
    body = pull["body"]
    assert "### What changed" in body and "calc.py | 2 +-" in body  # the diffstat
    assert "### How it was verified" in body and "-m unittest -q`: success" in body
    assert "1 UnknownExecution(s) along the way, 1 resolved with evidence." in body
    (link,) = re.findall(r"\((file://[^)]*/issues/1\.html#comment-[0-9]+)\)", body)
    assert opened(link).is_file()  # the Session's progress comment: a link that works
    assert f'href="{html.escape(link)}"' in text


def opened(url: str) -> Path:
    """The file a ``file://`` link opens."""
    return Path(urllib.parse.unquote(urllib.parse.urlparse(url).path))


def test_the_demo_shows_the_comment_and_the_pull_request_side_by_side(
    demo: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    root, done = demo
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    pages = Path(summary["pages"])
    assert f"Open {pages.as_uri()}" in done.stderr
    frames = re.findall(r"<iframe src='([^']+)'", pages.read_text())
    assert frames == ["forge/issues/1.html", f"forge/pull/{opened(summary['pull_request']).name}"]
    comment = (root / frames[0]).read_text()
    # The comment as GitHub renders it: no marker, no metadata, the Next line first, and the
    # link to the pull request opens its page.
    assert "rio-ci:progress" not in comment and "rio-ci:meta" not in comment
    assert "<p><strong>Next: you.</strong> Review <a href=" in comment
    assert f'href="{summary["pull_request"]}"' in comment
    assert "<pre class=mermaid>" in comment and "\ngantt\n" in comment
    # The commands it suggests run after the README's install (nothing on PATH).
    command = re.search(r"Look around: (\S+) show ", done.stderr)
    assert command is not None and Path(command.group(1)).name == "rio-ci"
    assert Path(command.group(1)).is_file() or command.group(1).endswith("-m rio_ci")


def test_the_demo_without_a_directory_leaves_nothing_behind(tmp_path: Path) -> None:
    """Without DIR the demo works in a temporary directory and removes it: the story then
    names no path in it."""
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    done = subprocess.run(
        [sys.executable, "-m", "rio_ci", "demo", "--human"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "rio-demo" not in done.stdout and "Run succeeded" in done.stdout
    assert list(tmp_path.glob("rio-demo-*")) == []
