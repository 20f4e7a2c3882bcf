"""Hidden check for cause-in-other-module: money.to_cents is right, invoice.py untouched."""

import os
import subprocess
import sys
from decimal import Decimal

sys.path.insert(0, os.getcwd())
from money import to_cents

failures = []
for amount, want in (
    ("0.125", "0.13"),
    ("2.675", "2.68"),
    ("1.005", "1.01"),
    ("-2.675", "-2.68"),
    ("0.124", "0.12"),
    (3, "3.00"),
    (Decimal("19.999"), "20.00"),
    ("123456789.125", "123456789.13"),
):
    got = to_cents(amount)
    if got != Decimal(want) or str(got) != want:
        failures.append(f"to_cents({amount!r}) = {got!r}, want {want}")
untouched = subprocess.run(
    ["git", "diff", "--quiet", "HEAD", "--", "invoice.py", "test_invoice.py"]
)
if untouched.returncode != 0:
    failures.append("invoice.py or test_invoice.py changed: the cause is elsewhere")
tests = subprocess.run([sys.executable, "-m", "unittest", "-q"], capture_output=True, text=True)
if tests.returncode != 0:
    failures.append("the visible tests fail:\n" + tests.stderr[-2000:])
print("\n".join(failures) or "check passed")
sys.exit(1 if failures else 0)
