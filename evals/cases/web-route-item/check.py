"""Hidden check for web-route-item: serves app.py over real HTTP on 127.0.0.1 and asks it."""

import json
import os
import subprocess
import sys
import threading
import unittest
import urllib.error
import urllib.request
from pathlib import Path
from wsgiref.simple_server import WSGIRequestHandler, make_server

sys.path.insert(0, os.getcwd())
from app import application


class Quiet(WSGIRequestHandler):
    def log_message(self, *args):
        pass


failures = []
with make_server("127.0.0.1", 0, application, handler_class=Quiet) as server:
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_port}"
    cases = [
        ("/health", 200, {"ok": True}),
        ("/items/1", 200, {"id": 1, "name": "kettle"}),
        ("/items/2", 200, {"id": 2, "name": "teapot"}),
        ("/items/99", 404, None),
        ("/items/abc", 404, None),
        ("/items/", 404, None),
        ("/nothing", 404, None),
    ]
    for path, status, body in cases:
        try:
            with urllib.request.urlopen(base + path, timeout=10) as reply:
                got, data = reply.status, json.loads(reply.read())
        except urllib.error.HTTPError as exc:
            got, data = exc.code, json.loads(exc.read())
        if got != status or (body is not None and data != body):
            failures.append(f"GET {path}: {got} {data}, want {status} {body}")
    server.shutdown()
suite = unittest.defaultTestLoader.discover(".", pattern="test_app.py")
if suite.countTestCases() < 3:
    failures.append("test_app.py has no new test (an unknown id answering 404)")
if "404" not in Path("test_app.py").read_text():
    failures.append("no test in test_app.py checks a 404")
tests = subprocess.run([sys.executable, "-m", "unittest", "-q"], capture_output=True, text=True)
if tests.returncode != 0:
    failures.append("the visible tests fail:\n" + tests.stderr[-2000:])
print("\n".join(failures) or "check passed")
sys.exit(1 if failures else 0)
