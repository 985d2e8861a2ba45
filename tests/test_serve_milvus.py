"""``alignir serve --backend milvus``: the legs searched in the collection exported from the folder
(Milvus Lite, a local .db), answering as ``Searcher.open(backend="milvus")`` does; admin writes,
which would change the folder and not the collection, are refused at start."""
from __future__ import annotations

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")
pytest.importorskip("pymilvus")
pytest.importorskip("milvus_lite")

from alignir.errors import InvalidInputError  # noqa: E402
from alignir.retrieval.milvus import export_index  # noqa: E402
from alignir.retrieval.searcher import Searcher  # noqa: E402
from alignir.retrieval.server import build_app  # noqa: E402
from alignir.retrieval.server.run import ServerThread  # noqa: E402

from serve_helpers import build_tiny, call  # noqa: E402

pytestmark = pytest.mark.milvus
QUERIES = ["light plants", "stock market rates", "supersonic wind tunnel"]


def test_served_from_milvus_as_the_milvus_searcher(tmp_path, tiny_model):
    index = build_tiny(tmp_path / "idx", tiny_model, tmp_path / "cache")
    uri = str(tmp_path / "m.db")
    export_index(index, uri, progress=False)
    with pytest.raises(InvalidInputError, match="admin"):
        build_app(index, loaded=tiny_model, backend="milvus", uri=uri, admin_token="t")
    want = Searcher.open(index, loaded=tiny_model, backend="milvus", uri=uri)
    try:
        app = build_app(index, loaded=tiny_model, backend="milvus", uri=uri)
        with ServerThread(app) as srv:
            while call(srv.url, "GET", "/readyz")[0] != 200:
                pass
            assert call(srv.url, "GET", "/info")[1]["backend"] == "milvus"
            for mode in ("hybrid", "bm25", "dense+sparse+bm25"):
                status, body, _ = call(srv.url, "POST", "/batch_search", {"queries": QUERIES, "k": 4, "mode": mode})
                assert status == 200, body
                expected = want.batch_search(QUERIES, k=4, mode=mode)
                for got, hits in zip(body["results"], expected):
                    assert [h["id"] for h in got["hits"]] == [h.id for h in hits], mode
                    assert [h["score"] for h in got["hits"]] == pytest.approx([h.score for h in hits], rel=1e-4)
    finally:
        want.close()
