"""Hidden check for off-by-one-chunks: run in the working copy after the Session ends."""

import os
import subprocess
import sys

sys.path.insert(0, os.getcwd())
from chunks import chunks

failures = []


def expect(got, want, what):
    if got != want:
        failures.append(f"{what}: got {got!r}, want {want!r}")


expect(chunks([1, 2, 3, 4, 5], 2), [[1, 2], [3, 4], [5]], "partial last chunk")
expect(chunks([1, 2, 3, 4], 2), [[1, 2], [3, 4]], "exact multiple")
expect(chunks([], 3), [], "empty input")
expect(chunks([1, 2], 5), [[1, 2]], "size larger than the input")
expect(chunks([1, 2, 3], 1), [[1], [2], [3]], "size 1")
expect(chunks("abcde", 2), ["ab", "cd", "e"], "a string")
try:
    chunks([1], 0)
    failures.append("size 0 did not raise ValueError")
except ValueError:
    pass
tests = subprocess.run([sys.executable, "-m", "unittest", "-q"], capture_output=True, text=True)
if tests.returncode != 0:
    failures.append("the visible tests fail:\n" + tests.stderr[-2000:])
print("\n".join(failures) or "check passed")
sys.exit(1 if failures else 0)
