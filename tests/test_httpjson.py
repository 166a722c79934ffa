"""The one JSON-over-HTTP client, against a real server on loopback: each way of failing has its error."""

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from pdbgym import httpjson


class _Handler(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802
        if self.path == "/ok":
            self._answer(200, json.dumps({"hello": "world"}).encode())
        elif self.path == "/html":
            self._answer(200, b"<html>not json</html>")
        else:
            self._answer(503, b"overloaded " * 100)

    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self._answer(200, json.dumps({"echo": body, "auth": self.headers.get("Authorization")}).encode())

    def _answer(self, status, payload):
        self.send_response(status)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()


def test_get_and_post_decode_json_and_send_the_key(server):
    assert httpjson.request_json(server + "/ok") == {"hello": "world"}
    answer = httpjson.request_json(server + "/post", {"a": [1, 2]}, api_key="k")
    assert answer == {"echo": {"a": [1, 2]}, "auth": "Bearer k"}


def test_each_failure_has_its_own_error(server):
    with pytest.raises(httpjson.HttpStatusError) as status:
        httpjson.request_json(server + "/busy")
    assert status.value.status == 503 and len(status.value.detail) == 300
    with pytest.raises(httpjson.HttpNotJsonError):
        httpjson.request_json(server + "/html")
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    with pytest.raises(httpjson.HttpUnreachableError, match=str(port)):
        httpjson.request_json(f"http://127.0.0.1:{port}/", timeout_s=2)
