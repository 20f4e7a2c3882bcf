"""Pictures in issues and comments: found, fetched, checked by content, bounded (docs/github.md).

What is fetched: Markdown images ``![alt](url)`` and ``<img src="url">`` in the issue body and
in comments that reach the Inbox, at most ``MAX_IMAGES`` per message, ``MAX_BYTES`` each; one
whose base64 form is over the provider's limit for a picture (rio_ci/model/pictures.py; the
default provider's, from the providers table) is left out with a note, when fetched and again
when stored, since no request could carry it.

From where (everything else is refused without a request):

- the repository's own host (``GITHUB_SERVER_URL``) and the API host (``GITHUB_API_URL``), with
  their own scheme: the only hosts that ever see the job's token (``Authorization`` header);
- GitHub's attachment stores, over https only and without the token (their URLs are signed):
  ``private-user-images.githubusercontent.com``, ``user-images.githubusercontent.com`` and the
  public asset bucket ``github-production-user-asset-6210df.s3.amazonaws.com``, which
  ``github.com/user-attachments/assets/…`` and ``…/assets/…`` links redirect to.

At most ``MAX_REDIRECTS`` redirects are followed, each checked against the same list (the
token is dropped on a hop to a store). No proxy, no cookies. A picture is accepted by its
first bytes only (PNG, JPEG, GIF, WebP), never by its name or ``Content-Type``. Every refusal
or failure becomes a note ("image 2 not fetched: host not allowed"), never an error.
"""

from __future__ import annotations

import hashlib
import http.client
import re
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rio_ci.core.errors import Rejected
from rio_ci.model import pictures, providers
from rio_ci.untrusted.redirects import SurfaceRedirects, TooManyRedirects, follow

if TYPE_CHECKING:
    from rio_ci.session.session import Session

__all__ = [
    "MAX_BYTES",
    "MAX_IMAGES",
    "Fetched",
    "Image",
    "ImageFetcher",
    "image_refs",
    "kept",
    "media_type_of",
    "notes_text",
]

GOAL_IMAGES = "goal_images"  # the watermark naming the goal's pictures

MAX_IMAGES = 8
MAX_BYTES = 5 * 1024 * 1024
MAX_REDIRECTS = 3
TIMEOUT = 10.0  # per request: a host that does not answer costs the job little
STORES = frozenset(
    {
        "private-user-images.githubusercontent.com",
        "user-images.githubusercontent.com",
        "github-production-user-asset-6210df.s3.amazonaws.com",
    }
)
_MARKDOWN = re.compile(r"!\[([^\]\n]{0,300})\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_IMG = re.compile(r"<img\b[^>]*?\bsrc\s*=\s*(?:\"([^\"]+)\"|'([^']+)')[^>]*>", re.IGNORECASE)
_ALT = re.compile(r"\balt\s*=\s*(?:\"([^\"]*)\"|'([^']*)')", re.IGNORECASE)
_MAGIC: tuple[tuple[str, Callable[[bytes], bool]], ...] = (
    ("image/png", lambda b: b.startswith(b"\x89PNG\r\n\x1a\n")),
    ("image/jpeg", lambda b: b.startswith(b"\xff\xd8\xff")),
    ("image/gif", lambda b: b[:6] in (b"GIF87a", b"GIF89a")),
    ("image/webp", lambda b: b[:4] == b"RIFF" and b[8:12] == b"WEBP"),
)


@dataclass(frozen=True)
class Image:
    digest: str  # sha256 of the bytes, hex
    media_type: str
    data: bytes
    alt: str


@dataclass
class Fetched:
    """What one message's pictures gave: the images (in order) and a note per refusal."""

    images: list[Image] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def image_refs(text: str) -> list[tuple[str, str]]:
    """``(url, alt)`` of every Markdown image and ``<img>`` tag in ``text``, in order, each
    URL once."""
    found: list[tuple[int, str, str]] = [
        (m.start(), m.group(2), m.group(1)) for m in _MARKDOWN.finditer(text)
    ]
    for m in _IMG.finditer(text):
        said = _ALT.search(m.group(0))
        alt = (said[1] or said[2] or "") if said else ""
        found.append((m.start(), m.group(1) or m.group(2), alt))
    seen: set[str] = set()
    refs = []
    for _, url, alt in sorted(found):
        if url not in seen:
            seen.add(url)
            refs.append((url, alt))
    return refs


def media_type_of(data: bytes) -> str | None:
    """The picture type ``data`` starts with, or None."""
    return next((kind for kind, test in _MAGIC if test(data)), None)


class ImageFetcher:
    """Fetches a message's pictures under the rules of the module docstring."""

    def __init__(self, server_url: str, api_url: str, token: str | None) -> None:
        self.token = token
        self.token_origins = {_origin(server_url), _origin(api_url)} - {None}
        self._opener = urllib.request.build_opener(
            urllib.request.ProxyHandler({}), SurfaceRedirects()
        )

    def allowed(self, url: str) -> bool:
        origin = _origin(url)
        if origin is None:
            return False
        return origin in self.token_origins or (origin[0] == "https" and origin[1] in STORES)

    def fetch(self, text: str) -> Fetched:
        """The pictures ``text`` refers to, and a note for each one not taken."""
        result = Fetched()
        for number, (url, alt) in enumerate(image_refs(text), start=1):
            if number > MAX_IMAGES:
                result.notes.append(
                    f"image {number} not fetched: more than {MAX_IMAGES} images in one message"
                )
                continue
            try:
                data = self._get(url)
            except _Refused as refused:
                result.notes.append(f"image {number} not fetched: {refused}")
                continue
            kind = media_type_of(data)
            if kind is None:
                result.notes.append(
                    f"image {number} not fetched: not a PNG, JPEG, GIF or WebP picture"
                )
                continue
            too_large = _too_large(data)
            if too_large is not None:
                result.notes.append(f"image {number} left out: {too_large}")
                continue
            digest = hashlib.sha256(data).hexdigest()
            result.images.append(Image(digest, kind, data, alt[:300]))
        return result

    def _get(self, url: str) -> bytes:
        try:
            response = follow(
                self._opener,
                self._request(url),
                lambda target, _status: self._request(target),
                redirects=MAX_REDIRECTS,
                timeout=TIMEOUT,
                codes=range(300, 400),
            )
            with response:
                return _bounded(response)
        except urllib.error.HTTPError as error:
            raise _Refused(f"HTTP {error.code}") from None
        except TooManyRedirects:
            raise _Refused(f"more than {MAX_REDIRECTS} redirects") from None
        except (urllib.error.URLError, OSError, http.client.HTTPException, ValueError) as exc:
            raise _Refused(f"fetch failed ({type(exc).__name__})") from None

    def _request(self, url: str) -> urllib.request.Request:
        """The request for one hop: refused unless its host is allowed, with the token only
        for the repository's own host and the API's."""
        if not self.allowed(url):
            raise _Refused("host not allowed")
        request = urllib.request.Request(url, headers={"User-Agent": "rio-ci"})
        if self.token and _origin(url) in self.token_origins:
            request.add_header("Authorization", f"Bearer {self.token}")
        return request


def kept(session: Session, fetched: Fetched) -> dict[str, Any]:
    """Store ``fetched``'s pictures in ``session`` (by digest, within ``storage_bytes``) and
    return what a message carries about them: ``images`` (digest, media type, alt) and
    ``image_notes`` (why a picture is missing); empty when the message had none."""
    images: list[dict[str, Any]] = []
    notes = list(fetched.notes)
    for image in fetched.images:
        name = image.alt or image.digest[:12]
        too_large = _too_large(image.data)
        if too_large is not None:
            notes.append(f"image {name} left out: {too_large}")
            continue
        try:
            session.store_image(image.digest, image.media_type, image.data)
        except Rejected as refused:
            notes.append(f"image {name} not stored: {refused}")
            continue
        images.append({"digest": image.digest, "media_type": image.media_type, "alt": image.alt})
    return {
        **({"images": images} if images else {}),
        **({"image_notes": notes} if notes else {}),
    }


def notes_text(fetched: Fetched) -> str:
    """The notes as lines to append to a goal (empty when none)."""
    return "".join(f"\n[{note}]" for note in fetched.notes)


class _Refused(Exception):
    pass


def _too_large(data: bytes) -> str | None:
    """Why no request may carry ``data`` (its base64 form is over the provider's limit for
    one picture), or None."""
    return pictures.too_large(pictures.encoded_size(len(data)), providers.picture_limits())


def _bounded(response: Any) -> bytes:
    data: bytes = response.read(MAX_BYTES + 1)
    if len(data) > MAX_BYTES:
        raise _Refused(f"larger than {MAX_BYTES // (1024 * 1024)} MB")
    return data


def _origin(url: str) -> tuple[str, str, int] | None:
    try:
        parts = urllib.parse.urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return None
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.username:
        return None
    return parts.scheme, parts.hostname.lower(), port or (443 if parts.scheme == "https" else 80)
