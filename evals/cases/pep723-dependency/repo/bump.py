# /// script
# requires-python = ">=3.11"
# dependencies = []
# ///
"""Print the next version: ``uv run --script bump.py VERSION major|minor|patch``."""
import sys

import semver


def bump(version, part):
    """``version`` (semantic versioning) with ``part`` bumped."""
    parsed = semver.Version.parse(version)
    steps = {"major": parsed.bump_major, "minor": parsed.bump_minor, "patch": parsed.bump_patch}
    return str(steps[part]())


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[2] not in ("major", "minor", "patch"):
        sys.exit("usage: bump.py VERSION major|minor|patch")
    print(bump(sys.argv[1], sys.argv[2]))
