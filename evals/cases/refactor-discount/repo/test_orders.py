import unittest

from orders import order_total, quote


class OrdersTest(unittest.TestCase):
    def test_no_code(self):
        self.assertEqual(order_total([(2, 10.0), (1, 5.0)]), 25.0)

    def test_save10(self):
        self.assertEqual(order_total([(2, 10.0)], "SAVE10"), 18.0)

    def test_quote_half(self):
        self.assertEqual(quote(7.5, 2, "HALF"), 7.5)

    def test_fiveoff_never_negative(self):
        self.assertEqual(quote(1.0, 3, "FIVEOFF"), 0)


if __name__ == "__main__":
    unittest.main()
