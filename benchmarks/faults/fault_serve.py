"""Hostile input against ``alignir serve`` (the ``serve`` part of benchmarks/faults/fault_campaign.py).

A copy of the index is served by ``alignir serve`` on 127.0.0.1; each case sends one hostile
request (malformed JSON, huge or odd k, unicode and lone surrogates, NUL bytes, 10 MB bodies with
and without a length, path-like document ids, deep nesting, oversized batches, slow clients that
hold connections open), then a probe search must still answer with the reference ranking.

A case is ``clear_error`` when the server refused with a one-line JSON error and a 4xx status,
fine when it answered correctly (e.g. a unicode query), ``silent_wrong`` when it answered 200 to
what it must refuse, answered 5xx, showed a traceback, or the probe's ranking changed or did not
come; ``data_lost`` when the served index's files changed (the API without admin never writes).

Result file: benchmarks/results/faults.json, through the campaign.
Command: python -m benchmarks.faults.fault_campaign --index INDEX --attacks serve
"""
from __future__ import annotations

import hashlib
import http.client
import json
import os
import select
import shutil
import socket
import sys
import time
from pathlib import Path
from typing import Any, Callable

from benchmarks.speed.bench_serve import Server

PROBE = {"q": "computer information retrieval", "k": 10, "mode": "bm25"}
MODEL_PROBE = {"q": "computer information retrieval", "k": 10, "mode": "hybrid"}


def _files(index: Path) -> dict[str, str]:
    return {str(p.relative_to(index)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(index.rglob("*")) if p.is_file()}


class _Served(Server):
    """The served index, with raw HTTP exchanges for hostile requests."""

    def request(self, method: str, path: str, raw: bytes | None = None, headers: dict | None = None,
                timeout: float = 60) -> tuple[int, str]:
        conn = http.client.HTTPConnection(self.host, self.port, timeout=timeout)
        try:
            conn.request(method, path, body=raw, headers={"Content-Type": "application/json", **(headers or {})})
            resp = conn.getresponse()
            return resp.status, resp.read().decode("utf-8", "replace")
        except OSError as e:
            return -1, f"{type(e).__name__}: {e}"
        finally:
            conn.close()

    def raw_exchange(self, *pieces: bytes, timeout: float = 30) -> tuple[int, str]:
        """Send bytes as they are (a head announcing more than is sent, a chunked body...), piece
        by piece, and stop sending once the server has answered; the answer."""
        got = b""
        with socket.create_connection((self.host, self.port), timeout=timeout) as sock:
            try:
                for piece in pieces:
                    sock.sendall(piece)
                    if select.select([sock], [], [], 0.05)[0]:
                        break  # answered (refused) before the rest was sent
                while True:
                    chunk = sock.recv(65536)
                    if not chunk:
                        break
                    got += chunk
                    if b"\r\n\r\n" in got and got.rstrip().endswith(b"}"):
                        break
            except OSError:
                pass
        head, _, body = got.partition(b"\r\n\r\n")
        parts = head.split()
        return (int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else -1), body.decode("utf-8", "replace")



def _ids(body: str) -> list[str]:
    return [h["id"] for h in json.loads(body)["hits"]]


def _outcome(status: int, body: str, refuse: bool) -> str:
    """"clear" for a one-line 4xx JSON error, "ok" for an answer where one is allowed, else "wrong"."""
    if "Traceback" in body or status < 0 or status >= 500:
        return "wrong"
    if 400 <= status < 500:
        try:
            err = json.loads(body)
            return "clear" if "\n" not in err["error"] and err["status"] == status else "wrong"
        except (ValueError, KeyError, TypeError):
            return "wrong"
    return "wrong" if refuse else "ok"


def _cases(big: int) -> list[tuple[str, str, Callable[["_Served"], tuple[int, str]], bool]]:
    """(attack, case, send, must be refused)."""
    def post(path: str, raw: bytes, headers: dict | None = None):
        return lambda s: s.request("POST", path, raw, headers)

    def get(path: str):
        return lambda s: s.request("GET", path)

    def js(obj: Any) -> bytes:
        return json.dumps(obj).encode()

    head = ("POST /search HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            "Content-Length: {n}\r\n\r\n")
    cases: list[tuple[str, str, Callable[[_Served], tuple[int, str]], bool]] = []
    for i, raw in enumerate([b'{"q": "light', b"not json", b"", b"[]", b'{"q": 5}', b'{"q": null}',
                             b'{"q": "x", "k": {}, "mode": "bm25"}', b"\xff\xfe\x00", b'{"q": "x"}' * 3]):
        cases.append(("serve: malformed JSON", f"body {i}", post("/search", raw), True))
    for k in (0, -1, 10 ** 9, 10 ** 30, 1.5, True, "lots"):
        cases.append(("serve: huge or odd k", f"k={k!r}", post("/search", js({"q": "x", "k": k, "mode": "bm25"})),
                      True))
    for i, q in enumerate(["naïve café résumé", "検索エンジン", "مرحبا بالعالم", "e\u0301\u0301\u0301", "🦀🚀" * 300,
                           "\u200b\u200b", "\ufeffquery"]):
        cases.append(("serve: unicode queries", f"query {i}", post("/search", js({"q": q, "mode": "bm25"})), False))
    cases.append(("serve: unicode queries", "lone surrogate", post("/search", b'{"q": "\\ud800x", "mode": "bm25"}'),
                  True))
    cases.append(("serve: unicode queries", "2049 characters", post("/search", js({"q": "é" * 2049, "mode": "bm25"})), True))
    for i, send in enumerate([post("/search", js({"q": "a\x00b"})), get("/search?q=a%00b"), get("/doc/a%00b"),
                              post("/batch_search", js({"queries": ["ok", "\x00"]}))]):
        cases.append(("serve: NUL bytes", f"case {i}", send, True))
    cases.append(("serve: 10 MB bodies", "with Content-Length",
                  lambda s: s.raw_exchange(head.format(n=big).encode() + b'{"q": "'), True))
    chunk = f"{1 << 20:x}\r\n".encode() + b"x" * (1 << 20) + b"\r\n"
    cases.append(("serve: 10 MB bodies", "chunked", lambda s: s.raw_exchange(
        b"POST /search HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n",
        *[chunk] * (big >> 20), b"0\r\n\r\n"), True))
    for path in ("/doc/../../manifest.json", "/doc/%2e%2e%2f%2e%2e%2fmanifest.json", "/doc/manifest.json",
                 "/doc//etc/passwd", "/doc/..%5c..%5cmanifest.json", "/static/../manifest.json",
                 "/static/%2e%2e/server/app.py"):
        cases.append(("serve: path-like ids", path, get(path), True))
    nested = b'{"q": ' + b"[" * 5000 + b"]" * 5000 + b"}"
    cases.append(("serve: deep nesting and big batches", "5000 nested lists", post("/search", nested), True))
    cases.append(("serve: deep nesting and big batches", "257 queries",
                  post("/batch_search", js({"queries": ["q"] * 257})), True))
    cases.append(("serve: deep nesting and big batches", "257 allowed ids",
                  post("/search", js({"q": "x", "allowed_ids": [str(i) for i in range(257)]})), True))
    cases.append(("serve: deep nesting and big batches", "admin without token",
                  post("/documents", js({"documents": [{"_id": "x", "text": "y"}]})), True))
    return cases


def _slow_clients(s: _Served, probe: Callable[[], list[str] | None], n: int = 32, hold: float = 5.0) -> bool:
    """``n`` connections dribble a request head a byte at a time for ``hold`` seconds; the probe
    must answer meanwhile. True when it did, with the reference ranking."""
    socks = []
    for _ in range(n):
        sock = socket.create_connection((s.host, s.port), timeout=10)
        sock.sendall(b"POST /search HTTP/1.1\r\nHost: x\r\n")
        socks.append(sock)
    ok = True
    try:
        deadline = time.monotonic() + hold
        while time.monotonic() < deadline:
            for sock in socks:
                try:
                    sock.sendall(b"X")
                except OSError:
                    pass
            t0 = time.monotonic()
            ok &= probe() is not None and time.monotonic() - t0 < 10
            time.sleep(0.5)
    finally:
        for sock in socks:
            sock.close()
    return ok


def run(index: Path, work: Path, count: Callable[..., None], big: int = 10 << 20, hold: float = 5.0) -> None:
    """The serve attacks on a copy of ``index`` (see the module docstring); ``big``: the bytes of the
    oversized bodies, ``hold``: the seconds slow clients hold their connections."""
    copy = work / "serve-index"
    shutil.copytree(index, copy)
    before = _files(copy)
    served = _Served(copy)
    try:
        def probe_ids() -> list[str] | None:
            status, body = served.request("POST", "/search", json.dumps(PROBE).encode())
            return _ids(body) if status == 200 else None

        reference = probe_ids()
        assert reference, "the probe search found nothing"
        legs = json.loads(served.request("GET", "/info")[1])["legs"]
        model_reference = (_ids(served.request("POST", "/search", json.dumps(MODEL_PROBE).encode())[1])
                           if {"dense", "sparse"} <= set(legs) else None)
        for attack, case, send, refuse in _cases(big):
            status, body = send(served)
            outcome = _outcome(status, body, refuse)
            if attack == "serve: path-like ids" and ("manifest_sha256" in body or "import " in body):
                outcome = "wrong"  # a file's content came back
            if probe_ids() != reference:
                outcome = "wrong"
            if outcome == "wrong":
                print(f"{attack} / {case}: status {status}: {body[:300]}", file=sys.stderr)
            count(attack, outcome)
        ok = _slow_clients(served, probe_ids, hold=hold)
        count("serve: slow clients", "ok" if ok else "wrong")
        if model_reference is not None:  # the model path answers too, as before
            status, body = served.request("POST", "/search", json.dumps(MODEL_PROBE).encode())
            count("serve: slow clients", "ok" if status == 200 and _ids(body) == model_reference else "wrong")
    finally:
        served.stop()
    lost = _files(copy) != before
    count("serve: index unchanged", "wrong" if lost else "ok", lost=lost)
    if os.environ.get("ALIGNIR_KEEP_FAULT_COPY") is None:
        shutil.rmtree(copy, ignore_errors=True)
