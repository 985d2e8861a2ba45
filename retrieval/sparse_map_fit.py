"""Fit an adapter's aligned-token map (encoders.train.sparse_map) on a BEIR train split.

The texts are encoded once through the adapter (the embedding cache keeps them, so a second fit
costs no encoding); u1 and λ (eq.14) are fitted per collection as an index fits them; the map
trains on the fixed vectors in minutes; a held-out share of the train queries measures the
aligned-token leg's nDCG@10 over the whole corpus before and after. The output folder is the
adapter, byte for byte (its dense vectors, hash and cached vectors unchanged), plus the map and
its training record (``adapters.SPARSE_MAP_FILE`` / ``SPARSE_MAP_META``).
"""
from __future__ import annotations

import json
import random
import shutil
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np
import torch

from alignir.errors import InvalidInputError
from alignir.io import atomic_write_json

if TYPE_CHECKING:
    from alignir.encoders.train.sparse_map import SparseMapConfig

__all__ = ["fit_sparse_map", "PAIR_TEXT_CHARS"]

#: characters of a document's text kept as the positive of its title (pair collections): the
#: topic is in its first sentences, and short texts keep the one-off encoding cheap
PAIR_TEXT_CHARS = 800


def _pc1_shift(config: Any, H: np.ndarray) -> torch.Tensor:
    """λ·u1 [d] of eq.14 (h_adj = h + λ·u1) with u1 and λ fitted on the corpus ``H`` as an index
    build fits them (``config``: its SparseConfig); its queries are shifted by the same vector.
    Zero when λ is off."""
    from alignir.retrieval.sparsify import fit_corpus_pc1, resolve_lambda

    H = np.asarray(H, dtype=np.float32)
    if config.pc1_remove is None and config.pc1_lambda == 0.0:
        return torch.zeros(H.shape[1])
    u1 = fit_corpus_pc1(H)
    lam = resolve_lambda(config, H, u1).pc1_lambda
    return torch.from_numpy(np.float32(lam) * u1.astype(np.float32))


def _pair_rows(corpus_file: Path, n: int, seed: int, skip: int = 0) -> list[tuple[str, str]]:
    """(title, text) pairs of a corpus in one seeded order: rows ``skip`` to ``skip + n``, so the
    pairs after the first ``skip`` are disjoint from those of a call with ``skip=0, n=skip``."""
    from alignir.retrieval.beir import read_corpus_jsonl

    corpus = read_corpus_jsonl(corpus_file, skip_bad=True, empty="skip")
    rows = [(d.title.strip(), d.text[:PAIR_TEXT_CHARS]) for d in corpus.values()
            if d.title.strip() and len(d.text.strip()) > 40]
    if not rows:
        raise InvalidInputError(f"{corpus_file}: no document has both a title and a text to pair")
    random.Random(seed).shuffle(rows)
    if skip and len(rows) - skip < 2:
        raise InvalidInputError(f"{corpus_file}: {len(rows)} title/text pairs, too few to hold out pairs beyond "
                                f"the first {skip}")
    return rows[skip:skip + n]


def _sparse_ndcg(sparsifier: Any, Hq: np.ndarray, surface: Sequence[np.ndarray], Hd: np.ndarray,
                 qids: Sequence[str], doc_ids: Sequence[str], qrels: dict[str, dict[str, int]]) -> float:
    """nDCG@10 of the aligned-token leg alone: queries ``Hq`` against every document ``Hd``."""
    from alignir.retrieval.metrics import evaluate

    S = (sparsifier.queries(Hq, surface) @ sparsifier.documents(Hd).T).toarray()
    run = {}
    for r, q in enumerate(qids):
        top = np.argsort(-S[r], kind="stable")[:100]
        run[q] = {doc_ids[j]: float(S[r, j]) for j in top}
    return round(float(evaluate(qrels, run, ("ndcg@10",))["ndcg@10"]), 4)


def _transfer_sets(enc: Any, corpora: Sequence[str | Path], skip: int, n: int, seed: int) -> list[tuple]:
    """Held-out title→text sets of the ``corpora``: ``n`` pairs each beyond the ``skip`` the map
    trains or is held by, encoded once, with a sparsifier whose u1 and λ (eq.14) are fitted on
    that set's texts as an index over them would fit them."""
    from alignir.retrieval.sparsify import fit_corpus_pc1, resolve_lambda

    sets = []
    for c in corpora:
        rows = _pair_rows(Path(c) / "corpus.jsonl" if Path(c).is_dir() else Path(c), n, seed, skip=skip)
        titles, texts = [r[0] for r in rows], [r[1] for r in rows]
        hd = enc.dense(texts, "document")
        hq = enc.dense(titles, "query")
        u1 = fit_corpus_pc1(hd)
        sp = replace(enc.sparsifier, config=resolve_lambda(enc.config, hd, u1), pc1=u1)
        ids = [str(i) for i in range(len(rows))]
        sets.append((Path(c).name, sp, hq, enc.embedder.surface_token_ids(titles), hd, ids,
                     {i: {i: 1} for i in ids}))
    return sets


def fit_sparse_map(data: str | Path, out: str | Path, *, model: str | None = None, family: str | None = None,
                   adapter: str | None = None, split: str = "train", corpora: Sequence[str | Path] = (),
                   pairs_per_corpus: int = 400, held_out: float = 0.1, transfer_pairs: int = 0,
                   eval_every: int = 100,
                   config: "SparseMapConfig | None" = None, cache_dir: str | Path | None = None, device: str = "auto",
                   progress: bool = True, **embedder_options: Any) -> dict[str, Any]:
    """Train the aligned-token map of ``adapter`` (or of the shipped ``model``, default the
    shipped default) on the qrels ``split`` of the BEIR folder ``data``, with title→text pairs of
    each ``corpora`` folder when ``config.breadth`` > 0 and their texts as the reference of
    ``config.function_weight``; write the adapter with its map to ``out``. ``transfer_pairs`` > 0
    also measures what the map does away from ``data``: the aligned-token leg's title→text
    nDCG@10 on that many further pairs of each corpus (never seen by the fit), before and after.
    Returns the training record (also ``out/alignir_sparse_map.json``)."""
    from alignir.encoders.embedders.adapters import SPARSE_MAP_FILE, SPARSE_MAP_KEY, SPARSE_MAP_META, adapter_dir
    from alignir.encoders.train.sparse_map import (MapExamples, SparseMapConfig, dense_hard_negatives,
                                                   train_sparse_map)
    from alignir.retrieval.beir import load_beir
    from alignir.retrieval.encoder import Encoder

    cfg = config if config is not None else SparseMapConfig()
    if not 0.0 <= held_out < 1.0:
        raise InvalidInputError(f"held_out must be in [0, 1), got {held_out}")
    if (cfg.breadth > 0 or cfg.function_weight > 0 or transfer_pairs > 0) and not corpora:
        raise InvalidInputError("breadth > 0, function_weight > 0 and transfer_pairs > 0 need at least one --corpus "
                                "folder (title→text pairs, reference texts)")
    if transfer_pairs < 0:
        raise InvalidInputError(f"transfer_pairs must be >= 0, got {transfer_pairs}")
    out = Path(out)
    if (out / SPARSE_MAP_FILE).exists():
        raise InvalidInputError(f"{out} already holds a sparse map; choose another --out")
    t0 = time.perf_counter()
    enc = Encoder.from_pretrained(model, adapter=adapter, family=family, device=device, cache_dir=cache_dir,
                                  use_cache=True, progress=progress, **embedder_options)
    source = getattr(enc.embedder, "adapter", None)
    if not source:
        raise InvalidInputError("a sparse map belongs to a trained adapter: give a shipped trained model or --adapter")
    src_dir = adapter_dir(source)

    ds = load_beir(data, split=split)
    doc_ids = ds.corpus.ids()
    row_of = {d: i for i, d in enumerate(doc_ids)}
    qids = [q for q in ds.queries if any(r > 0 and d in row_of for d, r in ds.qrels[q].items())]
    if len(qids) < 2:
        raise InvalidInputError(f"{data}: split {split!r} has {len(qids)} judged queries with a relevant document "
                                f"in the corpus; a sparse map needs more")
    Hd = enc.dense(ds.corpus.texts(), "document", progress=progress)
    q_texts = [ds.queries[q] for q in qids]
    Hq = enc.dense(q_texts, "query", progress=progress)
    positives = [[row_of[d] for d, r in ds.qrels[q].items() if r > 0 and d in row_of] for q in qids]
    order = np.random.default_rng(cfg.seed).permutation(len(qids))
    n_held = int(round(held_out * len(qids)))
    held, train_rows = np.sort(order[:n_held]), np.sort(order[n_held:])

    enc.fit(Hd)  # u1 and λ of the corpus, as its index fits them: the training shift and the held-out scoring
    fitted = enc.sparsifier
    shift = torch.from_numpy(np.float32(fitted.config.pc1_lambda) * np.asarray(fitted.pc1, dtype=np.float32))
    Qa, Da = torch.from_numpy(Hq) + shift, torch.from_numpy(Hd) + shift
    surface = enc.embedder.surface_token_ids(q_texts)
    hard = dense_hard_negatives(torch.from_numpy(Hq), torch.from_numpy(Hd), positives)
    supervised = MapExamples(Path(str(data)).name, Qa[train_rows], Da, [surface[i] for i in train_rows],
                             [positives[i] for i in train_rows], [hard[i] for i in train_rows])

    breadth, reference = [], []
    if cfg.breadth > 0 or cfg.function_weight > 0:
        for c in corpora:
            rows = _pair_rows(Path(c) / "corpus.jsonl" if Path(c).is_dir() else Path(c), pairs_per_corpus, cfg.seed)
            titles, texts = [r[0] for r in rows], [r[1] for r in rows]
            hd = enc.dense(texts, "document", progress=progress)
            shift_c = _pc1_shift(enc.config, hd)
            reference.append(torch.from_numpy(hd) + shift_c)
            if cfg.breadth > 0:
                hq = enc.dense(titles, "query")
                breadth.append(MapExamples.pairs(Path(c).name, torch.from_numpy(hq) + shift_c, reference[-1],
                                                 enc.embedder.surface_token_ids(titles)))

    W = enc.embedder.lm_head  # E_g itself: a map the source adapter may carry is replaced, not compounded
    qrels = {str(qids[i]): {d: int(r) for d, r in ds.qrels[qids[i]].items()} for i in held}

    def mapped(sparsifier: Any, A: torch.Tensor) -> Any:
        return replace(sparsifier, lm_head=(W.float() @ A.float()).to(W.dtype))

    def held_ndcg(A: torch.Tensor) -> float:
        return _sparse_ndcg(mapped(fitted, A), Hq[held], [surface[i] for i in held], Hd,
                            [str(qids[i]) for i in held], doc_ids, qrels)

    transfer = _transfer_sets(enc, corpora, pairs_per_corpus, transfer_pairs, cfg.seed) if transfer_pairs else []

    def transfer_ndcg(A: torch.Tensor) -> dict[str, float]:
        got = {name: _sparse_ndcg(mapped(sp, A), hq, sf, hd, ids, ids, qr) for name, sp, hq, sf, hd, ids, qr in transfer}
        return {**got, "mean": round(float(np.mean(list(got.values()))), 4)}

    transfer_before = transfer_ndcg(torch.eye(W.shape[1])) if transfer else None
    A, log = train_sparse_map([supervised], W, np.asarray(enc.sparsifier.special_ids), cfg, breadth,
                              evaluate=held_ndcg if n_held else None, eval_every=eval_every, progress=progress,
                              reference=torch.cat(reference) if reference else None)
    out.mkdir(parents=True, exist_ok=True)
    for f in src_dir.iterdir():
        if f.is_file() and f.name not in (SPARSE_MAP_FILE, SPARSE_MAP_META):
            shutil.copy2(f, out / f.name)
    from safetensors.torch import save_file

    save_file({SPARSE_MAP_KEY: A.float().contiguous()}, str(out / SPARSE_MAP_FILE))
    from alignir.encoders.train.adapter import write_derivative_notice

    write_derivative_notice(out)  # the base model's licence notice, now naming the map too
    evals = [r for r in log if "eval" in r]
    record = {"method": "sparse_map", "source_adapter": str(source), "data": str(data), "split": split,
              "corpora": [str(c) for c in corpora], "pairs_per_corpus": pairs_per_corpus,
              "train_queries": int(len(train_rows)), "held_out_queries": int(n_held), "config": cfg.to_dict(),
              "held_out_ndcg@10": {"before": evals[0]["eval"], "after": evals[-1]["eval"]} if evals else None,
              "transfer_ndcg@10": {"pairs_per_corpus": transfer_pairs, "before": transfer_before,
                                   "after": transfer_ndcg(A)} if transfer else None,
              "seconds": round(time.perf_counter() - t0, 1), "identity_distance": round(float(
                  (A - torch.eye(A.shape[0])).norm()), 4)}
    atomic_write_json(out / SPARSE_MAP_META, record, indent=1)
    with open(out / "sparse_map_log.jsonl", "w") as fh:
        fh.writelines(json.dumps(r) + "\n" for r in log)
    return record
