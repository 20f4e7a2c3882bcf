"""A tiny JSON inventory service: a WSGI application, standard library only.

    GET /health        -> 200 {"ok": true}
    GET /items/<id>    -> 200 the item, or 404 {"error": ...} when there is no such item
"""
import json

ITEMS = {1: {"id": 1, "name": "kettle"}, 2: {"id": 2, "name": "teapot"}}


def _json(start_response, status, body):
    data = json.dumps(body).encode()
    start_response(status, [("Content-Type", "application/json"),
                            ("Content-Length", str(len(data)))])
    return [data]


def application(environ, start_response):
    path = environ.get("PATH_INFO", "/")
    if environ.get("REQUEST_METHOD", "GET") != "GET":
        return _json(start_response, "405 Method Not Allowed", {"error": "GET only"})
    if path == "/health":
        return _json(start_response, "200 OK", {"ok": True})
    if path.startswith("/items/"):
        item_id = path.split("/")[1]
        if item_id.isdigit() and int(item_id) in ITEMS:
            return _json(start_response, "200 OK", ITEMS[int(item_id)])
        return _json(start_response, "404 Not Found", {"error": f"no item {item_id}"})
    return _json(start_response, "404 Not Found", {"error": "not found"})


if __name__ == "__main__":
    from wsgiref.simple_server import make_server

    with make_server("127.0.0.1", 8000, application) as server:
        server.serve_forever()
