import json
import unittest
from wsgiref.util import setup_testing_defaults

from app import application


def get(path):
    """Call the WSGI application for GET ``path``: (status code, decoded JSON body)."""
    environ = {"PATH_INFO": path, "REQUEST_METHOD": "GET"}
    setup_testing_defaults(environ)
    seen = {}

    def start_response(status, headers):
        seen["status"] = int(status.split()[0])

    body = b"".join(application(environ, start_response))
    return seen["status"], json.loads(body)


class AppTest(unittest.TestCase):
    def test_health(self):
        self.assertEqual(get("/health"), (200, {"ok": True}))

    def test_an_item(self):
        self.assertEqual(get("/items/1"), (200, {"id": 1, "name": "kettle"}))


if __name__ == "__main__":
    unittest.main()
