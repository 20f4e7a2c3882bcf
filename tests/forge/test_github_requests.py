"""What a Session's jobs cost GitHub, counted as GitHub counts (docs/github.md "Requests,
rate limits and storage"): every REST request but a conditional one answered 304 and the
artifact's blob download.

The jobs are the bench's (``rio_ci/commands/bench/github_jobs.py``): the real run step,
finish step, upload and prune step, in this process, against the tests' strict fake. The
bench's own loopback GitHub is held to the same counts here, request for request."""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest
from action_job import WAIT, Repository, commented, script
from fakes.github_api import FakeGitHub

from rio_ci.commands.bench.github_api import LoopbackGitHub
from rio_ci.commands.bench.github_jobs import Site, listen
from rio_ci.commands.bench.rate_limit import Counted
from rio_ci.github.contract import JOB_FILE
from rio_ci.github.prune import prune

pytestmark = pytest.mark.slow


def shape(counted: list[Counted], repo: str) -> list[str]:
    """The requests without what differs between two fakes: the repository's name and the
    ids they hand out."""
    return [
        re.sub(r"/1\d{3,5}\b", "/<id>", str(c).replace(f"/repos/{repo}", "/repos/<repo>"))
        for c in counted
    ]


def story(site: Site) -> list[list[Counted]]:
    """A label job, then three comments that wake the Session."""
    issue, label = site.label()
    return [label, *(site.comment(issue, f"also case {n}") for n in range(3))]


def test_the_bench_github_counts_a_sessions_jobs_as_the_tests_fake_does(tmp_path: Path) -> None:
    with FakeGitHub() as strict, LoopbackGitHub() as bench:
        expected = [shape(c, strict.repo) for c in story(Site(tmp_path / "strict", strict))]
        measured = [shape(c, bench.repo) for c in story(Site(tmp_path / "bench", bench))]
    assert measured == expected


def expect(counted: list[Counted], repo: str, wanted: list[str], what: str) -> None:
    """The requests of a job that counted are exactly ``wanted`` (in ``shape``), with a
    message listing what was made when they are not."""
    made = shape(counted, repo)
    listing = "\n  ".join(made)
    assert made == wanted, f"{what} made {len(made)} counted request(s):\n  {listing}"


LISTED = "GET /repos/<repo>/actions/artifacts?name=rio-session-1&per_page=100 → 200"
LABEL_JOB = [
    "GET /repos/<repo>/collaborators/alice/permission → 200",  # may the labeller steer?
    LISTED,  # the Session's generations: none
    "GET /repos/<repo>/issues/1 → 200",  # the goal
    "GET /repos/<repo>/issues/1/comments?per_page=100 → 200",  # the re-scan (the first look)
    "POST /repos/<repo>/issues/1/comments → 201",  # the progress comment
    "PATCH /repos/<repo>/issues/comments/<id> → 200",  # finish: the same comment, no look
]  # prune: fewer than keep_generations generations, nothing asked
WAKEUP_JOB = [
    "GET /repos/<repo>/collaborators/alice/permission → 200",  # may the commenter steer?
    LISTED,  # the Session's generations
    "GET /repos/<repo>/actions/runs/<id> → 200",  # the newest one's run: rio's own?
    "GET /repos/<repo>/actions/artifacts/<id>/zip → 302",  # its download (the blob is free)
    "GET /repos/<repo>/issues/1/comments?per_page=100 → 200",  # the re-scan (the first look)
    "POST /repos/<repo>/issues/comments/<id>/reactions → 201",  # eyes: the comment is read
    "PATCH /repos/<repo>/issues/comments/<id> → 200",  # the progress comment: running
    "PATCH /repos/<repo>/issues/comments/<id> → 200",  # finish: how the job ended
    LISTED,  # prune: the generation uploaded, verified
    "DELETE /repos/<repo>/actions/artifacts/<id> → 204",  # the one it supersedes
]


def test_a_label_job_and_a_comment_wakeup_make_only_the_requests_they_need(
    tmp_path: Path, gh: FakeGitHub
) -> None:
    """Each resource read once per job (the finish and prune steps reuse what the run step
    read: its conditional requests are answered 304), nothing read that the job does not
    use; a comment wake-up of one round makes at most 10 counted requests."""
    label, *wakeups = story(Site(tmp_path, gh))

    expect(label, gh.repo, LABEL_JOB, "the label job")
    # the fourth job: three generations before it, so one is superseded
    expect(wakeups[-1], gh.repo, WAKEUP_JOB, "the comment wake-up")
    assert len(wakeups[-1]) <= 10
    # the second and third jobs: fewer than 3 generations before them, prune asks nothing
    assert [shape(job, gh.repo) for job in wakeups[:2]] == [WAKEUP_JOB[:-2]] * 2


def test_no_job_reads_a_resource_twice_unless_it_asks_whether_it_changed(
    tmp_path: Path, gh: FakeGitHub
) -> None:
    site = Site(tmp_path, gh)
    issue, _ = site.label()
    before = len(gh.requests)
    site.comment(issue, "go on")
    reads: dict[str, list[bool]] = {}
    for req in gh.requests[before:]:
        if req.method == "GET" and req.path.startswith(f"/repos/{gh.repo}"):
            target = f"{req.path}?{sorted(req.query.items())}"
            reads.setdefault(target, []).append("if-none-match" in req.headers)
    again = {t: asked for t, asked in reads.items() if len(asked) > 1 and not all(asked[1:])}
    assert again == {}, "read again without If-None-Match"
    assert any(len(asked) > 1 for asked in reads.values())  # the later steps did read again


def test_listening_ten_minutes_costs_nothing_while_nothing_changes(
    tmp_path: Path, gh: FakeGitHub
) -> None:
    site = Site(tmp_path, gh)
    issue, _ = site.label()
    head = site.push_branch(f"rio/issue-{issue}")
    pull = gh.add_pull(f"rio/issue-{issue}", "Fix")
    unchanged = len(gh.not_modified)

    counted = listen(site, issue, pull, head)

    # the intake reads each list once; of the 20 looks that follow (the issue, the pull
    # request's 3 lists), the first reads the issue, and every other answer is a 304
    expect(
        counted,
        gh.repo,
        [
            "GET /repos/<repo>/issues/1/comments?per_page=100 → 200",
            f"GET /repos/<repo>/issues/{pull}/comments?per_page=100 → 200",
            f"GET /repos/<repo>/pulls/{pull}/comments?per_page=100 → 200",
            f"GET /repos/<repo>/pulls/{pull}/reviews?per_page=100 → 200",
            "GET /repos/<repo>/actions/runs?branch=rio%2Fissue-1&per_page=100&status=completed"
            " → 200",
            f"GET /repos/<repo>/commits/{head}/check-runs?per_page=100&status=completed → 200",
            "GET /repos/<repo>/issues/1 → 200",
        ],
        "ten minutes of listening",
    )
    assert len(gh.not_modified) - unchanged >= 20 * 4 - 1


# --- superseded generations ------------------------------------------------------------------


def kept(gh: FakeGitHub, issue: int = 1) -> list[int]:
    """The Session's artifacts GitHub keeps, oldest first."""
    return sorted(a["id"] for a in gh.artifacts.values() if a["name"] == f"rio-session-{issue}")


def test_after_20_jobs_a_session_keeps_keep_generations_and_the_newest(
    tmp_path: Path, gh: FakeGitHub
) -> None:
    site = Site(tmp_path, gh)
    issue, _ = site.label()
    uploads = []
    for n in range(2, 21):
        site.comment(issue, f"case {n}")
        uploads.append(site.envs[-1].run_id)
        assert len(kept(gh)) <= 3
    newest = kept(gh)
    assert len(newest) == 3
    runs = [gh.artifacts[a]["workflow_run"]["id"] for a in newest]
    assert runs == [int(r) for r in uploads[-3:]]  # the three newest jobs' generations
    assert len(gh.deleted) == 17 and all(a < min(newest) for a in gh.deleted)


@pytest.mark.parametrize(
    ("config", "keeps", "warning"),
    [
        ("keep_generations: 2\n", 2, None),
        ("keep_generations: 0\n", 3, "keep_generations must be a whole number of at least 1"),
        ("keep_generations: two\n", 3, "keep_generations must be a whole number of at least 1"),
    ],
)
def test_keep_generations_comes_from_the_configuration_and_a_bad_value_is_a_warning(
    tmp_path: Path, gh: FakeGitHub, config: str, keeps: int, warning: str | None
) -> None:
    site = Site(tmp_path, gh, files={".github/rio.yml": config})
    issue, _ = site.label()
    for n in range(2, 6):
        site.comment(issue, f"case {n}")
    assert len(kept(gh)) == keeps
    warned = [
        line
        for line in "".join(site.logs).splitlines()
        if line.startswith("::warning::") and "keep_generations" in line
    ]
    if warning is None:
        assert warned == []
    else:
        assert warned and all(warning in line and "the default, 3" in line for line in warned)


def test_keep_one_still_keeps_the_generation_the_job_verified_by_restoring_it(
    tmp_path: Path, gh: FakeGitHub
) -> None:
    """A restore verified the previous generation (its download unpacked and checked); the
    one just uploaded is only known to be listed. Until the next job has restored that one,
    the previous is never deleted."""
    site = Site(tmp_path, gh, files={".github/rio.yml": "keep_generations: 1\n"})
    issue, _ = site.label()
    for n in range(2, 5):
        site.comment(issue, f"case {n}")
        env = site.envs[-1]
        restored = json.loads((env.state_dir / JOB_FILE).read_text())["artifact_id"]
        (uploaded,) = [
            a for a, v in gh.artifacts.items() if str(v["workflow_run"]["id"]) == env.run_id
        ]
        assert kept(gh) == sorted([restored, uploaded])


def test_a_generation_the_listing_does_not_show_as_this_jobs_upload_deletes_nothing(
    tmp_path: Path, gh: FakeGitHub
) -> None:
    site = Site(tmp_path, gh)
    issue, _ = site.label()
    for n in range(2, 6):
        site.comment(issue, f"case {n}")
    env = site.envs[-1]
    before = kept(gh)
    oldest = before[0]  # uploaded by another run than this job's

    with site.quiet():
        named = replace(env, artifact_id=oldest, artifact_name=f"rio-session-{issue}")
        result = prune(named, site.forge(env, "prune"))

    assert result["status"] == "kept" and kept(gh) == before
    assert f"names run {gh.artifacts[oldest]['workflow_run']['id']}, not this one" in site.logs[-1]


def test_a_deletion_github_refuses_is_a_warning_never_the_end_of_a_job(
    tmp_path: Path, gh: FakeGitHub
) -> None:
    gh.tokens[gh.token].permissions = {
        "contents": "write",
        "issues": "write",
        "pull-requests": "write",
        "actions": "read",  # the stock permission before deleting was asked for
        "checks": "read",
    }
    site = Site(tmp_path, gh)
    issue, _ = site.label()
    for n in range(2, 6):
        site.comment(issue, f"case {n}")

    assert len(kept(gh)) == 5 and gh.deleted == []
    assert [r["status"] for r in site.results if r["step"] == "run"] == ["waiting"] * 5
    assert [r["status"] for r in site.results if r["step"] == "prune"][-1] == "pruned"
    warned = [line for line in site.logs[-1].splitlines() if line.startswith("::warning::")]
    assert len(warned) == 1 and "the rio job needs actions: write" in warned[0]


@pytest.mark.people(alice="write")
def test_the_prune_step_of_the_command_line_deletes_what_the_upload_superseded(
    repo: Repository, gh: FakeGitHub
) -> None:
    """``rio-ci action prune`` as the composite's last step runs it: after a job's upload,
    with the upload's artifact id; a job whose finish kept no Session prunes nothing."""
    issue, first = repo.labeled_issue(script(*[WAIT] * 6))
    steps = [repo.prune(first)]
    for n in range(4):
        job = repo.job("issue_comment", commented(gh, gh.add_comment(issue, f"case {n}")))
        steps.append(repo.prune(job))
    quiet = repo.job("issues", {"action": "edited", "issue": {"number": issue}})
    steps.append(repo.prune(quiet))

    assert [s.result["status"] for s in steps] == [*["pruned"] * 5, "ignored"]
    assert all(s.code == 0 for s in steps)
    assert len(kept(gh, issue)) == 3 and len(gh.deleted) == 2
