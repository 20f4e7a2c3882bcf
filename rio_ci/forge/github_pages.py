"""GitHub's JSON read once per job: conditional GETs through PyGithub's requester, each
answer kept with its ``ETag`` (docs/github.md "Requests, rate limits and storage").

- ``get``: the first read of a URL is a plain GET; every later one sends ``If-None-Match``
  with the kept ``ETag``, and GitHub's ``304 Not Modified`` — which does not count against
  the rate limit — returns the kept answer.
- ``listing``: a list, page after page as the ``Link`` header leads, each page read so.
- ``look``: a list's stamp after a conditional GET of the page a new item would land on
  (the last page, or the one after it when the last is full). The stamp moves whenever an
  answer of the list's pages changed, whoever read it, so a caller that compares it with
  the stamp it saw last misses nothing; a re-scan after a change reads the unchanged pages
  for free.
- ``keep``: the answers are written to a file after every change and read back by the next
  step of the same job (``$RUNNER_TEMP/rio``, which no Cell can read), so the finish step
  asks only about what changed since the run step read it.

A refused read (4xx, 5xx) raises PyGithub's ``GithubException`` (``UnknownObjectException``
for a 404), as PyGithub's own calls do; ``GitHubForge`` turns it into a ``ForgeError``.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import urllib.parse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from github.Requester import Requester

PER_PAGE = 100
KEPT_MAX_BYTES = 16 * 1024 * 1024  # a kept file larger than this is not read back


@dataclass
class Kept:
    etag: str
    data: Any
    next: str | None  # the URL of the following page (``Link: <...>; rel="next"``)


def next_page(link: str | None) -> str | None:
    """The ``rel="next"`` URL of a ``Link`` header, or None."""
    for part in (link or "").split(","):
        target, _, params = part.partition(";")
        if 'rel="next"' in params.replace(" ", ""):
            return target.strip().removeprefix("<").removesuffix(">")
    return None


def with_query(url: str, params: dict[str, Any] | None) -> str:
    """``url`` with ``params`` added to its query (sorted, so one list has one URL)."""
    if not params:
        return url
    split = urllib.parse.urlsplit(url)
    query = sorted(
        [*urllib.parse.parse_qsl(split.query), *((k, str(v)) for k, v in params.items())]
    )
    return urllib.parse.urlunsplit(split._replace(query=urllib.parse.urlencode(query)))


def following(url: str) -> str:
    """The page after ``url`` (its ``page`` parameter + 1): where a new item of a list
    whose last page is full would land. GitHub's Link header names no page past the last."""
    split = urllib.parse.urlsplit(url)
    query = dict(urllib.parse.parse_qsl(split.query))
    query["page"] = str(int(query.get("page", "1")) + 1)
    return urllib.parse.urlunsplit(
        split._replace(query=urllib.parse.urlencode(sorted(query.items())))
    )


class Pages:
    """The answers read through ``requester``, kept (and, with ``store``, written there)."""

    def __init__(self, requester: Requester, store: Path | None = None) -> None:
        self.requester, self.store = requester, store
        self.kept: dict[str, Kept] = {}
        self.lists: dict[str, list[str]] = {}  # a list's first URL → its pages as last read
        self.notes: dict[str, Any] = {}  # what else the forge keeps for the next step
        self.changed_at: dict[str, int] = {}  # a URL → when its answer last changed
        self._changes = itertools.count(1)
        self._load()

    def get(self, url: str) -> tuple[Any, bool]:
        """The answer for ``url`` and whether it differs from the one kept (True the first
        time)."""
        known = self.kept.get(url)
        headers = {"If-None-Match": known.etag} if known else None
        status, answer, text = self.requester.requestJson("GET", url, headers=headers)
        if status == 304 and known is not None:
            return known.data, False
        data = json.loads(text) if text else None
        if status >= 400:
            raise Requester.createException(status, answer, data if isinstance(data, dict) else {})
        changed = known is None or known.data != data
        if changed:
            self.changed_at[url] = next(self._changes)
        etag = answer.get("etag")
        if etag:
            self.kept[url] = Kept(etag, data, next_page(answer.get("link")))
            self._save()
        return data, changed

    def listing(self, url: str, key: str | None = None) -> list[Any]:
        """Every item of the list at ``url`` (``key``: the list inside each page's object,
        as in ``{"total_count": ..., "artifacts": [...]}``)."""
        items: list[Any] = []
        pages: list[str] = []
        page: str | None = url
        while page is not None and page not in pages:
            data, _ = self.get(page)
            pages.append(page)
            found = data.get(key) if key and isinstance(data, dict) else data
            items += found if isinstance(found, list) else []
            kept = self.kept.get(page)
            page = kept.next if kept else None
        self.lists[url] = pages
        self._save()
        return items

    def look(self, url: str, key: str | None = None) -> int:
        """The stamp of the list at ``url`` after a conditional look at the page a new item
        would land on (the whole list is read when it never was)."""
        pages = self.lists.get(url) or []
        fresh = not pages or pages[-1] not in self.kept
        if fresh:
            self.listing(url, key)
            pages = self.lists[url]
        last = pages[-1]
        data = self.kept[last].data
        found = data.get(key) if key and isinstance(data, dict) else data
        growth = following(last) if isinstance(found, list) and len(found) >= PER_PAGE else last
        if not (fresh and growth == last):  # a list read just now needs no second look
            self.get(growth)
        return max(self.changed_at.get(p, 0) for p in [*pages, growth])

    # -- the file the next step of the job reads ----------------------------------------------

    def _save(self) -> None:
        if self.store is None:
            return
        data = {
            "pages": {u: [k.etag, k.data, k.next] for u, k in self.kept.items()},
            "lists": self.lists,
            "notes": self.notes,
        }
        partial = self.store.with_name(self.store.name + ".partial")
        with contextlib.suppress(OSError):  # a cache: losing it costs requests, nothing else
            partial.write_text(json.dumps(data))
            os.replace(partial, self.store)

    def note(self, name: str, value: Any) -> None:
        self.notes[name] = value
        self._save()

    def _load(self) -> None:
        if self.store is None:
            return
        try:
            if self.store.stat().st_size > KEPT_MAX_BYTES:
                return
            data = json.loads(self.store.read_text())
        except (OSError, ValueError):
            return
        if not isinstance(data, dict):
            return
        for url, entry in (data.get("pages") or {}).items():
            if isinstance(entry, list) and len(entry) == 3 and isinstance(entry[0], str):
                self.kept[str(url)] = Kept(
                    entry[0], entry[1], entry[2] if isinstance(entry[2], str) else None
                )
        for url, pages in (data.get("lists") or {}).items():
            if isinstance(pages, list) and all(isinstance(p, str) for p in pages):
                self.lists[str(url)] = pages
        notes = data.get("notes")
        self.notes = notes if isinstance(notes, dict) else {}
