"""``rio-ci eval``: does the durable agent fix bugs, at what cost, and how does it recover?
(docs/eval.md)

Each trial of each case:

1. copies the case's ``repo/`` to a fresh temporary directory and makes it a git repository
   with one commit;
2. creates a Session there with ``rio-ci new`` (the case's goal, validators and limits);
3. runs ``rio-ci run DB --model SPEC`` as a real subprocess. With ``--crash`` it watches the
   Session's committed events (read-only) and SIGKILLs that Owner once, while the first
   executable Cell accepted in round 2 or later is running, then resumes with ``rio-ci run``
   until the run ends: recovery stops the surviving Worker and records an UnknownExecution;
4. runs the case's hidden ``check`` in the working copy (passed = exit 0);
5. reads every figure of the report from the Session's committed events (``eval_report``).

Sessions stay in ``OUT/sessions/MODE/`` (MODE is ``plain`` or ``crash``) so that ``rio-ci show``
and ``events`` can be tried on them; run logs and check output go to ``OUT/logs/MODE/``.
Only the CLI contract and read-only Session access are used: ``run`` is a black box.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from rio_ci.commands.eval_cases import Case, find_cases
from rio_ci.commands.eval_report import measure, write_reports
from rio_ci.core.errors import RioError, UsageError
from rio_ci.model.providers import DEFAULT_EFFORT
from rio_ci.session.session import Session
from rio_ci.untrusted import programs

EXECUTABLE = ("code", "cmd")
POLL = 0.02  # seconds between looks at the Journal while waiting to crash the Owner
# After the Worker of the target Cell registered: wait for its first committed output (the
# script is then surely running), but no longer than this when it prints nothing.
SETTLE = 0.5
CHECK_TIMEOUT = 600.0
STOP_GRACE = 10.0  # after --deadline (or SIGTERM), how long `run` gets to exit by itself


@dataclass(frozen=True)
class Settings:
    spec: str
    crash: bool
    out: Path
    timeout: float  # seconds per trial, all runs included
    env: dict[str, str]
    run_args: tuple[str, ...] = ()  # passed on to every rio-ci run
    keep: bool = False  # keep each trial's working copy in OUT/repos/MODE/

    @property
    def mode(self) -> str:
        return "crash" if self.crash else "plain"


def eval_command(
    paths: list[str],
    *,
    spec: str,
    trials: int,
    crash: bool,
    out: str,
    as_json: bool,
    timeout: float,
    emit: Callable[[Any], None],
    price: str | None = None,
    effort: str = DEFAULT_EFFORT,
    fallback: str | None = None,
    keep: bool = False,
) -> int:
    """``price``, ``effort`` and ``fallback`` are passed on to every ``rio-ci run``."""
    if trials < 1:
        raise UsageError("--trials must be at least 1")
    if timeout <= 0:
        raise UsageError("--timeout must be positive")
    cases = find_cases(paths)
    specs = {case.name: case.model_spec(spec) for case in cases}  # fails early, before trials
    settings = Settings(
        spec=spec,
        crash=crash,
        out=Path(out).resolve(),
        timeout=timeout,
        env=child_environment(),
        run_args=(
            *(("--price", price) if price else ()),
            "--effort",
            effort,
            *(("--fallback-model", fallback) if fallback else ()),
        ),
        keep=keep,
    )
    for kind in ("sessions", "logs", "repos"):
        shutil.rmtree(settings.out / kind / settings.mode, ignore_errors=True)
        (settings.out / kind / settings.mode).mkdir(parents=True, exist_ok=True)
    results = []
    for case in cases:
        for index in range(1, trials + 1):
            trial = run_trial(case, index, specs[case.name], settings)
            progress(trial, trials)
            results.append(trial)
    report = write_reports(settings.out, results, model=spec, crash=crash)
    if as_json:
        emit(report)
    else:
        sys.stdout.write((settings.out / "report.md").read_text())
        sys.stdout.flush()
    return 0 if all(t["passed"] for t in results) else 1


def child_environment() -> dict[str, str]:
    """This environment, with the ``uv`` that runs code Cells on PATH (appended, so it shadows
    nothing): validators and checks of PEP 723 cases call ``uv run --script`` too."""
    env = dict(os.environ)
    try:
        from uv import find_uv_bin

        uv_dir = str(Path(find_uv_bin()).parent)
    except (ImportError, FileNotFoundError):
        return env
    parts = env.get("PATH", "").split(os.pathsep)
    if uv_dir not in parts:
        env["PATH"] = os.pathsep.join([*filter(None, parts), uv_dir])
    return env


def progress(trial: dict[str, Any], trials: int) -> None:
    """One line per trial on stderr: case, trial, status, rounds, cost, seconds."""
    cost = "?" if trial["cost_usd"] is None else f"${trial['cost_usd']:.4f}"
    crash = " crash" if trial["crashed"] else ""
    line = (
        f"eval {trial['case']} #{trial['trial']}/{trials}{crash}: "
        f"{'PASS' if trial['passed'] else 'FAIL'} {trial['status']}, "
        f"{trial['rounds']} rounds, {cost}, {trial['wall_seconds']:.1f} s"
    )
    print(line, file=sys.stderr, flush=True)


# --- one trial ---------------------------------------------------------------------------


def run_trial(case: Case, index: int, spec: str, settings: Settings) -> dict[str, Any]:
    db = settings.out / "sessions" / settings.mode / f"{case.name}-{index}.sqlite3"
    logs = settings.out / "logs" / settings.mode
    with tempfile.TemporaryDirectory(prefix=f"rio-eval-{case.name}-") as tmp:
        repo = Path(tmp) / "repo"
        if settings.keep:  # kept for `git diff` afterwards
            repo = settings.out / "repos" / settings.mode / f"{case.name}-{index}"
        shutil.copytree(case.directory / "repo", repo, symlinks=True)
        make_repository(repo, settings.env)
        new_session(db, case, repo, settings.env)
        with (logs / f"{case.name}-{index}.run.log").open("w") as log:
            status, crashed = drive(db, spec, settings, log)
        passed = hidden_check(case, repo, settings.env, logs / f"{case.name}-{index}.check.log")
    session = Session.open(db)
    try:
        events = list(session.events())
    finally:
        session.close()
    figures = measure(events)
    return {
        "case": case.name,
        "trial": index,
        "passed": passed,
        "status": figures.pop("ended") or status,
        **figures,
        "crashed": crashed,
        "session": str(db),
        **({"repo": str(repo)} if settings.keep else {}),
    }


def make_repository(repo: Path, env: dict[str, str]) -> None:
    """``git init`` with one commit of the whole tree, and an identity the model can commit
    with; the model's ``git diff``/``git status`` then show exactly what changed. git is
    the one rio-ci runs everywhere (rio_ci.untrusted.programs), not one on the case's ``PATH``."""
    git = programs.find("git")
    if git is None:
        raise RioError(programs.missing("git"))
    steps = [
        ["git", "init", "-q"],
        ["git", "config", "user.name", "rio-ci eval"],
        ["git", "config", "user.email", "eval@rio-ci.invalid"],
        ["git", "config", "commit.gpgsign", "false"],
        ["git", "add", "-A"],
        ["git", "commit", "-q", "-m", "the case as given"],
    ]
    for argv in steps:
        done = subprocess.run([git, *argv[1:]], cwd=repo, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise RioError(f"{shlex.join(argv)} failed in {repo}: {done.stderr.strip()}")


def new_session(db: Path, case: Case, repo: Path, env: dict[str, str]) -> None:
    argv = [*rio_ci(), "new", str(db), "--goal", case.goal, "--cwd", str(repo)]
    for validator in case.validators:
        argv += ["--validator", shlex.join(validator)]
    for name, value in case.limits.items():
        argv += ["--limit", f"{name}={value}"]
    done = subprocess.run(argv, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RioError(
            f"rio-ci new failed for case {case.name}: {done.stdout.strip()} {done.stderr.strip()}"
        )


def rio_ci() -> list[str]:
    return [sys.executable, "-I", "-m", "rio_ci"]


def drive(db: Path, spec: str, settings: Settings, log: IO[str]) -> tuple[str, bool]:
    """``rio-ci run`` until the run ends (resuming after the crash, and after a Timer wait
    that fits the trial's time), or the trial's time is up. Returns ``(status, crashed)``."""
    deadline = time.monotonic() + settings.timeout
    crashed = False
    while True:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return "timeout", crashed
        argv = [
            *rio_ci(),
            "run",
            str(db),
            "--model",
            spec,
            "--deadline",
            f"{remaining:.1f}",
            *settings.run_args,
        ]
        log.write(f"$ {shlex.join(argv)}\n")
        log.flush()
        proc = subprocess.Popen(
            argv, stdout=subprocess.PIPE, stderr=log, env=settings.env, text=True
        )
        killed = settings.crash and not crashed and crash_owner(db, proc)
        stdout = wait_or_stop(proc, remaining + STOP_GRACE)
        log.write(stdout)
        if killed:
            crashed = True
            log.write(f"[eval] SIGKILLed the Owner (pid {proc.pid}); resuming\n")
            continue
        last = status_line(stdout)
        if proc.returncode == 2 and "error" in last:
            raise UsageError(f"rio-ci run: {last['error']}")
        status = str(last.get("status") or f"error (exit {proc.returncode})")
        wake = last.get("next_wake")
        if status == "waiting" and isinstance(wake, int | float):
            pause = wake - time.time()
            if pause < deadline - time.monotonic():
                time.sleep(max(0.0, pause))
                continue
        return status, crashed


def wait_or_stop(proc: subprocess.Popen[str], timeout: float) -> str:
    """Wait for ``proc``; past ``timeout`` ask it to stop (SIGTERM: it stops its Worker and
    commits what is known), and only then kill it."""
    try:
        stdout, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.terminate()
        try:
            stdout, _ = proc.communicate(timeout=STOP_GRACE)
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, _ = proc.communicate()
    return stdout or ""


def status_line(stdout: str) -> dict[str, Any]:
    """The last JSON object printed by ``run`` (its status line), or {}."""
    for line in reversed(stdout.splitlines()):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    return {}


def crash_owner(db: Path, proc: subprocess.Popen[str]) -> bool:
    """SIGKILL ``proc`` (the Owner) while the first executable Cell accepted in round 2 or
    later is running. Reads committed events only. A Cell that finishes before it could be
    caught running passes the turn to the next one. Returns whether the Owner was killed
    (False when the run ended first).

    ``proc`` is the Owner itself: an Owner command that re-executes itself to drop credentials
    does so with execve, which keeps the pid."""
    session = Session.open(db)
    try:
        rounds, after = 0, 0
        candidates: set[int] = set()
        registered: dict[int, float] = {}
        printed: set[int] = set()
        while proc.poll() is None:
            for event in session.events(after=after):
                after = event["seq"]
                kind, cell = event["kind"], event.get("cell_id")
                if kind == "patch_accepted":
                    rounds += 1
                    if rounds >= 2:
                        candidates.update(
                            c["id"] for c in event.get("cells", []) if c.get("kind") in EXECUTABLE
                        )
                elif kind == "worker_registered" and cell in candidates:
                    registered[cell] = time.monotonic()
                elif kind == "output" and cell in registered:
                    printed.add(cell)
                elif kind == "execution_finished" and cell in registered:
                    del registered[cell]
            if any(
                cell in printed or time.monotonic() - since >= SETTLE
                for cell, since in registered.items()
            ):
                proc.send_signal(signal.SIGKILL)  # a no-op if it has just exited
                return proc.wait() == -signal.SIGKILL
            time.sleep(POLL)
        return False
    finally:
        session.close()


def hidden_check(case: Case, repo: Path, env: dict[str, str], log: Path) -> bool:
    argv = case.check_argv()
    try:
        done = subprocess.run(
            argv, cwd=repo, env=env, capture_output=True, text=True, timeout=CHECK_TIMEOUT
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        log.write_text(f"$ {shlex.join(argv)}\n{exc}\n")
        return False
    log.write_text(f"$ {shlex.join(argv)}\nexit {done.returncode}\n{done.stdout}{done.stderr}")
    return done.returncode == 0
