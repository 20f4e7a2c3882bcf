"""The action's contract (GitHub's variables, the action's inputs) and ``.github/rio.yml``
(docs/github.md), read in-process: pure parsing with clear errors."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from rio_ci.cli import build_parser
from rio_ci.core.errors import UsageError
from rio_ci.core.limits import Limits
from rio_ci.github.contract import ActionInputs, Config, seal_state_dir
from rio_ci.model.claude import table
from rio_ci.model.providers import DEFAULT_EFFORT, DEFAULT_SPEC, build_model

REQUIRED = {
    "GITHUB_EVENT_NAME": "issues",
    "GITHUB_EVENT_PATH": "/tmp/event.json",
    "GITHUB_REPOSITORY": "octo/demo",
    "GITHUB_TOKEN": "t0ken-value",
    "GITHUB_WORKSPACE": "/w",
    "RUNNER_TEMP": "/rt",
}


def test_unset_inputs_take_their_defaults() -> None:
    env = ActionInputs.from_environ(REQUIRED)
    assert (env.model, env.trigger_label, env.config, env.budget_minutes) == (
        DEFAULT_SPEC,
        "rio",
        ".github/rio.yml",
        50.0,
    )
    assert env.api_url == "https://api.github.com" and env.output is None
    assert env.state_dir == Path("/rt/rio") and env.artifact_dir == Path("/rt/rio-artifact")
    assert env.workflow_file == "rio.yml"


@pytest.mark.parametrize("given", [{}, {"RIO_MODEL": "", "RIO_EFFORT": " "}])
def test_the_action_and_the_command_line_share_one_default_model(given: dict[str, str]) -> None:
    """The action with its ``model`` and ``effort`` inputs unset or empty asks for what
    ``rio-ci run`` without ``--model`` and ``--effort`` asks for: the model table's default
    model at rio-ci's default level, both read from rio_ci/model."""
    env = ActionInputs.from_environ({**REQUIRED, **given})
    args = build_parser().parse_args(["run", "s.db"])
    assert (env.model, env.effort) == (args.model, args.effort) == (DEFAULT_SPEC, DEFAULT_EFFORT)
    model = build_model(env.model, effort=env.effort, connect=False)
    assert model.name == f"{DEFAULT_SPEC}:{table.default_model()}"
    assert getattr(model, "effort", None) == DEFAULT_EFFORT


def test_inputs_and_runner_variables_are_read() -> None:
    env = ActionInputs.from_environ(
        {
            **REQUIRED,
            "RIO_MODEL": "scripted:/s.yaml",
            "RIO_TRIGGER_LABEL": "agent",
            "RIO_CONFIG": "ci/rio.yml",
            "RIO_TIME_BUDGET_MINUTES": "7.5",
            "GITHUB_API_URL": "http://127.0.0.1:9",
            "GITHUB_OUTPUT": "/o",
            "GITHUB_RUN_ID": "42",
            "GITHUB_WORKFLOW_REF": "octo/demo/.github/workflows/agent.yml@refs/heads/main",
        }
    )
    assert (env.model, env.trigger_label, env.config, env.budget_minutes) == (
        "scripted:/s.yaml",
        "agent",
        "ci/rio.yml",
        7.5,
    )
    assert env.output == Path("/o") and env.workflow_file == "agent.yml"
    assert env.run_url == "https://github.com/octo/demo/actions/runs/42"


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("GITHUB_TOKEN", "", "GITHUB_TOKEN is not set"),
        ("RIO_TIME_BUDGET_MINUTES", "soon", "must be a number"),
        ("RIO_TIME_BUDGET_MINUTES", "0", "must be positive"),
        ("GITHUB_RETENTION_DAYS", "\u00b2", "whole number of days"),
        ("GITHUB_RETENTION_DAYS", "-3", "whole number of days"),
    ],
)
def test_a_broken_environment_is_a_usage_error_naming_the_variable(
    name: str, value: str, message: str
) -> None:
    with pytest.raises(UsageError, match=message):
        ActionInputs.from_environ({**REQUIRED, name: value})


def test_the_configuration_is_optional(tmp_path: Path) -> None:
    assert Config.load(tmp_path, ".github/rio.yml") == Config([], Limits())


def test_the_configuration_gives_validators_limits_and_passed_credentials(tmp_path: Path) -> None:
    (tmp_path / "rio.yml").write_text(
        "validators:\n  - python -m pytest -q\n  - [ruff, check, .]\n"
        "limits: {rounds: 7, cost_usd: 2.5}\npass_env: [PYPI_TOKEN, DEPLOY_KEY]\n"
        "secrets: [HOOK_URL]\nci_workflow: ci.yml\n"
    )
    config = Config.load(tmp_path, "rio.yml")
    assert config.ci_workflow == "ci.yml"
    assert config.validators == [["python", "-m", "pytest", "-q"], ["ruff", "check", "."]]
    assert (config.limits.rounds, config.limits.cost_usd) == (7, 2.5)
    assert config.pass_env == ("DEPLOY_KEY", "PYPI_TOKEN")
    assert config.secrets == ("HOOK_URL",)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("validators: [[]]\n", "each validator"),
        ("limits: {rounds: many}\n", "rio.yml"),
        ("limits: {speed: 1}\n", "unknown limit"),
        ("pass_env: [GITHUB_TOKEN]\n", "may not name GITHUB_TOKEN"),
        ("pass_env: [ANTHROPIC_API_KEY]\n", "may not name ANTHROPIC_API_KEY"),
        ("pass_env: [AWS_BEARER_TOKEN_BEDROCK]\n", "may not name AWS_BEARER_TOKEN_BEDROCK"),
        ("pass_env: ['A B']\n", "environment variable names"),
        ("secrets: HOOK_URL\n", "secrets is a list of environment variable names"),
        ("model: x\n", "unknown key"),
        ("- a list\n", "must be a mapping"),
        ("validators: [\n", "cannot read"),
        ("validators: ['pytest \"unclosed']\n", "No closing quotation"),
        ("validators: python -m pytest\n", "validators must be a list"),
        ("limits: {1: 2}\n", "rio.yml"),
        ("ci_workflow: CI\n", "ci_workflow must be the file name of a workflow"),
        ("ci_workflow: ../ci.yml\n", "ci_workflow must be the file name of a workflow"),
        ("ci_workflow: [ci.yml]\n", "ci_workflow must be the file name of a workflow"),
    ],
)
def test_a_bad_configuration_says_what_is_wrong(tmp_path: Path, text: str, message: str) -> None:
    (tmp_path / "rio.yml").write_text(text)
    with pytest.raises(UsageError, match=message):
        Config.load(tmp_path, "rio.yml")


def test_a_retention_of_zero_days_says_nothing_and_counts_as_unset() -> None:
    """Local runners (act) pass GITHUB_RETENTION_DAYS=0; GitHub's own never do."""
    zero = ActionInputs.from_environ({**REQUIRED, "GITHUB_RETENTION_DAYS": "0"})
    unset = ActionInputs.from_environ(REQUIRED)
    assert zero.runner_retention_days is None and zero == unset


# --- the job's state directory (seal_state_dir) -----------------------------------------------


def sealing(tmp_path: Path, mode: int, cell_user: str) -> ActionInputs:
    temp = tmp_path / "runner-temp"
    (temp / "rio").mkdir(parents=True)  # left open by someone: sealing closes it again
    (temp / "rio").chmod(0o755)
    temp.chmod(mode)
    return ActionInputs.from_environ(
        {
            **REQUIRED,
            "RUNNER_TEMP": str(temp),
            "RIO_CELL_USER": cell_user,
            "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md"),
        }
    )


def test_the_state_directory_is_the_harness_alone_and_runner_temp_closed_to_others(
    tmp_path: Path,
) -> None:
    env = sealing(tmp_path, 0o755, "rio-cell")

    seal_state_dir(env)

    assert stat.S_IMODE(env.state_dir.stat().st_mode) == 0o700
    assert stat.S_IMODE(env.runner_temp.stat().st_mode) == 0o750
    assert not (tmp_path / "summary.md").exists()  # nothing to warn about


@pytest.mark.parametrize("cell_user", ["rio-cell", "none"])
def test_a_runner_temp_everyone_may_write_is_left_as_it_is_and_said(
    tmp_path: Path, cell_user: str
) -> None:
    """A shared temporary folder (``/tmp``) is not the job's to close; where Cells are to
    run as a user of their own, the log and the step summary say what stays open."""
    env = sealing(tmp_path, 0o1777, cell_user)

    seal_state_dir(env)

    assert stat.S_IMODE(env.state_dir.stat().st_mode) == 0o700
    assert stat.S_IMODE(env.runner_temp.stat().st_mode) == 0o1777
    summary = tmp_path / "summary.md"
    if cell_user == "none":
        assert not summary.exists()
    else:
        assert "every user may write" in summary.read_text()


@pytest.mark.parametrize(
    ("value", "kept", "warned"),
    [
        ("5", 5, False),
        ("1", 1, False),
        ("0", 3, True),
        ("-2", 3, True),
        ("two", 3, True),
        ("true", 3, True),
        ("1.5", 3, True),
        ("[3]", 3, True),
    ],
)
def test_keep_generations_is_a_whole_number_of_at_least_one_else_a_warning(
    tmp_path: Path, value: str, kept: int, warned: bool
) -> None:
    (tmp_path / "rio.yml").write_text(f"keep_generations: {value}\n")
    config = Config.load(tmp_path, "rio.yml")
    assert config.keep_generations == kept
    assert bool(config.problems) is warned
    if warned:
        (problem,) = config.problems
        assert problem.startswith("rio.yml: keep_generations must be a whole number of at least 1")
        assert problem.endswith("the default, 3, applies")


def test_the_ids_a_step_is_given_are_whole_numbers(tmp_path: Path) -> None:
    environ = {
        "GITHUB_EVENT_NAME": "issues",
        "GITHUB_EVENT_PATH": str(tmp_path / "event.json"),
        "GITHUB_REPOSITORY": "octo/demo",
        "GITHUB_TOKEN": "t",
        "GITHUB_WORKSPACE": str(tmp_path),
        "RUNNER_TEMP": str(tmp_path),
    }
    env = ActionInputs.from_environ(
        {
            **environ,
            "GITHUB_REPOSITORY_ID": "123",
            "RIO_ARTIFACT_ID": "77",
            "RIO_ARTIFACT_NAME": "n",
        }
    )
    assert (env.repository_id, env.artifact_id, env.artifact_name) == (123, 77, "n")
    assert ActionInputs.from_environ(environ).repository_id is None
    with pytest.raises(UsageError, match="RIO_ARTIFACT_ID must be a whole number, got '7x'"):
        ActionInputs.from_environ({**environ, "RIO_ARTIFACT_ID": "7x"})
