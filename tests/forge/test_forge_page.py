"""The local forge's pages (rio_ci/forge/page.py): the Markdown rio-ci writes rendered as a code
host shows it, and nothing a user, the model or a Cell wrote becoming HTML or a link."""

from __future__ import annotations

from rio_ci.forge.page import page, render
from rio_ci.reports import markdown as md


def test_the_subset_rio_ci_writes_is_rendered() -> None:
    text = "\n".join(
        [
            "<!-- rio-ci:progress -->",
            "### rio-ci: running · #3 Fix it",
            "",
            "**Next: you.** Review [#4](file:///f/pull/4.html); `/rio stop` ends.",
            "",
            "| cell | what |",
            "| --- | --- |",
            "| 1 | `cmd grep a\\|b` |",
            "",
            "- **cell 1** (x): cut off",
            "  > resolved",
            "",
            "<details><summary>recent output</summary>",
            "",
            "```text",
            "<b>out</b>",
            "```",
            "",
            "</details>",
        ]
    )
    out = render(text)
    assert "rio-ci:progress" not in out
    assert out.startswith("<h3>rio-ci: running · #3 Fix it</h3>")
    assert '<strong>Next: you.</strong> Review <a href="file:///f/pull/4.html">#4</a>' in out
    assert "<td><code>cmd grep a|b</code></td>" in out  # an escaped pipe stays in its cell
    assert "<li><strong>cell 1</strong> (x): cut off<blockquote>" in out
    assert "<details><summary>recent output</summary>" in out
    assert "<pre><code>&lt;b&gt;out&lt;/b&gt;</code></pre>" in out


def test_untrusted_text_stays_text() -> None:
    hostile = "<script>alert(1)</script> [x](javascript:alert(1)) [y](http://evil) @admin"
    out = render(f"{md.quoted(hostile)}\n\n{md.plain(hostile)}\n\n{md.code(hostile)}")
    assert "<script" not in out and 'href="javascript' not in out
    # A quote is Markdown (GitHub links an http URL in it too); plain words and code are text.
    assert out.count("<a ") == 1 and 'href="http://evil"' in out
    whole = page("<t>", [('a"b', "<c>", "x")])
    assert "<title>&lt;t&gt;</title>" in whole and "id=a&quot;b" in whole
