"""Untrusted text in GitHub Markdown: quoted, fenced or set in code, so that nothing a user,
the model or a Cell wrote can close the collapsed section, table or block it sits in, mention
anyone, or reach a terminal raw (the comment is copied into the step summary and logs)."""

from __future__ import annotations

import re

from rio_ci.core.text import clip, escape_control


def quoted(text: str) -> str:
    """Untrusted text as a Markdown quote: clipped, control characters escaped, no mentions,
    no HTML (a ``</details>`` in it cannot close the section it sits in)."""
    clipped = escape_control(clip(text.strip(), 1500)).replace("@", "@\u200b")
    clipped = clipped.replace("&", "&amp;").replace("<", "&lt;")
    return "\n".join(f"> {line}" for line in clipped.splitlines())


def one_line(text: str) -> str:
    return escape_control(" ".join(text.split()))[:2000]


def cell_text(text: str) -> str:
    return escape_control(text.replace("|", "\\|").replace("\n", " "))[:200]


def code(text: str) -> str:
    """Untrusted text as an inline code span in a table: one line, escaped, no backtick to
    end the span, no pipe to end the cell (a code span shows mentions and HTML as text)."""
    flat = escape_control(" ".join(text.split())).replace("`", "'").replace("|", "\\|")
    return f"`{clip(flat, 120)}`"


def link(url: str, text: str | None = None) -> str:
    """A link we made (the forge returned it), named ``text`` (our own words) or its URL:
    shown only when it is a plain URL."""
    if re.fullmatch(r"(https?|file)://[A-Za-z0-9._~:/?#@!$&'()*+,;=%-]+", url):
        return f"[{cell_text(text or url)}]({url})"
    return code(url)


def fence(info: str, text: str) -> str:
    """Untrusted text in a fenced block no line of it can close (control characters
    escaped)."""
    body = re.sub(r"`(?=`)", "`\u200b", escape_control(text))
    return f"```{info}\n{body}\n```"


_SPECIAL = re.compile(r"([\\`*_\[\]<>#|~!])")


def plain(text: str, limit: int = 200) -> str:
    """Untrusted text as plain words inline (a heading, a table cell, a sentence): one line,
    clipped, control characters escaped, every Markdown and HTML character set as text, no
    mentions."""
    flat = escape_control(" ".join(clip(text, limit).split()))
    return _SPECIAL.sub(r"\\\1", flat.replace("&", "&amp;")).replace("@", "@\u200b")


def number(value: float) -> str:
    """A count as people read it: ``2,000,000``."""
    return f"{int(value):,}"


def dollars(value: float) -> str:
    """Money as people read it: ``$10.00``; an amount under a cent keeps four places
    (``$0.0042``), so a cheap round is not shown as free."""
    if 0 < abs(value) < 0.01:
        return f"${value:.4f}"
    return f"${value:,.2f}"
