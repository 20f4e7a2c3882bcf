import shutil
import subprocess
import unittest

UV = shutil.which("uv")


def bump(*args):
    """Run bump.py the way its users do: as a PEP 723 script under uv."""
    if UV is None:
        raise AssertionError("uv is not on PATH: install it (https://docs.astral.sh/uv/)")
    return subprocess.run([UV, "run", "--quiet", "--script", "bump.py", *args],
                          capture_output=True, text=True, timeout=300)


class BumpTest(unittest.TestCase):
    def test_minor(self):
        done = bump("1.2.3", "minor")
        self.assertEqual(done.returncode, 0, done.stderr)
        self.assertEqual(done.stdout.strip(), "1.3.0")


if __name__ == "__main__":
    unittest.main()
