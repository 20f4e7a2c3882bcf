"""Hidden check for wrong-exception-type: run in the working copy after the Session ends."""

import os
import subprocess
import sys

sys.path.insert(0, os.getcwd())
import settings

failures = []
for bad in ("http", "", "0", "-1", "65536", "70000", "80.5"):
    try:
        settings.parse_port(bad)
        failures.append(f"parse_port({bad!r}) did not raise")
    except settings.SettingsError as exc:
        if bad and bad not in str(exc):
            failures.append(f"parse_port({bad!r}): the message {str(exc)!r} does not name it")
    except Exception as exc:  # the point: anything else is the bug
        failures.append(f"parse_port({bad!r}) raised {type(exc).__name__}, not SettingsError")
for good, port in (("1", 1), ("8080", 8080), ("65535", 65535)):
    if settings.parse_port(good) != port:
        failures.append(f"parse_port({good!r}) != {port}")
if not issubclass(settings.SettingsError, ValueError):
    failures.append("SettingsError must stay a ValueError")
try:
    settings.load({"PORT": "x"})
    failures.append("load with PORT=x did not raise")
except settings.SettingsError:
    pass
if settings.load({"HOST": "h"}) != {"host": "h", "port": 8000}:
    failures.append("load() defaults changed")
tests = subprocess.run([sys.executable, "-m", "unittest", "-q"], capture_output=True, text=True)
if tests.returncode != 0:
    failures.append("the visible tests fail:\n" + tests.stderr[-2000:])
print("\n".join(failures) or "check passed")
sys.exit(1 if failures else 0)
