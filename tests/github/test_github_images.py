"""Pictures in issues and comments (docs/github.md): which are fetched, from where, how they
are checked and stored, and that they reach the model. Against the GitHub fake on 127.0.0.1
(its host is allowed because the allow-list is derived from the API URL) and a second listener
that stands for every other host: it must never be contacted."""

from __future__ import annotations

import base64
import hashlib
import struct
import threading
import zlib
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from action_job import Repository, commented, labeled
from fakes.github_api import FakeGitHub

from rio_ci.core.limits import Limits
from rio_ci.github.images import (
    MAX_BYTES,
    MAX_IMAGES,
    Fetched,
    Image,
    ImageFetcher,
    image_refs,
    kept,
)
from rio_ci.session.session import Session
from rio_ci.session.settings import Settings
from tests.fakes.anthropic_api import FakeAnthropic
from tests.kit import Patch, cmd_cell, note_cell


def png(width: int = 2, height: int = 1) -> bytes:
    """A real, minimal PNG."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    rows = b"".join(b"\x00" + b"\xff\x00\x00" * width for _ in range(height))
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


class Elsewhere:
    """Another host: records every request it gets (there must be none)."""

    def __init__(self) -> None:
        self.hits: list[str] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.hits.append(self.path)
                data = png()
                self.send_response(200)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.02,))

    def __enter__(self) -> Elsewhere:
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(5)


@pytest.fixture
def elsewhere() -> Iterator[Elsewhere]:
    with Elsewhere() as server:
        yield server


def fetcher(gh: FakeGitHub) -> ImageFetcher:
    return ImageFetcher("https://github.test", gh.api_url, gh.token)


def asset(gh: FakeGitHub, name: str) -> str:
    return f"{gh.api_url}/user-attachments/assets/{name}"


def test_markdown_images_and_img_tags_are_found_once_each_in_order() -> None:
    text = (
        'See ![the crash](https://github.com/user-attachments/assets/a1 "title") and\n'
        "<img width=300 alt='second' src=\"https://github.com/user-attachments/assets/b2\">\n"
        "again ![dup](https://github.com/user-attachments/assets/a1), a [link](https://x.test/c)"
    )
    assert image_refs(text) == [
        ("https://github.com/user-attachments/assets/a1", "the crash"),
        ("https://github.com/user-attachments/assets/b2", "second"),
    ]


def test_only_allowed_hosts_over_https_and_the_token_only_to_github(gh: FakeGitHub) -> None:
    f = fetcher(gh)
    assert f.allowed("https://github.test/user-attachments/assets/x")
    assert f.allowed("https://private-user-images.githubusercontent.com/1/2.png?jwt=x")
    assert f.allowed("https://user-images.githubusercontent.com/1/2.png")
    assert not f.allowed("http://private-user-images.githubusercontent.com/1/2.png")
    assert not f.allowed("https://evil.test/x.png")
    assert not f.allowed("https://github.test@evil.test/x.png")
    assert not f.allowed("file:///etc/passwd")
    assert not f.allowed("https://raw.githubusercontent.com/o/r/main/x.png")


def test_a_message_s_pictures_are_fetched_checked_and_refused_with_notes(
    gh: FakeGitHub, elsewhere: Elsewhere
) -> None:
    shot = png()
    gh.attachments["shot"] = (shot, "image/png")
    gh.attachments["fake"] = (b"just text, named x.png\n", "image/png")
    gh.attachments["huge"] = (b"\x89PNG\r\n\x1a\n" + b"\0" * MAX_BYTES, "image/png")
    gh.attachment_redirects["away"] = f"{elsewhere.url}/signed.png"
    text = "\n".join(
        [
            f"![screenshot]({asset(gh, 'shot')})",
            f'<img src="{elsewhere.url}/x.png">',
            f"![x.png]({asset(gh, 'fake')})",
            f"![moved]({asset(gh, 'away')})",
            f"![big]({asset(gh, 'huge')})",
            f"![gone]({asset(gh, 'missing')})",
        ]
    )
    got = fetcher(gh).fetch(text)
    assert [(i.media_type, i.alt, i.data) for i in got.images] == [
        ("image/png", "screenshot", shot)
    ]
    assert got.notes == [
        "image 2 not fetched: host not allowed",
        "image 3 not fetched: not a PNG, JPEG, GIF or WebP picture",
        "image 4 not fetched: host not allowed",
        "image 5 not fetched: larger than 5 MB",
        "image 6 not fetched: HTTP 404",
    ]
    assert elsewhere.hits == []  # never contacted, not even through the redirect
    sent = [r for r in gh.requests if r.path.startswith("/user-attachments/")]
    assert all(r.headers.get("authorization") == f"Bearer {gh.token}" for r in sent)


def test_a_picture_over_the_providers_limit_once_encoded_is_left_out_when_fetched_and_stored(
    tmp_path: Path, gh: FakeGitHub
) -> None:
    """4 MiB is under the 5 MB download bound but 5.3 MB in base64, which no request may
    carry: a note, not a picture (and not a stored picture, should one come from elsewhere)."""
    large = b"\x89PNG\r\n\x1a\n" + b"\0" * (4 * 2**20 - 8)
    gh.attachments["large"] = (large, "image/png")
    gh.attachments["shot"] = (png(), "image/png")
    got = fetcher(gh).fetch(f"![a]({asset(gh, 'large')}) ![b]({asset(gh, 'shot')})")
    assert [i.alt for i in got.images] == ["b"]
    assert got.notes == [
        "image 1 left out: 5.3 MB once encoded, over the provider's 5 MB limit for one picture"
    ]
    session = Session.create(tmp_path / "s.db", "g", Settings(cwd=str(tmp_path)))
    try:
        digest = hashlib.sha256(large).hexdigest()
        carried = kept(session, Fetched([Image(digest, "image/png", large, "big")]))
        assert carried == {
            "image_notes": [
                "image big left out: 5.3 MB once encoded, over the provider's 5 MB limit "
                "for one picture"
            ]
        }
        assert session.image(digest) is None
    finally:
        session.close()


def test_at_most_eight_pictures_per_message(gh: FakeGitHub) -> None:
    for number in range(MAX_IMAGES + 2):
        gh.attachments[f"p{number}"] = (png(number + 1), "image/png")
    text = " ".join(f"![{n}]({asset(gh, f'p{n}')})" for n in range(MAX_IMAGES + 2))
    got = fetcher(gh).fetch(text)
    assert len(got.images) == MAX_IMAGES
    assert got.notes == [
        f"image {MAX_IMAGES + 1} not fetched: more than {MAX_IMAGES} images in one message",
        f"image {MAX_IMAGES + 2} not fetched: more than {MAX_IMAGES} images in one message",
    ]


def test_pictures_are_stored_once_by_digest_within_storage_bytes(
    tmp_path: Path, gh: FakeGitHub
) -> None:
    gh.attachments["shot"] = (png(), "image/png")
    session = Session.create(tmp_path / "s.db", "g", Settings(cwd=str(tmp_path)))
    try:
        text = f"![a]({asset(gh, 'shot')}) and again <img src='{asset(gh, 'shot')}?x=1'>"
        carried = kept(session, fetcher(gh).fetch(text))
        (digest,) = {i["digest"] for i in carried["images"]}
        stored = list(session.events(kinds=("image_stored",)))
        assert len(stored) == 1 and stored[0]["digest"] == digest
        assert session.image(digest) == ("image/png", base64.b64encode(png()).decode())
        # a picture that would take the Session past storage_bytes is a note, not an error
        gh.attachments["big"] = (png(400, 400), "image/png")
        small = Session.create(
            tmp_path / "small.db",
            "g",
            Settings(
                cwd=str(tmp_path), limits=Limits.from_dict({"storage_bytes": session.size_bytes()})
            ),
        )
        try:
            refused = kept(small, fetcher(gh).fetch(f"![big]({asset(gh, 'big')})"))
            assert "images" not in refused
            (note,) = refused["image_notes"]
            assert note.startswith("image big not stored: it would take the Session past")
        finally:
            small.close()
    finally:
        session.close()


# --- end to end: an issue with a screenshot, in a real job, to the Messages API fake ------------


@pytest.mark.people(alice="write")
@pytest.mark.slow
def test_an_issue_with_a_png_gives_a_first_request_carrying_it(
    tmp_path: Path, gh: FakeGitHub, elsewhere: Elsewhere
) -> None:
    shot = png(3, 2)
    gh.attachments["shot"] = (shot, "image/png")
    body = (
        f"The button is red:\n\n![screenshot of the bug]({asset(gh, 'shot')})\n\n"
        f'<img src="{elsewhere.url}/tracker.png">'
    )
    repo = Repository(tmp_path, gh)
    issue = gh.add_issue("Fix the colour", body=body, labels=("rio",))
    job = repo.prepare("issues", labeled(issue))
    with FakeAnthropic() as model:
        done = note_cell("fixed", role="conclusion", result="success")
        model.reply_patch(Patch.at(0, 1).add(done).build(), text="Seen the picture.")
        job.env.update(
            RIO_MODEL="anthropic:claude-sonnet-5-5",
            ANTHROPIC_BASE_URL=model.base_url,
            ANTHROPIC_API_KEY="sk-ant-test-key",
        )
        step = repo.step(job)
        requests = model.requests
    assert step.code == 0, step.stdout + step.stderr
    (block,) = requests[0].images
    assert block["source"] == {
        "type": "base64",
        "media_type": "image/png",
        "data": base64.b64encode(shot).decode(),
    }
    text = requests[0].user_text
    assert "Picture 1, from the goal (screenshot of the bug):" in text
    assert "image 2 not fetched: host not allowed" in text  # the note is part of the goal
    assert elsewhere.hits == []
    # stored once, by digest, in the Session (read from the generation the finish step made)
    assert repo.step(job, "finish").code == 0
    stored = [e for e in repo.events(job) if e["kind"] == "image_stored"]
    assert [e["media_type"] for e in stored] == ["image/png"]


def run_job(repo: Repository, model: FakeAnthropic, event: str, payload: dict[str, Any]) -> None:
    """One job (run, finish, upload) with the Claude model of the Messages API fake."""
    job = repo.prepare(event, payload)
    job.env.update(
        RIO_MODEL="anthropic:claude-sonnet-5-5",
        ANTHROPIC_BASE_URL=model.base_url,
        ANTHROPIC_API_KEY="sk-ant-test-key",
    )
    step = repo.step(job)
    assert step.code == 0, step.stdout + step.stderr
    assert repo.step(job, "finish").code == 0
    repo.upload(job)


@pytest.mark.people(alice="write")
@pytest.mark.slow
def test_a_comment_s_picture_goes_with_the_turn_that_delivers_it(
    tmp_path: Path, gh: FakeGitHub
) -> None:
    shot = png(5, 5)
    gh.attachments["after"] = (shot, "image/png")
    repo = Repository(tmp_path, gh)
    issue = gh.add_issue("Fix the colour", body="It looks wrong.", labels=("rio",))
    with FakeAnthropic() as model:
        model.reply_patch(Patch.at(0, 1).add(note_cell("need a screenshot")).build())
        run_job(repo, model, "issues", labeled(issue))  # round 1, then it waits
        comment = gh.add_comment(issue, f"Here: ![after the click]({asset(gh, 'after')})")
        model.reply_patch(Patch.at(1, 2).add(cmd_cell("echo", "checked")).build())
        done = note_cell("fixed", role="conclusion", result="success")
        model.reply_patch(Patch.at(2, 3).add(done).build())
        run_job(repo, model, "issue_comment", commented(gh, comment))
        requests = model.requests
    assert len(requests) == 3
    assert requests[0].images == []
    (block,) = requests[1].images  # the Turn that delivers the comment
    assert block["source"]["data"] == base64.b64encode(shot).decode()
    assert "Picture 1, from message comment:" in requests[1].user_text
    assert requests[2].images == []  # the comment was consumed: no longer in the State
    # the picture comes after the cached prefix: the stable blocks carry no image
    content = requests[1].body["messages"][0]["content"]
    last_mark = max(i for i, b in enumerate(content) if b.get("cache_control"))
    assert all(b["type"] == "text" for b in content[: last_mark + 1])
