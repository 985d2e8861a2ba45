"""What ``alignir serve`` does for each request, apart from HTTP: search (through the micro-batcher
when the mode needs the model, directly when it does not), documents, the index's description,
and the admin writes (through the index's writer lock, then the new version is opened)."""
from __future__ import annotations

import hmac
import re
import threading
import time
from dataclasses import asdict
from typing import Any, Mapping, Sequence

from alignir.errors import InvalidInputError, NotReadyError, UnauthorizedError
from alignir.retrieval.legs import QueryContext
from alignir.retrieval.searcher import QueryBatch, modes_for
from alignir.retrieval.server.batcher import MicroBatcher
from alignir.retrieval.server.limits import Limits
from alignir.retrieval.server.state import IndexHolder, Snapshot

#: terms shown per leg and hit, and expansion tokens per query, with ``explain``
SHOWN_TERMS = 40
_WORD = re.compile(r"\w+", re.UNICODE)


class Service:
    """One index, one model, one micro-batcher. ``admin_token``: None turns the writes off."""

    def __init__(self, holder: IndexHolder, *, limits: Limits | None = None, max_batch: int = 32,
                 max_wait: float = 0.002, admin_token: str | None = None) -> None:
        self.holder = holder
        self.limits = limits or Limits()
        self.model_lock = threading.Lock()
        self.batcher = MicroBatcher(max_batch, max_wait, lock=self.model_lock)
        self.admin_token = admin_token or None
        self._write_lock = threading.Lock()

    # ------------------------------------------------------------------ life
    def start(self) -> None:
        """Open the index (when not open yet) and start the micro-batcher."""
        if not self.holder.is_open:
            self.holder.open()
        self.batcher.start()

    def load_model(self) -> None:
        with self.model_lock:
            self.holder.load_model()

    def stop(self) -> None:
        self.batcher.stop()

    def ready(self) -> tuple[bool, str]:
        """(ready, why not): the index open at its folder's version and the model loaded."""
        try:
            snap = self.holder.current()
        except NotReadyError as e:
            return False, str(e)
        if snap.needs_model and not self.holder.model_ready.is_set():
            return False, "the query encoder is loading"
        return True, "ready"

    # ------------------------------------------------------------------ search
    def search(self, queries: Sequence[Any], *, k: int = 10, mode: str = "hybrid", explain: bool = False,
               fusion: str | None = None, alpha: float | None = None, weights: Mapping[str, float] | None = None,
               depth: int | None = None, allowed_ids: Sequence[str] | None = None,
               passage_agg: str | None = None, text: bool = False) -> dict[str, Any]:
        """Hits of each query (as ``Searcher.batch_search``), the plan and the version they come from."""
        queries = self.limits.check_queries(queries)
        self.limits.check_k(k)
        allowed_ids = self.limits.check_ids(allowed_ids, "allowed_ids")
        t0 = time.perf_counter()
        snap = self.holder.current()
        searcher = snap.searcher
        legs = searcher.parse_mode(mode)
        plan = searcher.plan(mode, fusion=fusion, alpha=alpha, weights=weights, depth=depth)
        uses_model = any(searcher.legs[leg].needs_model for leg in legs)
        if uses_model and not self.holder.model_ready.is_set():
            raise NotReadyError("the query encoder is loading; bm25 searches are answered meanwhile")
        encoded = self.batcher.encode(searcher, queries) if uses_model else None
        results = searcher.batch_search(queries, k=k, mode=mode, explain=explain, fusion=fusion, alpha=alpha,
                                        weights=weights, depth=depth, allowed_ids=allowed_ids,
                                        encoded=encoded, passage_agg=passage_agg)
        out = []
        for i, hits in enumerate(results):
            rows = [h.to_dict() for h in hits]
            if explain:
                self._explain_more(snap, queries[i], i, encoded, hits, rows)
            if text:
                self._attach_texts(searcher, rows)
            entry: dict[str, Any] = {"query": queries[i], "hits": rows}
            if explain and encoded is not None:
                entry["expansion"] = _expansion(searcher, encoded, i, queries[i])
            out.append(entry)
        return {"index_version": snap.version, "mode": mode, "k": k, "plan": plan.to_dict(), "plan_text": plan.describe(),
                "results": out, "took_ms": round(1000 * (time.perf_counter() - t0), 3)}

    def _explain_more(self, snap: Snapshot, query: str, i: int, encoded: QueryBatch | None,
                      hits: list, rows: list[dict[str, Any]]) -> None:
        """``explanations``: each explaining leg's terms for every hit (aligned tokens and BM25
        words alike, whichever legs the searcher has and the request encoded)."""
        searcher = snap.searcher
        query_rows: dict[str, Any] = {}
        for name, leg in searcher.legs.items():
            if not leg.explains:
                continue
            if leg.needs_model:
                if encoded is not None and name in encoded.legs:
                    query_rows[name] = encoded.legs[name][i]
            else:
                query_rows[name] = leg.encode(QueryContext([query], None))[0]
        for hit, row in zip(hits, rows):
            row["explanations"] = {}
            for name, q in query_rows.items():
                try:
                    terms = searcher.legs[name].explain(q, hit.doc_number)
                except InvalidInputError:  # a leg of a backend that cannot explain
                    continue
                row["explanations"][name] = [asdict(c) for c in sorted(terms, key=lambda c: -c.contribution)
                                             [:SHOWN_TERMS]]

    @staticmethod
    def _attach_texts(searcher: Any, rows: list[dict[str, Any]]) -> None:
        if "texts" not in searcher.index.parts:
            return
        for row in rows:
            doc = searcher.doc(row["id"])
            row["title"], row["text"] = doc["title"], doc["text"]

    # ------------------------------------------------------------------ documents, info
    def doc(self, doc_id: str) -> dict[str, Any]:
        self.limits.check_text(doc_id, "the document id", self.limits.max_query_chars)
        snap = self.holder.current()
        return {"index_version": snap.version, **snap.searcher.doc(doc_id)}

    def info(self) -> dict[str, Any]:
        snap = self.holder.current()
        s, manifest = snap.searcher, snap.searcher.index.manifest
        spec = manifest.get("embedder") if isinstance(manifest.get("embedder"), dict) else {}
        return {
            "index": str(self.holder.path), "index_version": snap.version, "documents": s.index.n_docs,
            "backend": self.holder.options.get("backend", "folder"),
            "legs": list(s.legs), "modes": list(modes_for(s.index)), "stores_text": "texts" in s.index.parts,
            "model": spec.get("model"), "calibrated": s.calibration is not None,
            "model_loaded": self.holder.model_ready.is_set(), "versions_opened": self.holder.versions_opened,
            "limits": self.limits.to_dict(), "admin": self.admin_token is not None,
            "micro_batching": {"max_batch": self.batcher.max_batch, "max_wait_ms": 1000 * self.batcher.max_wait,
                               "passes": self.batcher.passes, "queries_encoded": self.batcher.encoded},
        }

    # ------------------------------------------------------------------ admin
    def check_token(self, header: str | None) -> None:
        """The request's ``Authorization: Bearer TOKEN`` against the admin token, in constant time."""
        if self.admin_token is None:
            raise UnauthorizedError("the admin endpoints are off on this server (start it with --admin-token)")
        given = header[7:] if isinstance(header, str) and header[:7].lower() == "bearer " else ""
        if not hmac.compare_digest(given.encode("utf-8", "surrogatepass"), self.admin_token.encode("utf-8")):
            raise UnauthorizedError("a valid admin token is needed (Authorization: Bearer TOKEN)")

    def add(self, documents: Sequence[Mapping[str, Any]], replace: bool = False) -> dict[str, Any]:
        """Add (or with ``replace`` replace) documents: ``alignir add`` through the writer lock,
        with the server's loaded model; answers with the new version. The server's own writes
        queue; another process writing the index is an IndexBusyError (409)."""
        from alignir.retrieval.indexer import add_documents

        if not isinstance(documents, (list, tuple)) or not documents:
            raise InvalidInputError("documents must be a non-empty list of {_id, title, text}")
        self.limits.check_count(len(documents), "documents")
        docs = []
        for i, d in enumerate(documents):
            if not isinstance(d, Mapping):
                raise InvalidInputError(f"documents[{i}] must be an object with _id, title and text")
            doc_id = self.limits.check_text(d.get("_id"), f"documents[{i}]._id", self.limits.max_query_chars)
            title = self.limits.check_text(d.get("title", ""), f"documents[{i}].title")
            body = self.limits.check_text(d.get("text", ""), f"documents[{i}].text")
            docs.append({"_id": doc_id, "title": title, "text": body})
        with self._write_lock:
            snap = self.holder.current()
            encoder = snap.searcher.query_encoder
            with self.model_lock:  # the model encodes the new documents: no query pass meanwhile
                add_documents(self.holder.path, docs, replace=bool(replace), progress=False, wait=False,
                              loaded=None if encoder is None else encoder.loaded)
            new = self.holder.refresh()
        return {"index_version": new.version, "documents": new.searcher.index.n_docs, "added": len(docs)}

    def delete(self, ids: Sequence[Any]) -> dict[str, Any]:
        """Delete documents (``alignir delete`` through the writer lock); answers with the new version."""
        from alignir.retrieval.indexer import delete_documents

        if not isinstance(ids, (list, tuple)) or not ids:
            raise InvalidInputError("ids must be a non-empty list of document ids")
        ids = self.limits.check_ids(ids, "ids") or []
        with self._write_lock:
            delete_documents(self.holder.path, ids, wait=False)
            new = self.holder.refresh()
        return {"index_version": new.version, "deleted": len(set(ids))}


def _expansion(searcher: Any, encoded: QueryBatch, i: int, query: str) -> list[dict[str, Any]]:
    """The query's aligned tokens (its eq.16 sparse vector), heaviest first; ``in_query``: the
    token's text is a word (or the start of a word) of the query, else it is an expansion."""
    from alignir.encoders.terms import SPACE_MARK, token_text

    leg = searcher.legs.get("sparse")
    rows = encoded.legs.get("sparse")
    if leg is None or rows is None:
        return []
    row = rows[i]
    inner = getattr(leg, "inner", leg)
    first = inner._first_tokens() if hasattr(inner, "_first_tokens") else None
    tokenizer = getattr(searcher.sparsifier, "tokenizer", None)
    strings = searcher.sparsifier.term_map.term_strings
    words = [w.lower() for w in _WORD.findall(query)]
    out = []
    for t, w in sorted(zip(row.indices.tolist(), row.data.tolist()), key=lambda p: -p[1])[:SHOWN_TERMS]:
        if first is not None and tokenizer is not None and first[t] >= 0:
            text = token_text(tokenizer, int(first[t]))
        else:
            text = strings[t]
        bare = text.replace(SPACE_MARK, "").strip().lower()
        in_query = bare in words or (len(bare) >= 3 and any(word.startswith(bare) for word in words))
        out.append({"term": int(t), "text": text, "weight": float(w), "in_query": in_query})
    return out
