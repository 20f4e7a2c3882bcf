import unittest

from chunks import chunks


class ChunksTest(unittest.TestCase):
    def test_the_last_chunk_may_be_shorter(self):
        self.assertEqual(chunks([1, 2, 3, 4, 5], 2), [[1, 2], [3, 4], [5]])

    def test_size_must_be_positive(self):
        with self.assertRaises(ValueError):
            chunks([1], 0)


if __name__ == "__main__":
    unittest.main()
