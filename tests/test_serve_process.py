"""``alignir serve`` as a process: it binds 127.0.0.1 on the port it prints, turns the admin
endpoints on from $ALIGNIR_ADMIN_TOKEN, and on SIGTERM finishes the requests in flight before it
exits (a BM25-only index: no model to load)."""
from __future__ import annotations

import json
import signal
import socket
import time
from urllib.parse import urlsplit

import pytest

# `alignir serve` in a child process: end to end (scripts/test.sh --fast leaves it out)
pytestmark = pytest.mark.e2e

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from serve_helpers import ServeProcess, build_tiny, call  # noqa: E402


@pytest.fixture(scope="module")
def bm25_index(tmp_path_factory, tiny_model):
    root = tmp_path_factory.mktemp("serve-bm25")
    return build_tiny(root / "idx", tiny_model, root / "cache", legs=["bm25"])


def test_loopback_admin_from_the_environment(bm25_index):
    srv = ServeProcess("--index", str(bm25_index), env={"ALIGNIR_ADMIN_TOKEN": "tok"})
    try:
        assert urlsplit(srv.url).hostname == "127.0.0.1"
        srv.wait_ready()
        info = call(srv.url, "GET", "/info")[1]
        assert info["admin"] is True and info["legs"] == ["bm25"] and info["modes"] == ["bm25"]
        status, err, _ = call(srv.url, "GET", "/search?q=light%20plants")  # hybrid: no such legs here
        assert status == 400 and "legs" in err["error"] and "Traceback" not in err["error"]
        status, body, _ = call(srv.url, "DELETE", "/documents", {"ids": ["d0"]}, {"Authorization": "Bearer tok"})
        assert status == 200
        hits = call(srv.url, "GET", "/search?q=light%20plants%20stock%20market&mode=bm25&k=50")[1]["hits"]
        assert [h["id"] for h in hits] == ["d1"]  # d0 (light, plants) is gone
    finally:
        assert srv.stop() == 0


def test_sigterm_drains_requests_in_flight(bm25_index):
    srv = ServeProcess("--index", str(bm25_index))
    try:
        srv.wait_ready()
        parts = urlsplit(srv.url)
        body = json.dumps({"q": "stock market wind tunnel proteins", "mode": "bm25", "k": 3}).encode()
        sock = socket.create_connection((parts.hostname, parts.port), timeout=30)
        sock.sendall(f"POST /search HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {len(body)}\r\n\r\n".encode() + body[:10])
        time.sleep(0.3)  # the request is in flight: its head is read, its body not yet
        srv.proc.send_signal(signal.SIGTERM)
        time.sleep(0.5)
        assert srv.proc.poll() is None  # still draining
        with pytest.raises(OSError):  # no new connection is taken meanwhile
            call(srv.url, "GET", "/healthz", timeout=2)
        sock.sendall(body[10:])
        data = b""
        while not data.endswith(b"}"):
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
        sock.close()
        head, _, payload = data.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200"), head
        assert len(json.loads(payload)["hits"]) == 3
        assert srv.proc.wait(timeout=30) == 0
    finally:
        srv.stop()
