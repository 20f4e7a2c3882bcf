"""``rio-ci demo``: the offline end-to-end demonstration (docs/cli.md).

A small project with a failing test and an issue about it in the local forge
(``rio_ci.forge.local``); a Session on that issue with the scripted model and a
validator; the Owner is SIGKILLed while a script runs; the resumed run reports an
UnknownExecution, the model inspects, resolves with evidence, writes a new version of the
fix, the validator passes and the run concludes in success; the progress comment and the
pull request (with the fix's diff) land in the local forge. No network, no key, no GitHub.
"""

from __future__ import annotations

import difflib
import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rio_ci.core.errors import RioError, UsageError
from rio_ci.forge.issues import goal_for
from rio_ci.forge.local import LocalForge
from rio_ci.reports import progress
from rio_ci.reports.publish import (
    open_pull_request,
    progress_body,
    remember_pull_request,
)
from rio_ci.run.gate import pull_request_gate
from rio_ci.run.owner import Owner
from rio_ci.session.session import Session
from rio_ci.session.settings import Settings

ISSUE_TITLE = "add() returns the difference"
ISSUE_BODY = "test_calc.py fails: add(2, 3) gives -1. It must return the sum."
CALC = '''def add(a, b):
    """Return the sum of a and b."""
    return a - b
'''
TEST = """import unittest

from calc import add


class AddTest(unittest.TestCase):
    def test_add(self):
        self.assertEqual(add(2, 3), 5)


if __name__ == "__main__":
    unittest.main()
"""
FIX = '''# /// script
# dependencies = []
# ///
"""Fix calc.add. First a slow look around (the demo kills the Owner here)."""
import pathlib
import time

print("checking the working tree before patching...", flush=True)
pathlib.Path("{marker}").write_text("started\\n")
time.sleep({pause})
path = pathlib.Path("calc.py")
path.write_text(path.read_text().replace("return a - b", "return a + b"))
print("calc.add fixed")
'''
SCRIPT = """# The demo's scripted model: one list of operations per round.
- - {{op: add, path: /cells/-, value: {{kind: cmd, description: reproduce the failing test,
       argv: [{py}, -m, unittest, -q]}}}}
- - {{op: add, path: /cells/-, value: {{kind: note, text: "add() subtracts; patch calc.py"}}}}
  - {{op: add, path: /cells/-, value: {{kind: code, description: fix add() in calc.py,
       runtime: python, source: {slow}}}}}
- - {{op: add, path: /cells/-, value: {{kind: cmd, description: see whether the fix ran,
     argv: [{py}, -c, "print(open('calc.py').read())"]}}}}
- - {{op: add, path: /cells/-, value: {{kind: note, role: resolution, target_cell_id: $unresolved,
       evidence_refs: [$delivered],
       text: "inspection shows calc.py still subtracts: the interrupted fix never ran"}}}}
  - {{op: replace, path: /cells/1, value: {{kind: note,
       text: "the fix was cut off before it wrote calc.py; apply it again and rerun the tests"}}}}
  - {{op: replace, path: /cells/2, value: {{kind: code, description: fix add() again,
       runtime: python, source: {fast}}}}}
  - {{op: add, path: /cells/-, value: {{kind: cmd, description: run the tests again,
       argv: [{py}, -m, unittest, -q]}}}}
- - {{op: add, path: /cells/-, value: {{kind: note, role: conclusion, result: success,
       text: "the test passes"}}}}
"""


def demo_command(directory: str | None, *, human: bool, emit: Callable[[Any], None]) -> int:
    """The demo in ``directory`` (kept), or in a temporary directory removed at the end
    (the story then names no path in it: nothing it names is gone)."""
    root = _fresh_directory(directory)
    try:
        summary = _story(root, human=human, keep=directory is not None)
    finally:
        if directory is None:
            shutil.rmtree(root, ignore_errors=True)
    if not human:
        emit(summary)
    return 0 if summary["status"] == "succeeded" else 1


def _story(root: Path, *, human: bool, keep: bool) -> dict[str, Any]:
    def tell(line: str) -> None:
        print(line, file=sys.stdout if human else sys.stderr, flush=True)

    project, db = root / "project", root / "session.sqlite3"
    project.mkdir()
    (project / "calc.py").write_text(CALC)
    (project / "test_calc.py").write_text(TEST)
    forge = LocalForge.create(root / "forge", "local/demo", people={"maintainer": "admin"})
    issue = forge.add_issue(ISSUE_TITLE, ISSUE_BODY, "maintainer", labels=("rio",))
    marker = root / "fix-started"
    py = json.dumps(sys.executable)
    slow = json.dumps(FIX.format(marker=marker, pause=30))
    fast = json.dumps(FIX.format(marker=root / "fix-second-version", pause=0))
    script = root / "model.yaml"
    script.write_text(SCRIPT.format(py=py, slow=slow, fast=fast))
    goal = goal_for(issue.number, issue.title, issue.body, "local forge")
    Session.create(
        db,
        goal,
        Settings(
            cwd=str(project),
            validators=((sys.executable, "-m", "unittest", "-q"),),
        ),
    ).close()
    where = f" in {project}" if keep else ""
    tell(
        f"1. A project with a failing test{where}, and issue #{issue.number} about it in the "
        f"local forge" + (f" {forge.path}; Session file {db}." if keep else ".")
    )
    command = [
        sys.executable,
        "-I",
        "-m",
        "rio_ci",
        "run",
        str(db),
        "--model",
        f"scripted:{script}",
    ]
    first = _first_run(command, marker)
    tell("2. The model ran the tests (they fail), then started a slow script that fixes calc.py.")
    tell(f"3. SIGKILL: the Owner (pid {first}) died while that script was running.")
    try:
        second = subprocess.run(command, capture_output=True, text=True, timeout=300)
        status = json.loads(second.stdout.strip().splitlines()[-1])
    except (subprocess.TimeoutExpired, IndexError, ValueError):
        raise RioError("the resumed run did not finish with a status line") from None
    facts = _facts(db)
    tell(
        f"4. The next run recovered: cell {facts['unknown_cell']} became an UnknownExecution "
        f"({facts['unknown_reason']}); it was stopped, never rerun."
    )
    tell(
        "5. The model inspected calc.py, resolved the uncertainty citing "
        f"{', '.join(facts['evidence'])}, and wrote a new version of the fix."
    )
    tell(f"6. Validator: {facts['validator']}. Run {status['status']}.")
    pull = _publish(forge, issue.number, db, project)
    pages = _side_by_side(root, issue.number, pull)
    if keep:
        tell(
            f"7. In the local forge: the progress comment on issue #{issue.number}"
            + (f", and the pull request {pull} with the fix's diff." if pull else ".")
        )
        tell(f"Open {pages.as_uri()} to see the comment and the pull request side by side.")
        rio = rio_ci_command()
        tell(f"Look around: {rio} show {db}  ·  {rio} events {db}  ·  {forge.path}")
    else:
        tell(
            "7. The progress comment and the pull request landed in the local forge. The demo "
            f"ran in a temporary directory, removed now: `{rio_ci_command()} demo DIR` keeps "
            "the Session, the forge and the pages of the comment and the pull request in DIR "
            "for a look around."
        )
    return {
        "status": status["status"],
        "db": str(db) if keep else None,
        "dir": str(root) if keep else None,
        **facts,
        "forge": str(forge.path) if keep else None,
        "pull_request": pull if keep else None,
        "pages": str(pages) if keep else None,
    }


def rio_ci_command() -> str:
    """How to run this rio-ci from where the person is: the ``rio-ci`` script beside this
    interpreter (``.venv/bin/rio-ci`` after the README's install, which puts nothing on
    ``PATH``), relative to the working directory when it is inside it; else ``python -m``."""
    script = Path(sys.executable).parent / "rio-ci"
    if not script.is_file():
        return f"{sys.executable} -m rio_ci"
    try:
        return str(script.relative_to(Path.cwd()))
    except ValueError:
        return str(script)


def _side_by_side(root: Path, issue: int, pull: str | None) -> Path:
    """``root/demo.html``: the issue with its progress comment and the pull request, each as
    the local forge renders it, beside each other."""
    frames = [f"forge/issues/{issue}.html"]
    if pull:
        frames.append(f"forge/pull/{pull.rsplit('/', 1)[-1]}")
    columns = "".join(f"<iframe src='{src}' title='{src}'></iframe>" for src in frames)
    links = " · ".join(f"<a href='{src}'>{src}</a>" for src in frames)
    page = root / "demo.html"
    page.write_text(
        "<!doctype html>\n<meta charset=utf-8>\n<title>rio-ci demo</title>\n"
        "<style>body{margin:0;font:14px sans-serif} p{margin:6px 12px}"
        " main{display:flex;gap:8px;height:calc(100vh - 40px)}"
        " iframe{flex:1;border:1px solid #d0d7de}</style>\n"
        f"<p>rio-ci demo: the issue's progress comment and the pull request ({links})</p>\n"
        f"<main>{columns}</main>\n"
    )
    return page


def _first_run(command: list[str], marker: Path) -> int:
    """Start the run, wait until the slow fix script runs, SIGKILL the Owner; its pid."""
    first = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not marker.exists() and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    if not marker.exists():
        first.kill()
        raise RioError(f"the first run never reached the fix script: {first.communicate()}")
    first.send_signal(signal.SIGKILL)
    first.communicate()
    return first.pid


def _publish(forge: LocalForge, number: int, db: Path, project: Path) -> str | None:
    """What the GitHub job's finish step publishes, here on the local forge and through the
    same functions (``rio_ci.reports.publish``): the progress comment; on success, once the
    gate has run the validators again, the pull request (carrying the diff too, as the local
    forge has no branches to show); then the comment again with its link."""
    owner = Owner(str(db))
    try:
        owner.recover()  # as every Owner starts (nothing is left to recover here)
        session = owner.session

        def comment(pull: str | None, note: str | None = None) -> None:
            body = progress_body(
                session, generation=1, outcome=None, run_url=None, note=note, pull_request=pull
            )
            forge.upsert_comment(number, progress.MARKER, body)

        comment(None)
        problem = pull_request_gate(owner)
        if problem is not None:
            if session.proj.ended and session.proj.ended["result"] == "success":
                comment(None, note=f"no pull request: {problem}")
            return None
        diff = "".join(
            difflib.unified_diff(
                CALC.splitlines(keepends=True),
                (project / "calc.py").read_text().splitlines(keepends=True),
                "a/calc.py",
                "b/calc.py",
            )
        )
        pull = open_pull_request(
            forge,
            session,
            number,
            forge.default_branch(),
            diffstat=_diffstat("calc.py", diff),
            diff=diff,
        )
        remember_pull_request(session, pull)
        comment(pull)
        return pull
    finally:
        owner.close()


def _diffstat(name: str, diff: str) -> str:
    """``git diff --stat``'s words for a one-file unified diff."""
    lines = diff.splitlines()
    added = sum(1 for ln in lines if ln.startswith("+") and not ln.startswith("+++"))
    removed = sum(1 for ln in lines if ln.startswith("-") and not ln.startswith("---"))
    return (
        f" {name} | {added + removed} {'+' * added}{'-' * removed}\n"
        f" 1 file changed, {added} insertion(s)(+), {removed} deletion(s)(-)"
    )


def _fresh_directory(directory: str | None) -> Path:
    """An empty directory for the demo (made if missing), or a UsageError saying why not."""
    try:
        if directory is None:
            return Path(tempfile.mkdtemp(prefix="rio-demo-")).resolve()
        root = Path(directory).resolve()
        if root.exists() and (not root.is_dir() or any(root.iterdir())):
            raise UsageError(f"{root} is not an empty directory; the demo needs a fresh one")
        root.mkdir(parents=True, exist_ok=True)
        probe = root / ".rio-demo-probe"
        probe.touch()  # /proc, a read-only file system: fail now, not halfway through
        probe.unlink()
    except OSError as exc:
        raise UsageError(f"cannot use {directory} for the demo: {exc.strerror}") from None
    return root


def _facts(db: Path) -> dict[str, Any]:
    session = Session.open(db)
    try:
        unknown = [
            e
            for e in session.events()
            if e["kind"] == "execution_finished" and e["result"]["type"] == "UnknownExecution"
        ]
        resolution = next(
            (
                e
                for e in session.events()
                if e["kind"] == "patch_accepted"
                and any(c["role"] == "resolution" for c in e["controls"])
            ),
            None,
        )
        validator = [e for e in session.events() if e["kind"] == "validator_result"]
        evidence = (
            next(c["evidence_refs"] for c in resolution["controls"] if c["role"] == "resolution")
            if resolution
            else []
        )
        return {
            "unknown_executions": len(unknown),
            "unknown_cell": unknown[0]["cell_id"] if unknown else None,
            "unknown_reason": unknown[0]["result"]["reason"] if unknown else None,
            "evidence": evidence,
            "validator": validator[-1]["result"]["type"] if validator else "not run",
            "ended": session.proj.ended and session.proj.ended["result"],
        }
    finally:
        session.close()
