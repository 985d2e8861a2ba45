"""Shared by the tests of ``alignir serve``: a tiny HTTP client (the standard library's), tiny
indexes, and a server started as a subprocess on a free loopback port."""
from __future__ import annotations

import http.client
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from conftest import TINY_CORPUS

IDS = [f"d{i}" for i in range(len(TINY_CORPUS))]
RECORDS = [{"_id": i, "title": "", "text": t} for i, t in zip(IDS, TINY_CORPUS)]


def call(url: str, method: str, path: str, body: Any = None, headers: dict[str, str] | None = None,
         raw: bytes | None = None, timeout: float = 60.0) -> tuple[int, Any, dict[str, str]]:
    """(status, parsed JSON or text, headers) of one request to the server at ``url``."""
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    sent = dict(headers or {})
    if data is not None:
        sent.setdefault("Content-Type", "application/json")
    try:
        conn.request(method, path, body=data, headers=sent)
        resp = conn.getresponse()
        payload = resp.read()
        kind = resp.getheader("Content-Type") or ""
        parsed = json.loads(payload) if "json" in kind else payload.decode("utf-8", "replace")
        return resp.status, parsed, {k.lower(): v for k, v in resp.getheaders()}
    finally:
        conn.close()


def build_tiny(path: Path, tiny_model: Any, cache: Path, legs: list[str] | None = None) -> Path:
    """TINY_CORPUS indexed with the tiny model, its texts stored."""
    from alignir.retrieval.config import SparseConfig
    from alignir.retrieval.indexer import build_index

    build_index(RECORDS, path, model="tiny", sparse=SparseConfig(doc_k=24, query_m=5), loaded=tiny_model,
                cache_dir=cache, progress=False, store_text=True, legs=legs)
    return path


LISTENING = re.compile(r"listening on (http://\S+)")


class ServeProcess:
    """``alignir serve ARGS`` in a subprocess; ``url`` once it listens."""

    def __init__(self, *args: str, env: dict[str, str] | None = None, timeout: float = 120.0) -> None:
        cmd = [sys.executable, "-m", "alignir.retrieval.cli", "serve", "--port", "0", *args]
        self.proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                                     env={**os.environ, **(env or {})})
        self.lines: list[str] = []
        deadline = time.monotonic() + timeout
        self.url = ""
        while not self.url:
            line = self.proc.stderr.readline()
            if not line:
                raise RuntimeError("alignir serve exited: " + "".join(self.lines))
            self.lines.append(line)
            found = LISTENING.search(line)
            if found:
                self.url = found.group(1)
            if time.monotonic() > deadline:
                raise RuntimeError("alignir serve did not start: " + "".join(self.lines))

    def wait_ready(self, timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if call(self.url, "GET", "/readyz")[0] == 200:
                    return
            except OSError:
                pass
            time.sleep(0.05)
        raise RuntimeError("alignir serve did not become ready")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
        try:
            return self.proc.wait(timeout=60)
        finally:
            self.proc.stderr.close()


def announce_body(url: str, path: str, length: int, sent: bytes = b"", timeout: float = 30.0) -> tuple[int, str]:
    """POST ``path`` announcing a body of ``length`` bytes but sending only ``sent``; the status
    and body the server answers (a body-size guard answers before the body comes)."""
    import socket

    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=timeout) as sock:
        sock.sendall(f"POST {path} HTTP/1.1\r\nHost: {parts.hostname}\r\nContent-Type: application/json\r\n"
                     f"Content-Length: {length}\r\n\r\n".encode() + sent)
        data = b""
        while b"\r\n\r\n" not in data or len(data.split(b"\r\n\r\n", 1)[1]) < _length(data):
            chunk = sock.recv(65536)
            if not chunk:
                break
            data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), body.decode("utf-8", "replace")


def _length(data: bytes) -> int:
    for line in data.split(b"\r\n\r\n", 1)[0].split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return int(line.split(b":", 1)[1])
    return 0
