"""Shared test fixtures: the CLI run in ``tmp_path`` (tests/kit.py runs it), Sessions on real
files in ``tmp_path``, and Owner-free ways to move an Execution through its phases.

``--long`` enables the stress tests marked ``long``.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import os
import pwd
import secrets
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import psutil
import pytest
import sqlite_utils
from action_job import Repository
from fakes.github_api import FakeGitHub

from rio_ci.core.events import OutputPiece, Result
from rio_ci.forge.github import GitHubForge
from rio_ci.run.confinement.home import SHARED_PLACES
from rio_ci.session.session import Receipt, Session
from rio_ci.session.settings import Settings
from tests.kit import CliResult, Patch, run_cli
from tests.runners import PROFILES, RunnerUser, fresh_cell_user, runner_user

PY = sys.executable


# --- the --long flag and the slow marker ---------------------------------------------------

# Modules whose tests start real Owners, uv, git or whole GitHub jobs, or stress the core:
# each of them, and every test_action_*.py (a whole GitHub job each), is marked ``slow`` as a
# whole, so ``pytest -m "not slow"`` is the inner loop (the core, admission, the Journal, the
# Session and the CLI plumbing). ``.ci/run`` runs everything.
SLOW_MODULES = frozenset(
    {
        "test_action.py",
        "test_action_interrupted.py",
        "test_action_secrets.py",
        "test_action_sweep.py",
        "test_bench.py",
        "test_cell_user.py",
        "test_controls.py",
        "test_demo.py",
        "test_fresh_install.py",
        "test_round_loop.py",
        "test_owner.py",
        "test_owner_crash.py",
        "test_process.py",
        "test_scripted.py",
        "test_sweep_workflow.py",
        "test_timers.py",
        "test_act.py",
        "test_contract_model.py",
        "test_crash_points.py",
        "test_io_errors.py",
        "test_power_loss.py",
        "test_random_kills.py",
    }
)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--long", action="store_true", default=False, help="also run the stress tests marked long"
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "long: long stress runs (enable with --long)")
    config.addinivalue_line("markers", "people(login=role, ...): users of the gh fixture")
    config.addinivalue_line("markers", "workflows(name, ...): workflows of the gh fixture")


# The modules that take the better part of a minute or more (their module-scoped fixtures
# included), with a rough weight in seconds: under pytest-xdist they start first, spread over
# the workers, so none is left for the end of the run. The worksteal scheduler hands worker k
# the k-th contiguous share of the collection and steals from the ends of the queues; the
# order below puts each share's long modules at its front. Only the order changes.
LONG_FIRST = {
    "test_bench.py": 70,
    "test_crash_points.py": 60,
    "test_act.py": 60,
    "test_fresh_install.py": 60,
    "test_eval.py": 50,
    "test_under_load.py": 40,
    "test_random_kills.py": 35,
    "test_walk.py": 30,
    "test_contract_model.py": 30,
    "test_admission_fuzz.py": 20,
}


def shares(total: int, workers: int) -> list[int]:
    """The sizes of the contiguous shares worksteal hands out first (each idle worker gets
    what is pending divided by the workers still without a share)."""
    sizes: list[int] = []
    for left in range(workers, 0, -1):
        sizes.append((total - sum(sizes)) // left)
    return sizes


def long_first(items: list[pytest.Item], workers: int) -> list[pytest.Item]:
    buckets: list[list[pytest.Item]] = [[] for _ in range(workers)]
    weights = [0] * workers
    by_module: dict[str, list[pytest.Item]] = {}
    for item in items:
        if item.path.name in LONG_FIRST:
            by_module.setdefault(item.path.name, []).append(item)
    for name in sorted(by_module, key=lambda n: -LONG_FIRST[n]):
        lightest = weights.index(min(weights))
        buckets[lightest] += by_module[name]
        weights[lightest] += LONG_FIRST[name]
    rest = iter([item for item in items if item.path.name not in LONG_FIRST])
    for bucket, size in zip(buckets, shares(len(items), workers), strict=True):
        bucket += itertools.islice(rest, max(0, size - len(bucket)))
    return [item for bucket in buckets for item in bucket] + list(rest)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.name in SLOW_MODULES or item.path.name.startswith("test_action_"):
            item.add_marker(pytest.mark.slow)
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "0"))
    if workers > 1 and config.getoption("dist", "no") == "worksteal":
        items[:] = long_first(items, workers)
    if config.getoption("--long"):
        return
    skip = pytest.mark.skip(reason="stress test: run with --long")
    for item in items:
        if "long" in item.keywords:
            item.add_marker(skip)


# Every test that takes SLOW_SECONDS or more belongs behind the ``slow`` marker, so the inner
# loop stays fast. The terminal summary lists the unmarked ones this run found (a listing,
# not a failure: how long a test takes depends on the machine's load).
SLOW_SECONDS = 2.0
_unmarked_slow: list[tuple[float, str]] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    slow = report.duration >= SLOW_SECONDS and "slow" not in report.keywords
    if report.when == "call" and slow:
        _unmarked_slow.append((report.duration, report.nodeid))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if _unmarked_slow:
        terminalreporter.section(f"tests of {SLOW_SECONDS:g} s or more not marked slow")
        for duration, nodeid in sorted(_unmarked_slow, reverse=True):
            terminalreporter.write_line(f"{duration:6.2f} s  {nodeid}")


# --- a Cell user of a test's own ------------------------------------------------------------


@pytest.fixture
def cell_user() -> Iterator[str]:
    """A Cell user name of this test's own (the Owner creates the user), removed afterwards
    with whatever it left: stopping a Cell stops every process of its user, so tests that
    run side by side (or another engineer's) never share one."""
    name = f"rio-ct-{secrets.token_hex(4)}"
    yield name
    with contextlib.suppress(KeyError):
        uid = pwd.getpwnam(name).pw_uid
        for proc in psutil.process_iter(["uids"]):  # only this test's Cells run as it
            with contextlib.suppress(psutil.Error):
                if uid in proc.info["uids"]:
                    proc.kill()
        subprocess.run(["userdel", "--remove", name], capture_output=True, check=False)


@pytest.fixture
def mark(cell_user: str) -> Iterator[str]:
    """A name for what a test's Cells plant in the machine's world-writable folders; what
    is left of it is removed afterwards."""
    name = f"rio-planted-{cell_user}"
    yield name
    for folder in SHARED_PLACES:
        for path in Path(folder).glob(f"{name}*"):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)


# --- the CLI -------------------------------------------------------------------------------


@pytest.fixture
def rio(tmp_path: Path) -> Callable[..., CliResult]:
    """``rio(*args, input=None)``: the CLI run in ``tmp_path``."""

    def call(*args: Any, input: Any = None, timeout: float = 60) -> CliResult:
        return run_cli(*args, input=input, cwd=tmp_path, timeout=timeout)

    return call


# --- Sessions ------------------------------------------------------------------------------


@pytest.fixture
def db(tmp_path: Path) -> Path:
    return tmp_path / "session.db"


@pytest.fixture
def make_session(tmp_path: Path) -> Iterator[Callable[..., Session]]:
    """``make_session(name="session.db", goal=..., validators=None, **limits)``."""
    from rio_ci.core.limits import Limits

    opened: list[Session] = []

    def make(
        name: str = "session.db",
        goal: str = "test goal",
        validators: list[list[str]] | None = None,
        **limits: Any,
    ) -> Session:
        session = Session.create(
            tmp_path / name,
            goal,
            Settings(
                cwd=str(tmp_path),
                validators=tuple(tuple(argv) for argv in validators or []),
                limits=Limits(**limits),
            ),
        )
        opened.append(session)
        return session

    yield make
    for session in opened:
        session.close()


@pytest.fixture
def session(make_session: Callable[..., Session]) -> Session:
    return make_session()


# --- Cells and patches ---------------------------------------------------------------------


def accept(session: Session, build: Callable[[Patch], Any]) -> Receipt:
    """Prepare a Turn, build a patch on its snapshot, and require it to be accepted."""
    turn = session.prepare_turn()
    patch = Patch(turn["state"])
    build(patch)
    result = session.step(turn["turn_id"], patch.build())
    assert isinstance(result, Receipt), result
    return result


# --- reading a Session file from outside ---------------------------------------------------


def journal_rows(path: str | Path) -> list[dict[str, Any]]:
    """Every committed event, read with sqlite-utils through a fresh read-only connection
    (independent of rio_ci's own reading code)."""
    db = sqlite_utils.Database(sqlite3.connect(f"file:{path}?mode=ro", uri=True))
    try:
        rows = db["events"].rows_where(order_by="seq", select="seq, kind, ref, data")
        return [{**row, "data": json.loads(row["data"])} for row in rows]
    finally:
        db.close()


def sha256(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


# --- moving Executions without an Owner (through the Session, as the Owner does) -----------


def start_execution(session: Session, cell_id: int) -> None:
    assert session.authorize_launch(cell_id, f"test-token-{cell_id}")


def end_execution(
    session: Session, cell_id: int, result: dict[str, Any], output: str | None = None
) -> int:
    """Commit a result with its Inbox notice, as one event (an UnknownExecution's
    evidence_refs name that event)."""
    pieces = [OutputPiece("stdout", text=output)] if output else []
    return session.record_result(
        cell_id, cast(Result, {"cell_id": cell_id, **result}), output=pieces
    )


def succeed(session: Session, cell_id: int, output: str | None = None) -> int:
    start_execution(session, cell_id)
    return end_execution(session, cell_id, {"type": "success", "exit_code": 0}, output)


def record_unknown(
    session: Session, cell_id: int, reason: str = "worker_lost_before_result_commit"
) -> int:
    """What recovery commits for a ``started`` Execution: returns the record's seq."""
    if session.refresh().executions[str(cell_id)]["phase"] == "queued":
        start_execution(session, cell_id)
    session.mark_lost([(cell_id, reason)])
    return int(session.refresh().executions[str(cell_id)]["result_seq"])


def end_run(session: Session, reason: str = "test") -> None:
    session.end_in_failure(reason)


# --- GitHub: the real PyGithub client against the local fake --------------------------------


@pytest.fixture
def gh(request: pytest.FixtureRequest) -> Iterator[FakeGitHub]:
    """A fresh fake GitHub REST API on 127.0.0.1, with the people of the test's
    ``people(login=role)`` marks and the workflows of its ``workflows(name)`` marks (a module
    sets them in ``pytestmark``)."""
    with FakeGitHub() as fake:
        for mark in request.node.iter_markers("people"):
            for login, role in mark.kwargs.items():
                fake.add_user(login, role)
        for mark in request.node.iter_markers("workflows"):
            for name in mark.args:
                fake.add_workflow(name)
        yield fake


@pytest.fixture
def repo(tmp_path: Path, gh: FakeGitHub) -> Repository:
    """A repository on ``gh`` with its origin, its runner and its jobs (tests/action_job.py)."""
    return Repository(tmp_path, gh)


@pytest.fixture
def forge(gh: FakeGitHub) -> GitHubForge:
    return GitHubForge(gh.repo, gh.token, gh.api_url, throttle=False, retries=0)


# --- the runners rio-ci runs on (tests/runners.py) --------------------------------------------


@pytest.fixture
def runner(request: pytest.FixtureRequest) -> Iterator[RunnerUser]:
    """A runner user of its own under the profile the test names as this fixture's
    parameter (``@pytest.mark.parametrize("runner", RUNNERS, indirect=True)``), removed
    afterwards with its sudoers entry and every process it had."""
    with runner_user(PROFILES[request.param]) as user:
        yield user


@pytest.fixture
def cell_user_name() -> Iterator[str]:
    """A Cell user name of the test's own (rio-ci creates the user), removed afterwards."""
    with fresh_cell_user() as name:
        yield name


@pytest.fixture
def shared_place() -> Iterator[Path]:
    """A folder every user may enter (tmp_path's parents are root's alone); the test gives
    what it makes there to its runner user."""
    folder = Path(tempfile.mkdtemp(prefix="rio-runner-test-", dir="/tmp"))
    folder.chmod(0o755)
    yield folder
    shutil.rmtree(folder, ignore_errors=True)
