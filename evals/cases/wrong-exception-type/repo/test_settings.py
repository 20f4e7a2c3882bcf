import unittest

from settings import SettingsError, load, parse_port


class ParsePortTest(unittest.TestCase):
    def test_a_valid_port(self):
        self.assertEqual(parse_port("8080"), 8080)

    def test_text_is_a_settings_error(self):
        with self.assertRaises(SettingsError):
            parse_port("http")

    def test_out_of_range_is_a_settings_error(self):
        with self.assertRaises(SettingsError):
            parse_port("70000")


class LoadTest(unittest.TestCase):
    def test_defaults(self):
        self.assertEqual(load({}), {"host": "127.0.0.1", "port": 8000})


if __name__ == "__main__":
    unittest.main()
