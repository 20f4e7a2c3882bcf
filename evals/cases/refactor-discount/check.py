"""Hidden check for refactor-discount: one home for the rules, and the same behaviour."""

import ast
import os
import subprocess
import sys
from pathlib import Path

sys.path.insert(0, os.getcwd())
failures = []


def original(total, code):  # the rules as the case ships them
    if code == "SAVE10":
        return total * 0.9
    if code == "HALF":
        return total * 0.5
    if code == "FIVEOFF":
        return max(0, total - 5)
    return total


try:
    import orders
    import pricing
except ImportError as exc:
    print(f"cannot import orders and pricing: {exc}")
    sys.exit(1)
codes = (None, "SAVE10", "HALF", "FIVEOFF", "UNKNOWN", "save10")
for code in codes:
    for total in (0, 3, 4.99, 25.0, 100.0):
        if abs(pricing.apply_discount(total, code) - original(total, code)) > 1e-9:
            failures.append(f"apply_discount({total}, {code!r}) changed")
    lines = [(2, 10.0), (3, 1.25)]
    if orders.order_total(lines, code) != round(original(23.75, code), 2):
        failures.append(f"order_total({lines}, {code!r}) changed")
    if orders.quote(3.3, 3, code) != round(original(3.3 * 3, code), 2):
        failures.append(f"quote(3.3, 3, {code!r}) changed")
source = Path("orders.py").read_text()
for rule in ("SAVE10", "HALF", "FIVEOFF", "0.9", "0.5"):
    if rule in source:
        failures.append(
            f"orders.py still holds the rule {rule!r}: the rules must live in pricing.py"
        )
calls = {
    n.func.id if isinstance(n.func, ast.Name) else getattr(n.func, "attr", "")
    for n in ast.walk(ast.parse(source))
    if isinstance(n, ast.Call)
}
if "apply_discount" not in calls:
    failures.append("orders.py does not call apply_discount")
tests = subprocess.run([sys.executable, "-m", "unittest", "-q"], capture_output=True, text=True)
if tests.returncode != 0:
    failures.append("the visible tests fail:\n" + tests.stderr[-2000:])
print("\n".join(failures) or "check passed")
sys.exit(1 if failures else 0)
