import unittest

from report import line, report


class ReportTest(unittest.TestCase):
    def test_line(self):
        self.assertEqual(line("Oslo", 41), "Oslo: 5.0 C")

    def test_report(self):
        self.assertEqual(report([("A", 32), ("B", 50)]), "A: 0.0 C\nB: 10.0 C")


if __name__ == "__main__":
    unittest.main()
