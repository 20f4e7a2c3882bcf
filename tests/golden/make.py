"""Write this release's golden files: ``python -m tests.golden.make tests/golden/<version>``
(from the repository's root, with the test extra installed). tests/golden/README.md says what
they are and when to make them.

Two stories, the same for every release, each cut off mid-script by a SIGKILL:

- ``artifact/``: a GitHub job (FakeGitHub, the real ``rio-ci action`` steps) for issue 1,
  whose body carries a picture (so the Session holds an ``image_stored`` event); the run step
  is killed while a script runs, and the finish step saves the generation with an
  ``UnknownExecution``: its ``session.sqlite3`` and ``manifest.json`` as the upload got them;
  ``artifact-meta.json`` says the run id, the issue and the event kinds; and
  ``progress-comment.md`` is the progress comment the job left (the sweep reads its metadata).
- ``local/``: ``rio-ci new``, a comment, then ``rio-ci run`` with a scripted model, killed with
  its Worker while the second round's script runs; the file is closed once (its WAL copied in)
  so it is a Session at rest; ``meta.json`` names its working directory and the script's
  marker file.
"""

from __future__ import annotations

import base64
import json
import shutil
import signal
import sqlite3
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]  # action_job and the fakes, as pytest has them

import psutil  # noqa: E402
from action_job import Repository, kill_when, labeled, script  # noqa: E402
from fakes.github_api import FakeGitHub  # noqa: E402

import rio_ci  # noqa: E402
from rio_ci.store.at_rest import SCHEMA_VERSION  # noqa: E402
from tests.kit import add, cmd_cell, code_cell, note_cell, run_cli, spawn_cli, until  # noqa: E402

# The picture of issue 1 (a 3 x 2 PNG), the same in every release's story.
PICTURE = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAMAAAACCAIAAAASFvFNAAAAEElEQVR4nGP4z8AAQQxwFgBB0gX7h/C5SAAAAABJRU5Er"
    "kJggg=="
)
VALIDATOR = "validators: ['test -f fixed.txt']\n"


def artifact_story(tmp: Path, out: Path) -> None:
    tmp.mkdir(parents=True)
    side_effects = tmp / "side-effects.log"
    with FakeGitHub() as gh:
        gh.add_user("alice", "write")
        gh.attachments["shot"] = (PICTURE, "image/png")
        repo = Repository(tmp, gh, files={".github/rio.yml": VALIDATOR})
        repo.set_script(
            script(
                [add(note_cell("plan: look, then fix")), add(cmd_cell("ls"))],
                [
                    add(
                        code_cell(
                            f"import time\nopen({str(side_effects)!r}, 'a').write('ran\\n')\n"
                            "time.sleep(120)\n"
                        )
                    )
                ],
            )
        )
        body = f"The button is red:\n\n![screenshot]({gh.api_url}/user-attachments/assets/shot)\n"
        issue = gh.add_issue("Fix it", body, labels=("rio",))
        job = repo.job("issues", labeled(issue), interrupt=kill_when(side_effects, signal.SIGKILL))
        assert job.finish.code == 0, job.logs
        (out / "artifact").mkdir(parents=True)
        for name in ("session.sqlite3", "manifest.json"):
            shutil.copyfile(job.artifact_dir / name, out / "artifact" / name)
        kinds = sorted({e["kind"] for e in repo.events(job)})  # read from a copy
        assert "image_stored" in kinds, kinds
        meta = {
            "issue": issue,
            "run_id": int(job.env["GITHUB_RUN_ID"]),
            "issue_title": "Fix it",
            "issue_body": body,
            "kinds": kinds,
            "rio_ci": rio_ci.__version__,
            "session_format": SCHEMA_VERSION,
        }
        (out / "artifact-meta.json").write_text(json.dumps(meta, indent=1) + "\n")
        (comment,) = repo.progress_comments(issue)
        (out / "progress-comment.md").write_text(comment["body"])


def local_story(tmp: Path, out: Path) -> None:
    work, db, marker = tmp / "work", tmp / "session.sqlite3", tmp / "ran.log"
    work.mkdir(parents=True)
    made = run_cli(
        "new", str(db), "--goal", "Make it work", "--validator", "true", "--cwd", str(work)
    )
    assert made.returncode == 0, made.stdout + made.stderr
    comment = json.dumps({"author": "alice", "body": "hi"})
    assert run_cli("receive", str(db), "comment:1", "comment", comment).returncode == 0
    model = tmp / "model.yaml"
    model.write_text(
        script(
            [add(note_cell("first a look")), add(cmd_cell("echo", "hello"))],
            [
                add(
                    code_cell(
                        f"import time\nopen({str(marker)!r}, 'a').write('ran\\n')\n"
                        "time.sleep(120)\n"
                    )
                )
            ],
        )
    )
    process = spawn_cli("run", str(db), "--model", f"scripted:{model}")
    until(lambda: marker.exists() and marker.read_text().count("\n") >= 1, 60, "the script to run")
    tree = psutil.Process(process.pid)
    doomed = [tree, *tree.children(recursive=True)]
    for each in doomed:
        each.kill()
    process.communicate(timeout=10)
    psutil.wait_procs(doomed[1:], timeout=10)
    conn = sqlite3.connect(db)  # the last connection to close copies the WAL into the file
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    conn.close()
    assert not Path(f"{db}-wal").exists() and not Path(f"{db}-shm").exists()
    (out / "local").mkdir(parents=True)
    shutil.copyfile(db, out / "local" / "session.sqlite3")
    meta = {"cwd": str(work), "marker": str(marker), "rio_ci": rio_ci.__version__}
    (out / "local" / "meta.json").write_text(json.dumps(meta, indent=1) + "\n")


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m tests.golden.make tests/golden/<version>", file=sys.stderr)
        return 2
    out = Path(argv[0])
    if out.exists():
        print(f"{out} exists: golden files are never rewritten", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="rio-golden-") as tmp:
        partial = Path(tmp) / "out"
        artifact_story(Path(tmp) / "artifact", partial)
        local_story(Path(tmp) / "local", partial)
        shutil.copytree(partial, out)
    print(f"wrote {out} (rio-ci {rio_ci.__version__}, Session format {SCHEMA_VERSION})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
