"""Hidden check for pep723-dependency: the script declares semver and bumps correctly."""

import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

failures = []
source = Path("bump.py").read_text()
block = re.search(r"^# /// script$\n((?:^#(?: .*)?$\n)+?)^# ///$", source, re.M)
if block is None:
    print("bump.py has no PEP 723 block")
    sys.exit(1)
meta = tomllib.loads("".join(line[2:] + "\n" for line in block.group(1).splitlines()))
if not any(re.match(r"semver\b", dep) for dep in meta.get("dependencies", [])):
    failures.append(f"semver is not declared: {meta.get('dependencies')}")
uv = shutil.which("uv")
if uv is None:
    print("uv is not on PATH")
    sys.exit(1)
for args, want in (
    (("1.2.3", "major"), "2.0.0"),
    (("1.2.3", "minor"), "1.3.0"),
    (("1.2.3", "patch"), "1.2.4"),
    (("1.9.9", "minor"), "1.10.0"),
):
    done = subprocess.run(
        [uv, "run", "--quiet", "--script", "bump.py", *args],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if done.returncode != 0 or done.stdout.strip() != want:
        failures.append(
            f"bump.py {' '.join(args)}: exit {done.returncode}, "
            f"{done.stdout.strip()!r} {done.stderr.strip()[-300:]}, want {want}"
        )
bad = subprocess.run(
    [uv, "run", "--quiet", "--script", "bump.py", "not-a-version", "minor"],
    capture_output=True,
    text=True,
    timeout=300,
)
if bad.returncode == 0:
    failures.append("bump.py accepted an invalid version")
tests = subprocess.run([sys.executable, "-m", "unittest", "-q"], capture_output=True, text=True)
if tests.returncode != 0 or "skipped" in tests.stderr:
    failures.append("the visible tests fail or were skipped:\n" + tests.stderr[-2000:])
print("\n".join(failures) or "check passed")
sys.exit(1 if failures else 0)
