"""benchmarks/archive/loss_gradients.py: gradient norms of each InfoNCE loss term with respect to the
embeddings, exact on a hand-made function and end to end on the tiny model."""
from __future__ import annotations

import json

import pytest
import torch

from benchmarks.archive.loss_gradients import gradient_norms

from conftest import TINY_CORPUS, TRAIN_QUERIES, write_corpus, write_queries


def test_gradient_norms_by_hand():
    q = torch.tensor([[1.0, 2.0], [0.0, -2.0]])
    d = torch.ones(3, 2)
    # ∂/∂q of Σq² is 2q: norm 2·‖q‖ = 2·3; ∂/∂d of 3·Σd is 3 everywhere: norm 3·√6
    gq, gd = gradient_norms(lambda a, b: (a ** 2).sum() + 3.0 * b.sum(), q, d)
    assert gq == pytest.approx(6.0) and gd == pytest.approx(3.0 * 6 ** 0.5)
    assert q.grad is None and d.grad is None  # the inputs are not touched
    # a term that ignores the documents has no gradient there
    assert gradient_norms(lambda a, b: a.sum(), q, d)[1] == 0.0


def test_end_to_end_on_the_tiny_model(tiny_folder, tiny_adapter, tmp_path):
    from benchmarks.archive.loss_gradients import main

    data = tmp_path / "beir"
    (data / "qrels").mkdir(parents=True)
    write_corpus(data / "corpus.jsonl", TINY_CORPUS)
    write_queries(data / "queries.jsonl", TRAIN_QUERIES)
    (data / "qrels" / "train.tsv").write_text("query-id\tcorpus-id\tscore\n"
                                              + "".join(f"q{i}\td{i}\t1\n" for i in range(len(TRAIN_QUERIES))))
    out = tmp_path / "grads.json"
    assert main(["--data", str(data), "--model", str(tiny_folder), "--adapter", f"tiny={tiny_adapter}",
                 "--batches", "2", "--batch-size", "3", "--max-length", "32", "--out", str(out)]) == 0
    rows = {r["term"]: r for r in json.loads(out.read_text())["rows"]}
    assert set(rows) == {"infonce", "sparse_distill@10", "sparse_distill@auto", "sparse@10", "sparse@auto",
                         "flops_d", "flops_q"}
    assert rows["infonce"]["ratio_to_infonce"] == pytest.approx(1.0)
    for term, r in rows.items():
        assert r["batches"] == 2
        # a FLOPS term reads one side's weights (u1 and λ of eq.14 come from the documents detached),
        # so the other side gets no gradient; every other term reaches both
        assert (r["grad_norm_queries"] > 0) == (term != "flops_d")
        assert (r["grad_norm_documents"] > 0) == (term != "flops_q")
