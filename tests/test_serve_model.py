"""``alignir serve`` with the real SmolLM2 on ADI: concurrent requests, micro-batched, rank as
``Searcher.search`` does in every leg set, and the explanations name aligned tokens, BM25 words
and the query's expansion tokens."""
from __future__ import annotations

import json
import threading

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from alignir.retrieval.searcher import Searcher  # noqa: E402
from alignir.retrieval.server import build_app  # noqa: E402
from alignir.retrieval.server.run import ServerThread  # noqa: E402

from conftest import ADI, assert_same_ranking  # noqa: E402
from serve_helpers import call  # noqa: E402


def _queries(n: int) -> list[str]:
    with open(ADI / "queries.jsonl", encoding="utf-8") as f:
        return [json.loads(line)["text"] for line in f][:n]


@pytest.mark.model
def test_smollm2_on_adi_ranks_as_the_searcher(adi_smollm2, smollm2):
    queries = _queries(8)
    searcher = Searcher.open(adi_smollm2, loaded=smollm2)
    app = build_app(adi_smollm2, loaded=smollm2, max_wait=0.02)
    with ServerThread(app) as srv:
        while call(srv.url, "GET", "/readyz")[0] != 200:
            pass
        for mode in ("hybrid", "dense+sparse+bm25"):
            want = {q: [(h.id, h.score) for h in hits]
                    for q, hits in zip(queries, searcher.batch_search(queries, k=10, mode=mode))}
            got: dict[str, list] = {}

            def one(q, mode=mode, got=got):
                status, body, _ = call(srv.url, "POST", "/search", {"q": q, "k": 10, "mode": mode})
                assert status == 200, body
                got[q] = [(h["id"], h["score"]) for h in body["hits"]]

            threads = [threading.Thread(target=one, args=(q,)) for q in queries]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            # batched encodes pad the queries together: scores move in the last float bits only
            for q in queries:
                assert_same_ranking(got[q], want[q], rtol=1e-4, where=(mode, q))
        service = app.state.service
        assert service.batcher.passes < service.batcher.encoded
        status, body, _ = call(srv.url, "POST", "/search", {"q": queries[0], "k": 3, "explain": True,
                                                             "mode": "dense+sparse+bm25"})
        assert status == 200
        assert any(not t["in_query"] for t in body["expansion"]) and any(t["in_query"] for t in body["expansion"])
        assert all(set(h["explanations"]) == {"sparse", "bm25"} for h in body["hits"])
        assert any(h["explanations"]["sparse"] for h in body["hits"])
