"""``alignir serve`` with the tiny model, in a uvicorn thread on a free loopback port: the API
answers as the Python API does (same names, defaults and rankings), errors are one JSON line with
their status, concurrent encodes are micro-batched, BM25 requests never wait on the encoder, one
query encoder serves every index version, and writes (admin or another process) are picked up."""
from __future__ import annotations

import threading
import time

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from alignir.index.lock import writer_lock  # noqa: E402
from alignir.retrieval.indexer import delete_documents  # noqa: E402
from alignir.retrieval.searcher import Searcher  # noqa: E402
from alignir.retrieval.server import build_app  # noqa: E402
from alignir.retrieval.server.run import ServerThread  # noqa: E402

from serve_helpers import IDS, announce_body, build_tiny, call  # noqa: E402

QUERIES = ["light plants", "stock market rates", "supersonic wind tunnel", "proteins fold"]
MODES = ["hybrid", "sparse", "dense", "bm25", "dense+sparse+bm25"]
TOKEN = "s3cret-token"


def _ready(url: str) -> None:
    deadline = time.monotonic() + 60
    while call(url, "GET", "/readyz")[0] != 200:
        assert time.monotonic() < deadline, "not ready"
        time.sleep(0.02)


@pytest.fixture(scope="module")
def tiny_index(tmp_path_factory, tiny_model):
    root = tmp_path_factory.mktemp("serve")
    return build_tiny(root / "idx", tiny_model, root / "cache")


@pytest.fixture(scope="module")
def server(tiny_index, tiny_model):
    app = build_app(tiny_index, loaded=tiny_model, max_wait=0.05)
    with ServerThread(app) as srv:
        _ready(srv.url)
        yield srv.url, app.state.service


@pytest.fixture()
def writable(tmp_path, tiny_model):
    """A fresh index and a server with the admin endpoints on."""
    path = build_tiny(tmp_path / "idx", tiny_model, tmp_path / "cache")
    app = build_app(path, loaded=tiny_model, admin_token=TOKEN)
    with ServerThread(app) as srv:
        _ready(srv.url)
        yield path, srv.url, app.state.service


def _pairs(hits):
    return [(h["id"], round(h["score"], 4)) for h in hits]


@pytest.mark.parametrize("mode", MODES)
def test_search_answers_as_the_searcher(server, tiny_index, tiny_model, mode):
    url, _ = server
    want = Searcher.open(tiny_index, loaded=tiny_model).batch_search(QUERIES, k=4, mode=mode)
    status, body, headers = call(url, "POST", "/batch_search", {"queries": QUERIES, "k": 4, "mode": mode})
    assert status == 200, body
    assert headers["x-alignir-index-version"] == body["index_version"]
    assert [_pairs(r["hits"]) for r in body["results"]] == [[(h.id, round(h.score, 4)) for h in hits]
                                                            for hits in want]
    status, one, _ = call(url, "GET", f"/search?q=light%20plants&k=4&mode={mode.replace('+', '%2B')}")
    assert status == 200 and _pairs(one["hits"]) == _pairs(body["results"][0]["hits"])
    status, posted, _ = call(url, "POST", "/search", {"query": "light plants", "k": 4, "mode": mode})
    assert status == 200 and _pairs(posted["hits"]) == _pairs(one["hits"])


def test_defaults_explain_text_and_documents(server):
    url, _ = server
    status, body, _ = call(url, "POST", "/search", {"q": "light plants", "explain": True, "text": True})
    assert status == 200 and body["mode"] == "hybrid" and body["k"] == 10 and len(body["hits"]) == len(IDS)
    hit = body["hits"][0]
    assert set(hit["explanations"]) == {"sparse", "bm25"} and hit["text"]
    assert body["plan"]["legs"] == ["dense", "sparse"] and "fusion plan" in body["plan_text"]
    assert body["expansion"] and any(not t["in_query"] for t in body["expansion"])
    status, doc, _ = call(url, "GET", f"/doc/{hit['id']}")
    assert status == 200 and doc["text"] == hit["text"]
    for path in ("/doc/nope", "/doc/../../etc/passwd", "/doc/%2e%2e%2fmanifest.json", "/doc/manifest.json"):
        status, err, _ = call(url, "GET", path)
        assert status == 404 and "Traceback" not in str(err), (path, err)


def test_the_socket_is_tcp_so_that_replies_are_not_delayed():
    """asyncio sets TCP_NODELAY on accepted connections only for a socket made with IPPROTO_TCP;
    without it each keep-alive reply waited ~40 ms for the client's delayed ACK."""
    import socket

    from alignir.retrieval.server.run import bind

    with bind("127.0.0.1", 0) as sock:
        assert sock.proto == socket.IPPROTO_TCP and sock.getsockname()[0] == "127.0.0.1"


def test_info_health_and_openapi(server):
    url, _ = server
    status, info, _ = call(url, "GET", "/info")
    assert status == 200 and info["documents"] == len(IDS) and "bm25" in info["modes"] and not info["admin"]
    assert call(url, "GET", "/healthz")[0] == 200 and call(url, "GET", "/readyz")[1]["ready"] is True
    status, schema, _ = call(url, "GET", "/openapi.json")
    assert status == 200 and {"/search", "/batch_search", "/info"} <= set(schema["paths"])
    assert "/documents" not in schema["paths"]  # admin off
    assert call(url, "GET", "/docs")[0] == 200
    page = call(url, "GET", "/")
    assert page[0] == 200 and 'id="q"' in page[1] and "/static/page.js" in page[1]
    assert call(url, "GET", "/static/page.js")[0] == 200


@pytest.mark.parametrize("body, status, words", [
    ({"q": "x", "mode": "nope"}, 400, "mode must be"),
    ({"q": "x", "k": 0}, 400, "k must be"),
    ({"q": "x", "k": 1001}, 400, "at most 1000"),
    ({"q": "x" * 2049}, 400, "2048"),
    ({"q": "a\x00b"}, 400, "NUL"),
    ({"q": "   "}, 400, "empty"),
    ({"q": "x", "allowed_ids": ["zz"]}, 400, "not in the index"),
    ({"q": "x", "fusion": "bogus"}, 400, "fusion"),
    ({"q": "x", "alpha": 3}, 400, "alpha"),
    ({"q": "x", "surprise": 1}, 400, "surprise"),
    ({"q": "x", "k": True}, 400, "k"),
    ({"q": "x", "k": "10"}, 400, "k"),
    ({"k": 3}, 400, "q"),
])
def test_bad_requests_are_one_line_400s(server, body, status, words):
    url, _ = server
    got, err, _ = call(url, "POST", "/search", body)
    assert got == status and words in err["error"] and "\n" not in err["error"] and err["status"] == status


def test_limits_batch_body_json_and_no_admin(server):
    url, _ = server
    status, err, _ = call(url, "POST", "/batch_search", {"queries": ["q"] * 257})
    assert status == 400 and "at most 256 queries" in err["error"]
    status, err, _ = call(url, "POST", "/search", raw=b'{"q": "light', headers={"Content-Type": "application/json"})
    assert status == 400 and err["type"] == "InvalidInputError"
    status, text = announce_body(url, "/search", 10 * (1 << 20))  # refused before the body is sent
    assert status == 413 and "BodyTooLargeError" in text
    status, text = announce_body(url, "/search", (1 << 20) + 1, b"x" * 1000)
    assert status == 413
    for method in ("POST", "DELETE"):
        status, err, _ = call(url, method, "/documents", {"ids": ["d0"]}, {"Authorization": f"Bearer {TOKEN}"})
        assert status in (404, 405), (method, status)
    assert call(url, "GET", "/search?q=light", headers={"Origin": "https://evil.example"})[2].get(
        "access-control-allow-origin") is None


def test_concurrent_encodes_are_micro_batched(server, tiny_index, tiny_model):
    url, service = server
    want = {q: [h.id for h in hits] for q, hits in
            zip(QUERIES, Searcher.open(tiny_index, loaded=tiny_model).batch_search(QUERIES, k=6, mode="sparse"))}
    before = (service.batcher.passes, service.batcher.encoded)
    got: dict[str, list[str]] = {}

    def one(q):
        status, body, _ = call(url, "POST", "/search", {"q": q, "k": 6, "mode": "sparse"})
        assert status == 200
        got[q] = [h["id"] for h in body["hits"]]

    threads = [threading.Thread(target=one, args=(q,)) for q in QUERIES * 2]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    passes, encoded = service.batcher.passes - before[0], service.batcher.encoded - before[1]
    assert encoded == 8 and passes < encoded  # several requests shared a model pass
    assert got == want


def test_bm25_requests_never_wait_on_the_encoder(server):
    url, service = server
    done = threading.Event()

    def hybrid():
        call(url, "GET", "/search?q=light%20plants&mode=hybrid")
        done.set()

    with service.model_lock:  # the encoder is busy
        t = threading.Thread(target=hybrid)
        t.start()
        t0 = time.perf_counter()
        status, body, _ = call(url, "GET", "/search?q=light%20plants&mode=bm25", timeout=10)
        took = time.perf_counter() - t0
        assert status == 200 and body["hits"] and took < 5
        time.sleep(0.2)
        assert not done.is_set()  # the model request is still waiting
    t.join(timeout=30)
    assert done.is_set()


def test_admin_writes_swap_versions_with_one_encoder(writable):
    path, url, service = writable
    embedder = service.holder.current().searcher.query_encoder.embedder
    v0 = call(url, "GET", "/info")[1]["index_version"]
    auth = {"Authorization": f"Bearer {TOKEN}"}
    assert call(url, "POST", "/documents", {"documents": [{"_id": "new", "text": "x"}]})[0] == 401
    assert call(url, "POST", "/documents", {"documents": [{"_id": "new", "text": "x"}]},
                {"Authorization": "Bearer wrong"})[0] == 401
    status, added, _ = call(url, "POST", "/documents",
                            {"documents": [{"_id": "new", "title": "", "text": "cosmic rays strike the light plants"}]},
                            auth)
    assert status == 200 and added["index_version"] != v0 and added["documents"] == len(IDS) + 1
    status, body, _ = call(url, "GET", "/search?q=cosmic%20rays&mode=bm25&k=1")
    assert body["hits"][0]["id"] == "new" and body["index_version"] == added["index_version"]
    status, err, _ = call(url, "POST", "/documents", {"documents": [{"_id": "new", "text": "again"}]}, auth)
    assert status == 400 and "already in the index" in err["error"]
    status, gone, _ = call(url, "DELETE", "/documents", {"ids": ["new", "d1"]}, auth)
    assert status == 200
    for mode in MODES:
        hits = call(url, "POST", "/search", {"q": "cosmic rays light plants", "mode": mode, "k": 50})[1]["hits"]
        assert not {"new", "d1"} & {h["id"] for h in hits}, mode
    with writer_lock(path):  # another process writing: 409, nothing changed
        status, err, _ = call(url, "DELETE", "/documents", {"ids": ["d2"]}, auth)
        assert status == 409 and "writing" in err["error"]
    # another process deletes: the next request answers from the new version
    delete_documents(path, ["d3"])
    hits = call(url, "GET", "/search?q=stock%20market&k=50")[1]["hits"]
    assert "d3" not in {h["id"] for h in hits}
    assert service.holder.versions_opened >= 4  # start, add, delete, the other process's delete
    assert service.holder.current().searcher.query_encoder.embedder is embedder  # one model for every version


def test_cors_only_for_the_named_origin(tiny_index, tiny_model):
    app = build_app(tiny_index, loaded=tiny_model, cors="https://app.example.org", load_model=False)
    with ServerThread(app) as srv:
        ok = call(srv.url, "GET", "/search?q=light&mode=bm25", headers={"Origin": "https://app.example.org"})
        assert ok[0] == 200 and ok[2]["access-control-allow-origin"] == "https://app.example.org"
        other = call(srv.url, "GET", "/search?q=light&mode=bm25", headers={"Origin": "https://evil.example"})
        assert "access-control-allow-origin" not in other[2]
        # the model is not loaded (load_model=False): model modes are 503, bm25 answers
        status, err, _ = call(srv.url, "GET", "/search?q=light&mode=hybrid")
        assert status == 503 and err["type"] == "NotReadyError"
        assert call(srv.url, "GET", "/readyz")[0] == 503


@pytest.mark.parametrize("args, words", [
    (["--index", "{tmp}/none"], "does not exist"),
    (["--index", "{tmp}", "--max-batch-encode", "0"], "--max-batch-encode"),
    (["--index", "{tmp}", "--uri", "x.db"], "--backend milvus"),
])
def test_cli_refuses_before_listening(tmp_path, args, words):
    from typer.testing import CliRunner

    from alignir.retrieval.cli import app

    result = CliRunner().invoke(app, ["serve", "--port", "0", *(a.format(tmp=tmp_path) for a in args)])
    assert result.exit_code == 1 and words in result.output and "Traceback" not in result.output, result.output
