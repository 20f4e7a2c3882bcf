import unittest

from units import fahrenheit_to_celsius


class UnitsTest(unittest.TestCase):
    def test_freezing(self):
        self.assertEqual(fahrenheit_to_celsius(32), 0)

    def test_boiling(self):
        self.assertEqual(fahrenheit_to_celsius(212), 100)


if __name__ == "__main__":
    unittest.main()
