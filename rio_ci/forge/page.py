"""The local forge's pages: the Markdown rio-ci writes (the progress comment, the pull
request's description), rendered to HTML as a code host shows it, for a browser.

Only the subset rio-ci writes is understood: headings, paragraphs, quotes, lists, tables,
fenced blocks (a ``mermaid`` one drawn by Mermaid's script when the browser can fetch it,
else shown as its source), collapsed sections (``<details>``), and inline code, links, bold
and emphasis. Every other character is text: anything HTML in it is escaped, a link is kept
only when it is a plain ``http(s)``/``file`` URL, and HTML comments (the comment's hidden
marker and metadata) are left out, as GitHub leaves them out.
"""

from __future__ import annotations

import html
import re

_LINK = re.compile(r"\[([^\]]*)\]\(((?:https?|file)://[^\s()]+)\)")
_ENTITY = re.compile(r"&(?:[a-zA-Z]+|#[0-9]+|#x[0-9a-fA-F]+);")
_ESCAPED = re.compile(r"\\([\\`*_\[\]<>#|~!{}()+.-])")
_OURS = ("<details>", "</details>", "<summary>", "</summary>")  # the tags rio-ci writes
MERMAID = "https://cdn.jsdelivr.net/npm/mermaid@11/dist/mermaid.esm.min.mjs"
STYLE = """
body { font: 14px/1.5 -apple-system, "Segoe UI", Helvetica, Arial, sans-serif; color: #1f2328;
  max-width: 980px; margin: 16px auto; padding: 0 16px; }
.box { border: 1px solid #d0d7de; border-radius: 6px; margin-bottom: 16px; }
.box > header { background: #f6f8fa; border-bottom: 1px solid #d0d7de; padding: 8px 16px;
  color: #59636e; }
.box > article { padding: 0 16px 8px; }
blockquote { margin: 0 0 12px; padding: 0 1em; color: #59636e; border-left: .25em solid #d0d7de; }
code { background: #eff1f3; border-radius: 4px; padding: .1em .3em; font-size: 85%; }
pre { background: #f6f8fa; border-radius: 6px; padding: 12px; overflow: auto; }
pre code { background: none; padding: 0; }
table { border-collapse: collapse; margin-bottom: 12px; display: block; overflow: auto; }
th, td { border: 1px solid #d0d7de; padding: 4px 10px; }
tr:nth-child(2n) { background: #f6f8fa; }
summary { cursor: pointer; }
a { color: #0969da; }
"""


def page(title: str, sections: list[tuple[str, str, str]]) -> str:
    """A whole page: ``title`` and, for each (anchor, caption, Markdown), a box named
    ``anchor`` with the caption in its header and the Markdown rendered under it."""
    boxes = "\n".join(
        f"<div class=box id={html.escape(anchor, quote=True)}>"
        f"<header>{html.escape(caption)}</header>"
        f"<article>\n{render(text)}\n</article></div>"
        for anchor, caption, text in sections
    )
    return (
        "<!doctype html>\n<html lang=en>\n<meta charset=utf-8>\n"
        f"<title>{html.escape(title)}</title>\n<style>{STYLE}</style>\n"
        f"<h1>{html.escape(title)}</h1>\n{boxes}\n"
        f'<script type=module>import m from "{MERMAID}"; m.initialize({{startOnLoad: true}});'
        "</script>\n</html>\n"
    )


def render(text: str) -> str:
    """``text`` (Markdown of the subset above) as HTML."""
    text = re.sub(r"<!--.*?-->", "", text, flags=re.S)
    lines = text.splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        i = _block(lines, i, out)
    return "\n".join(out)


def _block(lines: list[str], i: int, out: list[str]) -> int:
    """Render the block starting at line ``i``; the index after it."""
    line = lines[i]
    stripped = line.strip()
    if not stripped:
        return i + 1
    if stripped.startswith("```"):
        return _fence(lines, i, out)
    if stripped in _OURS or (stripped.startswith("<details><summary>") and "</summary>" in line):
        out.append(_our_tags(stripped))
        return i + 1
    heading = re.match(r"(#{1,6}) (.*)", stripped)
    if heading:
        level = len(heading.group(1))
        out.append(f"<h{level}>{inline(heading.group(2))}</h{level}>")
        return i + 1
    if stripped.startswith("- "):
        end = _run(lines, i, "- ", "  ")
        out.append(_list(lines[i:end]))
        return end
    for start, render_run in ((">", _quote), ("| ", _table)):
        if stripped.startswith(start):
            end = _run(lines, i, start)
            out.append(render_run(lines[i:end]))
            return end
    end = i
    while end < len(lines) and lines[end].strip() and not _starts_block(lines[end]):
        end += 1
    end = max(end, i + 1)
    out.append("<p>" + "<br>\n".join(inline(ln.strip()) for ln in lines[i:end]) + "</p>")
    return end


def _starts_block(line: str) -> bool:
    s = line.strip()
    return s.startswith(("```", "#", ">", "| ", "- ", "<details>", "</details>"))


def _run(lines: list[str], i: int, start: str, more: str | None = None) -> int:
    """The end of the run of lines from ``i`` that start with ``start`` (or, after the
    first, are indented by ``more``: a list item's continuation)."""
    end = i + 1
    while end < len(lines) and (
        lines[end].strip().startswith(start)
        or (more is not None and lines[end].startswith(more) and lines[end].strip())
    ):
        end += 1
    return end


def _our_tags(line: str) -> str:
    """A ``<details>``/``<summary>`` line rio-ci wrote: the summary's words escaped."""
    match = re.fullmatch(r"<details><summary>(.*)</summary>", line)
    if match:
        return f"<details><summary>{html.escape(match.group(1))}</summary>"
    return line


def _fence(lines: list[str], i: int, out: list[str]) -> int:
    info = lines[i].strip()[3:].strip()
    end = i + 1
    while end < len(lines) and lines[end].strip() != "```":
        end += 1
    body = html.escape("\n".join(lines[i + 1 : end]))
    if info == "mermaid":
        out.append(f"<pre class=mermaid>{body}</pre>")
    else:
        out.append(f"<pre><code>{body}</code></pre>")
    return end + 1


def _quote(lines: list[str]) -> str:
    inner = [re.sub(r"^\s*> ?", "", ln) for ln in lines]
    return "<blockquote>" + render("\n".join(inner)) + "</blockquote>"


def _list(lines: list[str]) -> str:
    """A list; an item's indented lines are rendered inside it."""
    items: list[list[str]] = []
    for line in lines:
        if line.strip().startswith("- ") and not line.startswith("  "):
            items.append([line.strip()[2:]])
        else:
            items[-1].append(line[2:])
    rendered = "".join(
        f"<li>{inline(first)}{render(chr(10).join(rest)) if rest else ''}</li>"
        for first, *rest in items
    )
    return f"<ul>{rendered}</ul>"


def _table(lines: list[str]) -> str:
    rows = [_cells(ln) for ln in lines if not re.fullmatch(r"\|( *:?-+:? *\|)+", ln.strip())]
    if not rows:
        return ""
    head = "".join(f"<th>{inline(c)}</th>" for c in rows[0])
    body = "".join(
        "<tr>" + "".join(f"<td>{inline(c)}</td>" for c in row) + "</tr>" for row in rows[1:]
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _cells(line: str) -> list[str]:
    """A table row's cells: split at pipes, not at escaped ones (``\\|``) or ones in code."""
    cells, current, in_code, k = [], "", False, 0
    text = line.strip().strip("|")
    while k < len(text):
        char = text[k]
        if char == "\\" and k + 1 < len(text) and text[k + 1] == "|":
            current, k = current + "\\|", k + 2
            continue
        if char == "`":
            in_code = not in_code
        if char == "|" and not in_code:
            cells.append(current.strip())
            current = ""
        else:
            current += char
        k += 1
    return [*cells, current.strip()]


def inline(text: str) -> str:
    """One line's inline Markdown: code spans, links, bold, emphasis; the rest is text."""
    parts = re.split(r"(`[^`]*`)", text)
    rendered = []
    for part in parts:
        if len(part) >= 2 and part.startswith("`") and part.endswith("`"):
            rendered.append(f"<code>{html.escape(part[1:-1].replace(chr(92) + '|', '|'))}</code>")
        else:
            rendered.append(_words(part))
    return "".join(rendered)


def _words(text: str) -> str:
    kept: list[str] = []

    def keep(value: str) -> str:
        kept.append(value)
        return f"\x00{len(kept) - 1}\x00"

    text = _ESCAPED.sub(lambda m: keep(html.escape(m.group(1))), text)
    text = _ENTITY.sub(lambda m: keep(m.group(0)), text)
    text = _LINK.sub(
        lambda m: keep(f'<a href="{html.escape(m.group(2))}">') + m.group(1) + keep("</a>"), text
    )
    text = html.escape(text, quote=False)
    text = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", text)
    text = re.sub(r"(?<![A-Za-z0-9])_(.+?)_(?![A-Za-z0-9])", r"<em>\1</em>", text)
    return re.sub(r"\x00([0-9]+)\x00", lambda m: kept[int(m.group(1))], text)
