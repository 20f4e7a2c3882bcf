"""``rio-ci demo``: the offline end-to-end demonstration (SPEC §12).

A small project with a failing test and an issue about it in the local forge
(``rio_ci.github.forge.local``); a Session on that issue with the scripted model and a
validator; the Owner is SIGKILLed while a script runs; the resumed run reports an
UnknownExecution, the model inspects, resolves with evidence, writes a new version of the
fix, the validator passes and the run concludes in success; the progress comment and the
pull request (with the fix's diff) land in the local forge. No network, no key, no GitHub.
"""

from __future__ import annotations

import difflib
import json
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rio_ci.errors import RioError, UsageError
from rio_ci.github import progress
from rio_ci.github.events import branch_for, goal_for
from rio_ci.github.forge.local import LocalForge
from rio_ci.session import Session

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
- - {{op: add, path: /cells/-, value: {{kind: cmd, argv: [{py}, -m, unittest, -q]}}}}
- - {{op: add, path: /cells/-, value: {{kind: note, text: "add() subtracts; patch calc.py"}}}}
  - {{op: add, path: /cells/-, value: {{kind: code, runtime: python, source: {slow}}}}}
- - {{op: add, path: /cells/-,
     value: {{kind: cmd, argv: [{py}, -c, "print(open('calc.py').read())"]}}}}
- - {{op: add, path: /cells/-, value: {{kind: note, role: resolution, target_cell_id: $unresolved,
       evidence_refs: [$delivered],
       text: "inspection shows calc.py still subtracts: the interrupted fix never ran"}}}}
  - {{op: replace, path: /cells/2, value: {{kind: code, runtime: python, source: {fast}}}}}
  - {{op: add, path: /cells/-, value: {{kind: cmd, argv: [{py}, -m, unittest, -q]}}}}
- - {{op: add, path: /cells/-, value: {{kind: note, role: conclusion, result: success,
       text: "the test passes"}}}}
"""


def demo_command(directory: str | None, *, human: bool, emit: Callable[[Any], None]) -> int:
    root = _fresh_directory(directory)
    story: list[str] = []

    def tell(line: str) -> None:
        story.append(line)
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
        db, goal, cwd=str(project), validators=[[sys.executable, "-m", "unittest", "-q"]]
    ).close()
    tell(
        f"1. A project with a failing test in {project}, and issue #{issue.number} about it "
        f"in the local forge {forge.path}; Session file {db}."
    )

    command = [sys.executable, "-m", "rio_ci.cli", "run", str(db), "--model", f"scripted:{script}"]
    first = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while not marker.exists() and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    if not marker.exists():
        first.kill()
        raise RioError(f"the first run never reached the fix script: {first.communicate()}")
    tell("2. The model ran the tests (they fail), then started a slow script that fixes calc.py.")
    first.send_signal(signal.SIGKILL)
    first.wait()
    tell(f"3. SIGKILL: the Owner (pid {first.pid}) died while that script was running.")

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
    tell(
        f"7. In the local forge: the progress comment on issue #{issue.number}"
        + (f", and the pull request {pull} with the fix's diff." if pull else ".")
    )
    tell(f"Look around: rio-ci show {db}  ·  rio-ci events {db}  ·  {forge.path}")
    summary = {
        "status": status["status"],
        "db": str(db),
        "dir": str(root),
        **facts,
        "forge": str(forge.path),
        "pull_request": pull,
    }
    if not human:
        emit(summary)
    return 0 if status["status"] == "succeeded" else 1


def _publish(forge: LocalForge, number: int, db: Path, project: Path) -> str | None:
    """What the GitHub layer's finish step does, on the local forge: the progress comment
    (from committed facts) and, on success, the pull request, here carrying the diff."""
    session = Session.open(db)
    try:
        proj = session.refresh()
        forge.upsert_comment(
            number,
            progress.MARKER,
            progress.render(
                proj,
                status=progress.status_of(proj, None),
                run_url=None,
                generation=1,
                operation=f"{proj.session['id']}:{proj.last_seq}",
            ),
        )
        if not (proj.ended and proj.ended["result"] == "success"):
            return None
    finally:
        session.close()
    diff = "".join(
        difflib.unified_diff(
            CALC.splitlines(keepends=True),
            (project / "calc.py").read_text().splitlines(keepends=True),
            "a/calc.py",
            "b/calc.py",
        )
    )
    title = forge.issue(number).title
    return forge.open_pull_request(
        branch_for(number),
        forge.default_branch(),
        f"Fixes #{number}: {title}",
        f"Fixes #{number}\n\n```diff\n{diff}```\n",
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
