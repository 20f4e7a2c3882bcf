"""The model in a GitHub job: each round is a collapsed ``::group::`` of the job's log (with the
model's rationale and the Cells' output), and the job refuses a model whose cost it cannot
count unless the ``price`` input gives one (the same rules as ``rio-ci run``)."""

from __future__ import annotations

from pathlib import Path

import pytest
from action_job import Repository, conclude, labeled, script
from fakes.anthropic_api import FakeAnthropic
from fakes.github_api import FakeGitHub

from tests.kit import add, cmd_cell

pytestmark = pytest.mark.people(alice="write")


def test_each_round_is_a_group_in_the_job_log_with_the_output_as_committed(
    tmp_path: Path, gh: FakeGitHub
) -> None:
    repo = Repository(tmp_path, gh)
    _, job = repo.labeled_issue(
        script([add(cmd_cell("echo", "hello from round one"))], [conclude()]), title="Say hello"
    )

    log = job.steps[0].stderr
    assert "::group::rio-ci: round 1 (revision 0)" in log
    assert "::group::rio-ci: round 2 (revision 1)" in log
    first, second = log.index("round 1 (revision 0)"), log.index("round 2 (revision 1)")
    assert first < log.index("hello from round one") < second
    assert log.index("::endgroup::", first) < second  # round 1 is closed before round 2 opens
    assert "::endgroup::" in log[second:]  # and the last round is closed too
    assert job.finish.result["status"] == "succeeded"


def test_an_unpriced_model_is_refused_unless_the_price_input_gives_one(
    tmp_path: Path, gh: FakeGitHub
) -> None:
    repo = Repository(tmp_path, gh)
    issue = gh.add_issue("Anything", labels=("rio",))
    job = repo.prepare("issues", labeled(issue))
    job.env["RIO_MODEL"] = "anthropic:rio-test-unpriced-model"
    refused = repo.step(job)
    assert refused.code == 2
    assert "--price IN/OUT" in refused.stdout and "rio-test-unpriced-model" in refused.stdout

    job = repo.prepare("issues", labeled(issue))
    job.env.update(RIO_MODEL="anthropic:rio-test-unpriced-model", RIO_PRICE="not-a-price")
    assert repo.step(job).code == 2


def test_the_fallback_model_input_reaches_the_job_and_is_priced_like_the_model(
    tmp_path: Path, gh: FakeGitHub
) -> None:
    """``fallback-model`` → ``RIO_FALLBACK_MODEL``: an unpriced fallback is refused before
    any request, as an unpriced ``model`` is."""
    repo = Repository(tmp_path, gh)
    issue = gh.add_issue("Anything", labels=("rio",))
    job = repo.prepare("issues", labeled(issue))
    job.env["RIO_FALLBACK_MODEL"] = "anthropic:rio-test-unpriced-model"
    refused = repo.step(job)
    assert refused.code == 2
    assert "--fallback-model" in refused.stdout and "rio-test-unpriced-model" in refused.stdout


def test_a_typo_in_the_model_id_is_written_on_the_issue_with_the_nearest_ids(
    tmp_path: Path, gh: FakeGitHub
) -> None:
    """An error before the first round reaches the maintainer where they look: the issue's
    progress comment, an ``::error::`` annotation and the step summary, with what to do."""
    repo = Repository(tmp_path, gh)
    issue = gh.add_issue("Anything", labels=("rio",))
    job = repo.prepare("issues", labeled(issue))
    job.env["RIO_MODEL"] = "claude-sonet-5-5"  # bare: taken as anthropic:claude-sonet-5-5
    assert repo.step(job).code == 2
    assert repo.step(job, "finish").code == 1
    said = "unknown model 'claude-sonet-5-5'; the nearest known: claude-sonnet-5-5"
    (comment,) = repo.progress_comments(issue)
    shown = [line for line in comment["body"].splitlines() if line and "<!--" not in line]
    assert shown[0] == f"### rio-ci: error · #{issue} Anything"
    assert shown[1].startswith(f"**Next: you.** rio-ci stopped: {said}")
    assert shown[1].endswith(
        "Fix the action's `model` input (docs/models.md), then comment here to continue."
    )
    assert f"::error::rio-ci: {said}" in job.run.stderr
    assert said in job.summary and "**Next: you.**" in job.summary


def test_a_bad_configuration_is_written_on_the_issue(tmp_path: Path, gh: FakeGitHub) -> None:
    repo = Repository(tmp_path, gh, files={".github/rio.yml": "validator: [true]\n"})
    issue = gh.add_issue("Anything", labels=("rio",))
    job = repo.job("issues", labeled(issue))
    assert job.run.code == 2
    (comment,) = repo.progress_comments(issue)
    assert (
        "**Next: you.** rio-ci stopped: .github/rio.yml: unknown key(s) validator."
        in (comment["body"])
    )
    assert "Fix .github/rio.yml on the default branch" in comment["body"]
    assert "::error::rio-ci: .github/rio.yml: unknown key(s) validator" in job.run.stderr
    assert "unknown key(s) validator" in job.summary


def test_a_refused_provider_request_is_written_on_the_issue(tmp_path: Path, gh: FakeGitHub) -> None:
    """Between rounds: the provider answers 401; the run ends, and the maintainer reads why
    and what to check on the issue, as an ``::error::`` and in the step summary."""
    repo = Repository(tmp_path, gh, secrets={"ANTHROPIC_API_KEY": "sk-revoked"})
    issue = gh.add_issue("Anything", labels=("rio",))
    with FakeAnthropic() as provider:
        provider.error(401, "authentication_error", "invalid x-api-key")
        job = repo.prepare("issues", labeled(issue))
        job.env.update(
            RIO_MODEL="anthropic:claude-sonnet-5-5", ANTHROPIC_BASE_URL=provider.base_url
        )
        repo.step(job)
        repo.step(job, "finish")
    (comment,) = repo.progress_comments(issue)
    (said,) = [line for line in comment["body"].splitlines() if line.startswith("**Next")]
    assert said.startswith("**Next: you.** The run failed: model error: ")
    assert (
        "invalid x-api-key" in said and "check the key (the action's `anthropic-api-key`)" in said
    )
    assert "::error::rio-ci: model error: " in job.run.stderr
    assert "check the key" in job.summary


def test_a_missing_key_is_written_on_the_issue(tmp_path: Path, gh: FakeGitHub) -> None:
    repo = Repository(tmp_path, gh)
    issue = gh.add_issue("Anything", labels=("rio",))
    job = repo.prepare("issues", labeled(issue))
    job.env["RIO_MODEL"] = "anthropic:claude-sonnet-5-5"
    job.env.pop("ANTHROPIC_API_KEY", None)
    assert repo.step(job).code != 0
    repo.step(job, "finish")
    (comment,) = repo.progress_comments(issue)
    (said,) = [line for line in comment["body"].splitlines() if line.startswith("**Next")]
    assert said.startswith("**Next: you.** rio-ci stopped: no Anthropic API key")
    assert "Set the repository secret the action's `anthropic-api-key` input reads" in said
    assert "::error::rio-ci: no Anthropic API key" in job.run.stderr
    assert "no Anthropic API key" in job.summary
