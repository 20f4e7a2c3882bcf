"""The action's contract with its workflow (docs/github.md): what a step of it is given —
``ActionInputs``, GitHub's variables (``GITHUB_*``, ``RUNNER_*``) and the action's inputs
(``RIO_*``, which action.yml sets from ``with:``), read once and validated; ``Config``, the
repository's ``.github/rio.yml`` — and what it gives back: its outputs, log commands and
annotations, the step summary.

Only these variables are read. Unset action inputs take their defaults. Nothing here is ever
printed whole: the token and the API key stay inside ``ActionInputs``.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import stat
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from rio_ci.core.errors import UsageError
from rio_ci.core.json_value import ascii_int
from rio_ci.core.limits import Limits
from rio_ci.core.text import escape_control
from rio_ci.model import providers
from rio_ci.model.providers import DEFAULT_EFFORT, DEFAULT_SPEC
from rio_ci.run.confinement.settings import ConfinementSettings
from rio_ci.session.settings import Network, Settings
from rio_ci.untrusted.treefile import read_tree_file

DEFAULT_LABEL = "rio"
DEFAULT_CONFIG = ".github/rio.yml"
DEFAULT_BUDGET_MINUTES = 50.0
ACTION_CELL_USER = "rio-cell"  # the action's cell-user default (RIO_CELL_USER unset: none)
CONFIG_MAX_BYTES = 64 * 1024  # a configuration is a few lines
DEFAULT_RETENTION_DAYS = 90  # GitHub's default artifact retention (1-90 public, 1-400 private)
JOB_FILE = "job.json"  # what the run step hands the finish step, in state_dir
KEPT_FILE = "github.json"  # GitHub's answers, kept for the job's next step (github_pages)
OUTPUTS = {
    "status": "status",
    "session": "session",
    "next-wake": "next_wake",
    "pull-request": "pull_request",
    "artifact-name": "artifact_name",
    "retention-days": "retention_days",
}
RUN_OUTPUTS = ("status", "session", "next-wake", "pull-request", "artifact-name")
# The variables every phase requires (docs/github.md): the rest have defaults.
REQUIRED = (
    "GITHUB_EVENT_NAME",
    "GITHUB_EVENT_PATH",
    "GITHUB_REPOSITORY",
    "GITHUB_TOKEN",
    "GITHUB_WORKSPACE",
    "RUNNER_TEMP",
)


@dataclass(frozen=True)
class ActionInputs:
    event_name: str
    event_path: Path
    repository: str
    api_url: str
    token: str
    run_id: str
    workspace: Path
    output: Path | None
    summary: Path | None
    runner_temp: Path
    model: str
    effort: str
    price: str | None
    fallback_model: str | None  # RIO_FALLBACK_MODEL: asked after a refusal
    trigger_label: str
    config: str
    budget_minutes: float
    server_url: str
    workflow_ref: str
    ref_name: str
    # RIO_CELL_USER (the action's cell-user): how the job's Cells are confined
    confinement: ConfinementSettings = field(default_factory=ConfinementSettings)
    assignee_trigger: str = ""
    runner_retention_days: int | None = None
    job: str = ""  # GITHUB_JOB: the id of the workflow's job this step runs in
    repository_id: int | None = None  # GITHUB_REPOSITORY_ID: the repository need not be read
    artifact_id: int | None = None  # RIO_ARTIFACT_ID: what the upload step uploaded (prune)
    artifact_name: str = ""  # RIO_ARTIFACT_NAME: the name finish gave it

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> ActionInputs:
        def need(name: str) -> str:
            value = environ.get(name, "").strip()
            if not value:
                raise UsageError(
                    f"{name} is not set; rio-ci action runs inside GitHub Actions "
                    "(or a job that sets the same variables)"
                )
            return value

        given = {name: need(name) for name in REQUIRED}

        budget_text = environ.get("RIO_TIME_BUDGET_MINUTES", "").strip()
        try:
            budget = float(budget_text) if budget_text else DEFAULT_BUDGET_MINUTES
        except ValueError:
            raise UsageError(
                f"RIO_TIME_BUDGET_MINUTES must be a number, got {budget_text!r}"
            ) from None
        if budget <= 0:
            raise UsageError("RIO_TIME_BUDGET_MINUTES must be positive")
        optional = {k: environ.get(k, "").strip() for k in ("GITHUB_OUTPUT", "GITHUB_STEP_SUMMARY")}
        return cls(
            event_name=given["GITHUB_EVENT_NAME"],
            event_path=Path(given["GITHUB_EVENT_PATH"]),
            repository=given["GITHUB_REPOSITORY"],
            api_url=environ.get("GITHUB_API_URL", "").strip() or "https://api.github.com",
            token=given["GITHUB_TOKEN"],
            run_id=environ.get("GITHUB_RUN_ID", "0").strip() or "0",
            workspace=Path(given["GITHUB_WORKSPACE"]),
            output=Path(optional["GITHUB_OUTPUT"]) if optional["GITHUB_OUTPUT"] else None,
            summary=(
                Path(optional["GITHUB_STEP_SUMMARY"]) if optional["GITHUB_STEP_SUMMARY"] else None
            ),
            runner_temp=Path(given["RUNNER_TEMP"]),
            model=environ.get("RIO_MODEL", "").strip() or DEFAULT_SPEC,
            effort=environ.get("RIO_EFFORT", "").strip() or DEFAULT_EFFORT,
            price=environ.get("RIO_PRICE", "").strip() or None,
            fallback_model=environ.get("RIO_FALLBACK_MODEL", "").strip() or None,
            trigger_label=environ.get("RIO_TRIGGER_LABEL", "").strip() or DEFAULT_LABEL,
            config=environ.get("RIO_CONFIG", "").strip() or DEFAULT_CONFIG,
            budget_minutes=budget,
            server_url=environ.get("GITHUB_SERVER_URL", "").strip() or "https://github.com",
            workflow_ref=environ.get("GITHUB_WORKFLOW_REF", "").strip(),
            ref_name=environ.get("GITHUB_REF_NAME", "").strip(),
            confinement=ConfinementSettings.asked(environ.get("RIO_CELL_USER")),
            assignee_trigger=environ.get("RIO_ASSIGNEE_TRIGGER", "").strip().removeprefix("@"),
            runner_retention_days=_retention(environ.get("GITHUB_RETENTION_DAYS", "").strip()),
            job=environ.get("GITHUB_JOB", "").strip(),
            repository_id=_number("GITHUB_REPOSITORY_ID", environ),
            artifact_id=_number("RIO_ARTIFACT_ID", environ),
            artifact_name=environ.get("RIO_ARTIFACT_NAME", "").strip(),
        )

    def retention_days(self, config: Config) -> int:
        """How long this job's artifact lives: the runner's ``GITHUB_RETENTION_DAYS`` (the
        repository's setting, which also caps the upload's ``retention-days``), lowered by
        ``retention_days`` in the configuration, never raised by it; GitHub's default when
        neither says."""
        given = [d for d in (self.runner_retention_days, config.retention_days) if d]
        return min(given, default=DEFAULT_RETENTION_DAYS)

    def event(self) -> dict[str, Any]:
        try:
            payload = json.loads(self.event_path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise UsageError(f"cannot read the event payload {self.event_path}: {exc}") from None
        if not isinstance(payload, dict):
            raise UsageError(f"the event payload {self.event_path} is not a JSON object")
        return payload

    @property
    def run_url(self) -> str:
        return f"{self.server_url}/{self.repository}/actions/runs/{self.run_id}"

    @property
    def workflow_file(self) -> str:
        path = self.workflow_ref.split("@", 1)[0]
        return path.rsplit("/", 1)[-1] if path else "rio.yml"

    @property
    def state_dir(self) -> Path:
        return self.runner_temp / "rio"

    @property
    def artifact_dir(self) -> Path:
        return self.runner_temp / "rio-artifact"


def _retention(text: str) -> int | None:
    """``GITHUB_RETENTION_DAYS`` as a number of days (unset: None). GitHub's own runners
    always give 1 or more; ``0``, which local runners such as act pass, says nothing and
    counts as unset."""
    days = ascii_int(text or "0", 6)
    if days is None:
        raise UsageError(f"GITHUB_RETENTION_DAYS must be a whole number of days, got {text!r}")
    return days or None


def _number(name: str, environ: Mapping[str, str]) -> int | None:
    """An id the runner or a step output gives (``GITHUB_REPOSITORY_ID``: the API need not be
    asked; ``RIO_ARTIFACT_ID``: the artifact the upload step made); unset: None."""
    text = environ.get(name, "").strip()
    if not text:
        return None
    number = ascii_int(text, 20)
    if number is None:
        raise UsageError(f"{name} must be a whole number, got {text!r}")
    return number


# The job's token; with every provider's key (rio_ci/model/providers.py), the harness's own
# credentials, which a Session may never hand to its Cells.
JOB_TOKEN = "GITHUB_TOKEN"
_VARIABLE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_WORKFLOW_FILE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,99}\.ya?ml")
CONFIG_KEYS = frozenset(
    {
        "validators",
        "limits",
        "pass_env",
        "retention_days",
        "secrets",
        "ci_workflow",
        "keep_generations",
        "network",
    }
)
DEFAULT_KEEP_GENERATIONS = 3
# The action's Cells reach only the default list unless the configuration says otherwise.
ACTION_NETWORK_MODE = "allowlist"
NETWORK_KEYS = frozenset({"mode", "allow"})


@dataclass(frozen=True)
class Config:
    """``.github/rio.yml``: validators, limits, the credentials Cells may see (``pass_env``)
    and more variables to treat as secrets (``secrets``), applied when a Session is created;
    ``retention_days``, read by every job: how long GitHub keeps this repository's artifacts
    (a Session's saved generations), so the artifact outlives every Timer and a Timer past it
    is refused. It can only lower what the runner says (``ActionInputs.retention_days``); None
    when the file does not set it. ``ci_workflow``, read by every job: the repository's CI
    workflow, which the finish step dispatches on the agent's branch after a push (pushes
    made with the job token start no workflow; docs/github.md). ``keep_generations``, read by
    every job: how many of a Session's newest generations the step after the upload keeps
    (the older ones are deleted; docs/github.md). A bad value there is not worth stopping a
    Session for: it is one of the ``problems`` (warnings) and the default applies."""

    validators: list[list[str]]
    limits: Limits
    pass_env: tuple[str, ...] = ()
    retention_days: int | None = None
    secrets: tuple[str, ...] = ()  # more variables whose values are redacted and withheld
    skipped: str | None = None  # why the file was not read (the defaults apply): a warning
    ci_workflow: str | None = None  # the repository's CI, dispatched on the agent's branch
    keep_generations: int = DEFAULT_KEEP_GENERATIONS
    problems: tuple[str, ...] = ()  # values replaced by their defaults: warnings
    network: Network = field(default_factory=lambda: Network.asked(ACTION_NETWORK_MODE))

    def settings(self, cwd: str) -> Settings:
        """What a Session created now in ``cwd`` fixes of this configuration."""
        return Settings(
            cwd=cwd,
            validators=tuple(tuple(argv) for argv in self.validators),
            limits=self.limits,
            pass_env=self.pass_env,
            secrets=self.secrets,
            network=self.network,
        )

    @classmethod
    def load(cls, workspace: Path, relative: str) -> Config:
        """Read the configuration as a regular file inside the checkout, at most
        ``CONFIG_MAX_BYTES`` (rio_ci.untrusted.treefile): absent, or skipped (a link out of the
        tree, a FIFO, a device: ``skipped`` says why), it is the defaults; too big or not YAML, a
        UsageError."""
        found = read_tree_file(workspace, relative, CONFIG_MAX_BYTES)
        if found.data is None:
            return cls([], Limits(), skipped=found.skipped)
        if found.over:
            raise UsageError(f"{relative}: the configuration is over {CONFIG_MAX_BYTES} bytes")
        data = _config_mapping(relative, found.data)
        keep, problem = _keep_generations(relative, data.get("keep_generations"))
        return cls(
            _validators(relative, data.get("validators") or []),
            _config_limits(relative, data.get("limits") or {}),
            _pass_env(relative, data.get("pass_env") or []),
            _retention_days(relative, data.get("retention_days")),
            _names(relative, "secrets", data.get("secrets") or []),
            ci_workflow=_ci_workflow(relative, data.get("ci_workflow")),
            keep_generations=keep,
            problems=(problem,) if problem else (),
            network=_network(relative, data.get("network")),
        )


def _config_mapping(relative: str, raw: bytes) -> dict[str, Any]:
    try:
        data = yaml.safe_load(raw.decode("utf-8")) or {}
    except (UnicodeDecodeError, yaml.YAMLError, RecursionError) as exc:
        reason = " ".join(str(exc).split())[:300] or "nested too deeply"
        raise UsageError(f"{relative}: cannot read the configuration: {reason}") from None
    if not isinstance(data, dict):
        raise UsageError(f"{relative}: the configuration must be a mapping")
    unknown = sorted(map(str, set(data) - CONFIG_KEYS))
    if unknown:
        raise UsageError(f"{relative}: unknown key(s) {', '.join(unknown)}")
    return data


def _network(relative: str, value: Any) -> Network:
    """``network: {mode: allowlist|open|none, allow: [PATTERN, …]}`` (docs/github.md); the
    action's default, ``allowlist`` with the default list, when absent. A bad value stops the
    Session before it is created: widening or narrowing what Cells reach by a default would
    not be what the maintainer wrote."""
    if value is None:
        return Network.asked(ACTION_NETWORK_MODE)
    if not isinstance(value, dict) or not set(map(str, value)) <= NETWORK_KEYS:
        raise UsageError(
            f"{relative}: network must be a mapping of mode (allowlist, open or none) and "
            "allow (a list of host patterns)"
        )
    mode, allow = value.get("mode", ACTION_NETWORK_MODE), value.get("allow") or []
    if not isinstance(mode, str) or not isinstance(allow, list):
        raise UsageError(
            f"{relative}: network.mode is one of allowlist, open, none and network.allow a "
            "list of host patterns"
        )
    if not all(isinstance(pattern, str) for pattern in allow):
        raise UsageError(f"{relative}: network.allow is a list of host patterns (strings)")
    try:
        return Network.asked(mode, allow)
    except UsageError as exc:
        raise UsageError(f"{relative}: network: {exc}") from None


def _ci_workflow(relative: str, name: Any) -> str | None:
    """The file name of the repository's CI workflow (``ci.yml``), as the workflows API
    takes it; None when the configuration names none."""
    if name is None:
        return None
    if not isinstance(name, str) or not _WORKFLOW_FILE.fullmatch(name):
        raise UsageError(
            f"{relative}: ci_workflow must be the file name of a workflow in "
            f".github/workflows/ (say, ci.yml), got {name!r}"
        )
    return name


def _keep_generations(relative: str, value: Any) -> tuple[int, str | None]:
    """How many generations to keep, and the warning when the value was not one (then the
    default applies)."""
    if value is None:
        return DEFAULT_KEEP_GENERATIONS, None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        return DEFAULT_KEEP_GENERATIONS, (
            f"{relative}: keep_generations must be a whole number of at least 1, got "
            f"{escape_control(repr(value))[:80]}; the default, {DEFAULT_KEEP_GENERATIONS}, "
            "applies"
        )
    return value, None


def _validators(relative: str, items: Any) -> list[list[str]]:
    if not isinstance(items, list):
        raise UsageError(f"{relative}: validators must be a list")
    validators = []
    for item in items:
        try:
            argv = shlex.split(item) if isinstance(item, str) else item
        except ValueError as exc:  # an unclosed quote
            raise UsageError(f"{relative}: validator {item!r}: {exc}") from None
        if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
            raise UsageError(f"{relative}: each validator is a command string or argv list")
        validators.append(argv)
    return validators


def _config_limits(relative: str, limits_data: Any) -> Limits:
    if not isinstance(limits_data, dict):
        raise UsageError(f"{relative}: limits must be a mapping of NAME: VALUE")
    try:
        return Limits.from_dict(limits_data)
    except (TypeError, ValueError) as exc:
        raise UsageError(f"{relative}: {exc}") from None


def _retention_days(relative: str, days: Any) -> int | None:
    if days is not None and (
        isinstance(days, bool) or not isinstance(days, int) or not 2 <= days <= 400
    ):
        raise UsageError(
            f"{relative}: retention_days must be a whole number of days from "
            "2 to 400 (the repository's artifact retention)"
        )
    return days


def _names(relative: str, key: str, names: Any) -> tuple[str, ...]:
    if not isinstance(names, list) or not all(
        isinstance(n, str) and _VARIABLE.fullmatch(n) for n in names
    ):
        raise UsageError(f"{relative}: {key} is a list of environment variable names")
    return tuple(sorted(set(names)))


def harness_secrets() -> frozenset[str]:
    """The harness's own credentials: the job's token and every provider's key."""
    return frozenset({JOB_TOKEN, *providers.credentials()})


def _pass_env(relative: str, names: Any) -> tuple[str, ...]:
    names = _names(relative, "pass_env", names)
    forbidden = sorted(harness_secrets() & set(names))
    if forbidden:
        raise UsageError(
            f"{relative}: pass_env may not name {', '.join(forbidden)}: the "
            "harness's own credentials never reach a Cell"
        )
    return tuple(names)


def checkout_of(environ: Mapping[str, str]) -> str | None:
    """The checkout the job's Cells write (``GITHUB_WORKSPACE``), named before the harness
    looks up any program so that none of the checkout's ever runs (rio_ci.untrusted.programs); None
    when unset (``ActionInputs`` then reports it)."""
    return environ.get("GITHUB_WORKSPACE", "").strip() or None


def log(message: str) -> None:
    """One line of the job's log (workflow commands such as ``::group::`` pass through)."""
    print(message, file=sys.stderr, flush=True)


def log_error(message: str) -> None:
    """An error annotation on the run: one line, control and bidi characters escaped."""
    log(f"::error::rio-ci: {escape_control(' '.join(message.split()))}")


def warn(env: ActionInputs, message: str) -> None:
    """A warning in the log (an annotation on the run) and in the step summary: one line
    (no workflow command can follow it), control and bidi characters escaped."""
    line = escape_control(" ".join(message.split()))
    log(f"::warning::rio-ci: {line}")
    if env.summary is not None:
        with env.summary.open("a") as stream:
            stream.write(f"> **Warning** (rio-ci): {line}\n\n")


def seal_state_dir(env: ActionInputs) -> None:
    """Make the job's state directory (``$RUNNER_TEMP/rio``: ``job.json``, the Session and
    its sidecars, the harness's git directory and its home, the launch-record repository)
    the harness's alone: mode 0700, so the Cell user can neither list nor enter it. Then
    take the others' bits off ``$RUNNER_TEMP`` itself, which also holds the artifact
    directory, rio-ci's install and other actions' files: a Cell needs nothing there (it
    reads the Cell folder, rio_ci/run/confinement/folder.py). A ``$RUNNER_TEMP`` every user may
    write is a shared folder such as ``/tmp`` and is left as it is, with a warning when
    Cells are to run as a user of their own (docs/security.md)."""
    env.state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
    env.state_dir.chmod(0o700)
    mode = stat.S_IMODE(os.stat(env.runner_temp).st_mode)
    if mode & stat.S_IWOTH:
        if env.confinement.cell_user is not None:
            warn(
                env,
                f"RUNNER_TEMP ({env.runner_temp}) is a folder every user may write, so it is "
                "left open: Cells may list it and read the artifact directory in it",
            )
    elif mode & stat.S_IRWXO:
        try:
            os.chmod(env.runner_temp, mode & ~stat.S_IRWXO)
        except OSError as exc:
            warn(env, f"RUNNER_TEMP ({env.runner_temp}) stays open to others: {exc.strerror}")


def write_outputs(env: ActionInputs, result: dict[str, Any], only: tuple[str, ...] = ()) -> None:
    """Append the step's outputs to ``GITHUB_OUTPUT`` (all of them, or the names in
    ``only``). Written twice in one step, a name takes its last value."""
    if env.output is None:
        return
    with env.output.open("a") as stream:
        for name, key in OUTPUTS.items():
            if only and name not in only:
                continue
            value = result.get(key)
            text = "" if value is None else str(value)
            stream.write(f"{name}={text.splitlines()[0] if text else ''}\n")
