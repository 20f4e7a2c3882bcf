"""What rio-ci assumes of the runner images is data with sources (rio_ci/github/runners.json),
and the run step's report reads it (docs/github.md, "The runner"). The report on real
runner users is in tests/run/test_runners.py; here its parts, without a job."""

from __future__ import annotations

import re

import pytest

from rio_ci.github.runner import image_of, minimum_git, runners, sudo_line
from rio_ci.run.confinement.sudo import SudoFound

SOURCE = re.compile(r"https://(github\.com|git-scm\.com)/\S+")


def facts(value: object, path: str = "") -> list[tuple[str, dict[str, object]]]:
    """Every object of the data that states a version: (where, the object)."""
    found: list[tuple[str, dict[str, object]]] = []
    if isinstance(value, dict):
        if "version" in value or "since" in value:
            found.append((path, value))
        for key, inner in value.items():
            found += facts(inner, f"{path}/{key}")
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            found += facts(inner, f"{path}/{index}")
    return found


def test_every_fact_about_an_image_names_the_page_it_comes_from() -> None:
    data = runners()
    stated = facts(data)
    assert len(stated) >= 10  # sudo, git and Python for each image, git's needs
    for where, fact in stated:
        assert SOURCE.fullmatch(str(fact.get("source", ""))), where
    for name, image in data["images"].items():
        assert SOURCE.fullmatch(image["readme"]), name
        assert {"sudo", "git", "python"} <= set(image), name
    assert data["labels"]["ubuntu-latest"]["image"] in data["images"]
    assert SOURCE.fullmatch(data["environment"]["source"])


def test_the_minimum_git_is_the_newest_feature_rio_ci_calls() -> None:
    needs = runners()["git"]["needs"]
    newest = max(tuple(map(int, need["since"].split("."))) for need in needs)
    assert minimum_git() == newest == (2, 36, 0)
    for image in runners()["images"].values():  # every supported image passes
        assert tuple(map(int, image["git"]["version"].split("."))) >= minimum_git()


@pytest.mark.parametrize(
    ("environ", "said"),
    [
        (
            {"ImageOS": "ubuntu26", "ImageVersion": "20260817.108.1"},
            "ubuntu-26.04 (image 20260817.108.1)",
        ),
        ({"ImageOS": "ubuntu24"}, "ubuntu-24.04"),
        (
            {"ImageOS": "win25", "ImageVersion": "1"},
            "win25, an image rio-ci does not list (image 1)",
        ),
        ({}, "self-hosted (no ImageOS)"),
    ],
    ids=["ubuntu-26.04", "no-version", "unlisted", "self-hosted"],
)
def test_the_image_is_named_from_the_variables_the_image_sets(
    environ: dict[str, str], said: str
) -> None:
    assert image_of(environ)[0] == said


def test_a_sudo_other_than_the_image_ships_is_said_so() -> None:
    image = runners()["images"]["ubuntu26"]
    classic = SudoFound("/usr/bin/sudo", "sudo", "1.9.17p2")  # switched back to sudo.ws
    rs = SudoFound("/usr/bin/sudo", "sudo-rs", "0.2.13-0ubuntu1")

    assert sudo_line(rs, image) == "sudo-rs 0.2.13-0ubuntu1"
    assert sudo_line(classic, image) == "classic sudo 1.9.17p2 (the image's sudo is sudo-rs)"
    assert sudo_line(SudoFound(None, None), image) == "no sudo"
    assert sudo_line(classic, None) == "classic sudo 1.9.17p2"
