"""``alignir serve`` under concurrent load, against the in-process ``Searcher.search`` loop.

Measures, for 1, 4 and 16 concurrent loopback clients (threads with keep-alive connections),
the QPS and p50/p99 latency of: the in-process loop (``Searcher.search`` called by as many
threads, in this process), the server with micro-batching (``--max-batch-encode 32``, 2 ms) and
without (``--max-batch-encode 1``), each a separate ``alignir serve`` process on 127.0.0.1; and
the same for BM25-only requests. Cells run interleaved (client count, then target) so that a
ratio compares cells measured side by side. Then, with ``--writes-seconds``, a writes-under-load
run on a copy of the index: 16 clients search while documents are added and deleted through the
admin API and the index is swapped by another process (``delete_documents``); it counts failed
requests, hits not live in the version their response names (a mixed version) and deleted ids
returned by requests that started after the delete finished.

Writes benchmarks/results/serve.json (rows replaced by key: kind, clients, target, mode).

    python -m benchmarks.speed.bench_serve --index INDEX --seconds 8 --writes-seconds 120
"""
from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from benchmarks.common import DATASETS, replace_rows

RESULTS = Path(__file__).resolve().parents[1] / "results" / "serve.json"
ADI_QUERIES = DATASETS / "adi" / "queries.jsonl"
LISTENING = re.compile(r"listening on http://([\d.]+):(\d+)")


# ---------------------------------------------------------------------- clients
class Client:
    """One keep-alive HTTP connection to a server."""

    def __init__(self, host: str, port: int) -> None:
        self.conn = http.client.HTTPConnection(host, port, timeout=120)
        self.conn.connect()
        # http.client sends the head and the body in two writes: without TCP_NODELAY the body waits
        # for the server's delayed ACK (~40 ms), as no browser or HTTP library in production does
        self.conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def request(self, method: str, path: str, body: Any = None, headers: dict | None = None) -> tuple[int, Any]:
        data = None if body is None else json.dumps(body).encode()
        sent = {"Content-Type": "application/json", **(headers or {})}
        self.conn.request(method, path, body=data, headers=sent)
        resp = self.conn.getresponse()
        payload = resp.read()
        return resp.status, json.loads(payload) if payload else None


def run_clients(n: int, seconds: float, one: Callable[[int, int], None]) -> dict[str, float]:
    """``n`` threads calling ``one(thread, i)`` for ``seconds``; QPS and latency percentiles."""
    latencies: list[list[float]] = [[] for _ in range(n)]
    errors = [0] * n
    stop = time.perf_counter() + seconds

    def loop(t: int) -> None:
        i = 0
        while time.perf_counter() < stop:
            t0 = time.perf_counter()
            try:
                one(t, i)
            except Exception:  # noqa: BLE001 - counted
                errors[t] += 1
            latencies[t].append(time.perf_counter() - t0)
            i += 1

    t0 = time.perf_counter()
    threads = [threading.Thread(target=loop, args=(t,)) for t in range(n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    wall = time.perf_counter() - t0
    lat = np.array([x for row in latencies for x in row]) * 1000
    return {"requests": int(lat.size), "failed": int(sum(errors)), "qps": round(lat.size / wall, 2),
            "p50_ms": round(float(np.percentile(lat, 50)), 2), "p99_ms": round(float(np.percentile(lat, 99)), 2)}


# ---------------------------------------------------------------------- servers
class Server:
    """``alignir serve`` in a subprocess on a free loopback port."""

    def __init__(self, index: Path, *args: str, env: dict | None = None, ready_timeout: float = 300.0) -> None:
        cmd = [sys.executable, "-m", "alignir.retrieval.cli", "serve", "--index", str(index), "--port", "0", *args]
        self.proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
                                     env={**os.environ, **(env or {})})
        while True:
            line = self.proc.stderr.readline()
            if not line:
                raise RuntimeError("alignir serve did not start")
            found = LISTENING.search(line)
            if found:
                self.host, self.port = found.group(1), int(found.group(2))
                break
        threading.Thread(target=self.proc.stderr.read, daemon=True).start()  # keep the pipe drained
        deadline = time.monotonic() + ready_timeout
        while True:
            try:
                if Client(self.host, self.port).request("GET", "/readyz")[0] == 200:
                    break
            except OSError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self.stop()
                raise RuntimeError("alignir serve did not become ready")
            time.sleep(0.1)

    def client(self) -> Client:
        return Client(self.host, self.port)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
        self.proc.wait(timeout=60)


# ---------------------------------------------------------------------- load
def load_queries(path: Path, n: int = 64) -> list[str]:
    with open(path, encoding="utf-8") as f:
        return [json.loads(line)["text"] for line in f if line.strip()][:n]


def load_phase(index: Path, queries: list[str], seconds: float, clients: list[int], k: int) -> list[dict]:
    from alignir.retrieval.searcher import Searcher

    searcher = Searcher.open(index)
    searcher.search(queries[0], k=k)  # the model loads before timing
    servers = {"serve_batched": Server(index, "--max-batch-encode", "32", "--max-wait-ms", "2"),
               "serve_unbatched": Server(index, "--max-batch-encode", "1")}
    rows = []
    try:
        for n in clients:
            for mode in ("hybrid", "bm25"):
                targets: dict[str, Callable[[int, int], None]] = {}

                def inproc(t: int, i: int, mode=mode) -> None:
                    searcher.search(queries[(t * 7 + i) % len(queries)], k=k, mode=mode)

                targets["in_process"] = inproc
                for name, server in servers.items():
                    if mode == "bm25" and name == "serve_unbatched":
                        continue  # bm25 never reaches the encoder: one server is enough
                    conns = [server.client() for _ in range(n)]

                    def remote(t: int, i: int, conns=conns, mode=mode) -> None:
                        status, _ = conns[t].request("POST", "/search", {"q": queries[(t * 7 + i) % len(queries)],
                                                                         "k": k, "mode": mode})
                        if status != 200:
                            raise RuntimeError(status)

                    targets[name] = remote
                for name, one in targets.items():
                    load = os.getloadavg()[0]
                    before = _encodes(servers.get(name))
                    cell = run_clients(n, seconds, one)
                    after = _encodes(servers.get(name))
                    if before is not None and after is not None and after[0] > before[0]:
                        cell["encode_passes"] = after[0] - before[0]
                        cell["queries_per_pass"] = round((after[1] - before[1]) / (after[0] - before[0]), 2)
                    rows.append({"kind": "load", "clients": n, "target": name, "mode": mode, "seconds": seconds,
                                 **cell, "loadavg_1m": round(load, 2)})
                    print(json.dumps(rows[-1]), flush=True)
    finally:
        for server in servers.values():
            server.stop()
    base = {(r["clients"], r["mode"]): r["qps"] for r in rows if r["target"] == "in_process"}
    for r in rows:
        r["qps_vs_in_process"] = round(r["qps"] / base[(r["clients"], r["mode"])], 3)
    return rows


def _encodes(server: "Server | None") -> tuple[int, int] | None:
    """(model passes, queries encoded) of a server so far."""
    if server is None:
        return None
    info = server.client().request("GET", "/info")[1]["micro_batching"]
    return info["passes"], info["queries_encoded"]


# ---------------------------------------------------------------------- writes under load
def live_ids(index: Path) -> tuple[str, set[str]]:
    """(version, live ids) of the index as it is now on disk."""
    from alignir.index.store import open_index
    from alignir.retrieval.indexer import deleted_numbers
    from alignir.retrieval.server.state import version_of

    stored = open_index(index, verify=False)
    dead = set(deleted_numbers(stored).tolist())

    class _S:  # version_of reads searcher.index.manifest
        pass

    s = _S()
    s.index = stored
    return version_of(s), {d for n, d in enumerate(stored.doc_ids) if n not in dead}


def writes_phase(index: Path, queries: list[str], seconds: float, clients: int, k: int) -> dict:
    from alignir.retrieval.indexer import delete_documents

    work = Path(tempfile.mkdtemp(prefix="serve-writes-"))
    copy = work / "idx"
    shutil.copytree(index, copy)
    token = "bench-token"
    server = Server(copy, env={"ALIGNIR_ADMIN_TOKEN": token})
    auth = {"Authorization": f"Bearer {token}"}
    versions: dict[str, set[str]] = {}
    v, ids = live_ids(copy)
    versions[v] = ids
    deleted_at: dict[str, float] = {}
    history: list[tuple[float, set[str]]] = []  # (when written, live ids), in order
    responses: list[tuple[float, str, list[str]]] = []
    failed, lock = [0], threading.Lock()
    by_mode: dict[str, int] = {}
    stop = time.perf_counter() + seconds
    writes = {"added": 0, "deleted_admin": 0, "deleted_other_process": 0, "write_errors": 0}

    def searcher_loop(t: int) -> None:
        conn, i = server.client(), 0
        while time.perf_counter() < stop:
            mode = "bm25" if t % 2 else ("hybrid", "dense+sparse+bm25")[i % 2]  # half the clients: bm25 only
            started = time.perf_counter()
            try:
                status, body = conn.request("POST", "/search", {"q": queries[(t * 5 + i) % len(queries)],
                                                                "k": k, "mode": mode})
            except Exception:  # noqa: BLE001
                status, body, conn = -1, None, server.client()
            with lock:
                if status != 200:
                    failed[0] += 1
                else:
                    responses.append((started, body["index_version"], [h["id"] for h in body["hits"]]))
                    by_mode[mode] = by_mode.get(mode, 0) + 1
            i += 1

    def writer_loop() -> None:
        conn, n = server.client(), 0
        base = sorted(versions[v])
        while time.perf_counter() < stop - 1:
            n += 1
            new = f"serve-bench-{n}"
            try:
                status, body = conn.request("POST", "/documents", {"documents": [
                    {"_id": new, "title": "", "text": f"{queries[n % len(queries)]} (added document {n})"}]}, auth)
                assert status == 200, body
                writes["added"] += 1
                versions[body["index_version"]] = live_ids(copy)[1]
                history.append((time.perf_counter(), versions[body["index_version"]]))
                status, body = conn.request("DELETE", "/documents", {"ids": [new]}, auth)
                assert status == 200, body
                deleted_at[new] = time.perf_counter()
                versions[body["index_version"]] = live_ids(copy)[1]
                history.append((deleted_at[new], versions[body["index_version"]]))
                writes["deleted_admin"] += 1
                if n % 3 == 0:  # another process swaps the index: the server picks it up alone
                    victim = base[n % len(base)]
                    if victim in live_ids(copy)[1]:
                        delete_documents(copy, [victim])
                        deleted_at[victim] = time.perf_counter()
                        ver, now = live_ids(copy)
                        versions[ver] = now
                        history.append((deleted_at[victim], now))
                        writes["deleted_other_process"] += 1
            except Exception as e:  # noqa: BLE001
                writes["write_errors"] += 1
                print("write error:", e, file=sys.stderr)
            time.sleep(0.5)

    load0 = os.getloadavg()[0]
    threads = [threading.Thread(target=searcher_loop, args=(t,)) for t in range(clients)]
    threads.append(threading.Thread(target=writer_loop))
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    server.stop()
    shutil.rmtree(work, ignore_errors=True)
    # an add swaps twice (its parts, then its calibration): the first swap's version is named by
    # no answer to the writer; its documents are those of the add's final version, the next written
    unknown = [(started, hits) for started, ver, hits in responses if ver not in versions]
    mixed = sum(1 for _, ver, hits in responses if ver in versions and not set(hits) <= versions[ver])
    for started, hits in unknown:
        after = next((live for when, live in history if when >= started), None)
        mixed += after is None or not set(hits) <= after
    stale = sum(1 for started, _, hits in responses for d in hits if d in deleted_at and started > deleted_at[d])
    return {"kind": "writes_under_load", "clients": clients, "target": "serve_batched", "mode": "hybrid,bm25,dense+sparse+bm25",
            "seconds": seconds, "searches": len(responses), "searches_by_mode": by_mode, "failed": failed[0], "versions_seen": len({r[1] for r in responses}),
            "versions_written": len(versions), "responses_of_a_first_add_swap": len(unknown),
            "responses_with_hits_not_in_their_version": mixed, "deleted_ids_returned_after_delete": stale,
            **writes, "loadavg_1m": round(load0, 2)}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--index", type=Path, required=True)
    ap.add_argument("--queries", type=Path, default=ADI_QUERIES, help="BEIR queries.jsonl (default: ADI's)")
    ap.add_argument("--seconds", type=float, default=8.0, help="per cell")
    ap.add_argument("--clients", default="1,4,16")
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--writes-seconds", type=float, default=0.0, help="the writes-under-load run (0: skip)")
    ap.add_argument("--skip-load", action="store_true", help="only the writes-under-load run")
    ap.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    queries = load_queries(args.queries)
    clients = [int(c) for c in args.clients.split(",")]
    command = "python -m benchmarks.speed.bench_serve " + " ".join(sys.argv[1:] if argv is None else argv)
    rows = [] if args.skip_load else load_phase(args.index, queries, args.seconds, clients, args.k)
    if args.writes_seconds > 0:
        rows.append(writes_phase(args.index, queries, args.writes_seconds, max(clients), args.k))
        print(json.dumps(rows[-1]), flush=True)
    for r in rows:
        r.update(index=args.index.name, command=command, cpus=os.cpu_count())
    replace_rows(args.out, rows, ("kind", "clients", "target", "mode"))


if __name__ == "__main__":
    main()
