"""Hidden check for interrupted-rename: the rename is complete and consistent."""

import os
import re
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, os.getcwd())
failures = []
for name in ("units.py", "report.py"):
    if re.search(r"\bconvert\b", Path(name).read_text()):
        failures.append(f"{name} still mentions convert")
import report  # noqa: E402, F401 - it must import cleanly
import units  # noqa: E402

if hasattr(units, "convert"):
    failures.append("units.convert still exists")
if units.fahrenheit_to_celsius(-40) != -40:
    failures.append("fahrenheit_to_celsius(-40) != -40")
run = subprocess.run([sys.executable, "report.py"], capture_output=True, text=True)
if run.stdout != "Lisbon: 21.1 C\nOslo: 5.0 C\n":
    failures.append(f"python3 report.py printed {run.stdout!r} {run.stderr[-300:]}")
tests = subprocess.run([sys.executable, "-m", "unittest", "-q"], capture_output=True, text=True)
if tests.returncode != 0:
    failures.append("the visible tests fail:\n" + tests.stderr[-2000:])
print("\n".join(failures) or "check passed")
sys.exit(1 if failures else 0)
