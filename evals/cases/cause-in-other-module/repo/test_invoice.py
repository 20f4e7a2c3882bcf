import unittest
from decimal import Decimal

from invoice import total


class InvoiceTest(unittest.TestCase):
    def test_whole_cents(self):
        self.assertEqual(total([(3, "0.05")], "0"), Decimal("0.15"))

    def test_a_half_cent_rounds_up(self):
        # 2.50 plus 7% tax is 2.675: half a cent, which rounds up to 2.68
        self.assertEqual(total([(1, "2.50")], "0.07"), Decimal("2.68"))


if __name__ == "__main__":
    unittest.main()
