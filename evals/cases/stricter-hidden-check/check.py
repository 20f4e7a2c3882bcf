"""Hidden check for stricter-hidden-check: the docstring's contract, not just the one test."""

import os
import re
import subprocess
import sys

sys.path.insert(0, os.getcwd())
from slug import slugify

failures = []
for title, want in (
    ("Hello World", "hello-world"),
    ("  Hello,   World!  ", "hello-world"),
    ("Crème brûlée", "creme-brulee"),
    ("C++ & Python 3", "c-python-3"),
    ("a--b__c", "a-b-c"),
    ("", ""),
    ("!!!", ""),
    ("Ünïcödé Çafé", "unicode-cafe"),
    ("2024: A Year", "2024-a-year"),
):
    got = slugify(title)
    if got != want:
        failures.append(f"slugify({title!r}) = {got!r}, want {want!r}")
for title in ("Straße über Ärger", "日本語 text", "tab\tand\nnewline"):
    got = slugify(title)
    if not re.fullmatch(r"(?:[a-z0-9]+(?:-[a-z0-9]+)*)?", got):
        failures.append(f"slugify({title!r}) = {got!r} is not lowercase ASCII words and hyphens")
tests = subprocess.run([sys.executable, "-m", "unittest", "-q"], capture_output=True, text=True)
if tests.returncode != 0:
    failures.append("the visible tests fail:\n" + tests.stderr[-2000:])
print("\n".join(failures) or "check passed")
sys.exit(1 if failures else 0)
