"""Every search mode on ADI with the real SmolLM2 returns exactly the rankings saved before the
architecture refactor (issue 14): the same document ids in the same order with the same float32
scores, top-100 for every ADI query. ``ALIGNIR_WRITE_REFERENCE=1`` rewrites the reference file
(only ever from a commit whose rankings are the reference).

The leg sets with BM25 are searched with ``fusion="zscore"``: the reference holds the fixed
z-score weights that were their default until issue 17 made "agree" the default; the option
must keep giving exactly those rankings."""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("ALIGNIR_SHARED", ROOT.parent / "shared"))
ADI = SHARED / "datasets" / "adi"
REFERENCE = Path(__file__).parent / "data" / "adi_rankings.json"
MODES = ("sparse", "dense", "hybrid", "bm25", "dense+bm25", "sparse+bm25", "dense+sparse+bm25")


def _rankings(searcher, queries: dict[str, str]) -> dict[str, dict[str, list]]:
    qids = sorted(queries)
    out: dict[str, dict[str, list]] = {}
    for mode in MODES:
        fusion = "zscore" if "bm25" in mode and "+" in mode else None
        runs = searcher.batch_search([queries[q] for q in qids], k=100, mode=mode, fusion=fusion)
        out[mode] = {q: [[h.id, float(np.float32(h.score))] for h in hits] for q, hits in zip(qids, runs)}
    return out


@pytest.mark.model
def test_adi_rankings_equal_the_saved_reference(tmp_path, monkeypatch, smollm2):
    if not ADI.is_dir():
        pytest.skip(f"{ADI} not found (set ALIGNIR_SHARED)")
    monkeypatch.setenv("ALIGNIR_CACHE", str(tmp_path / "cache"))
    from alignir import Searcher, build_index
    from alignir.retrieval.beir import load_beir

    build_index(ADI, tmp_path / "adi", model="smollm2-135m", loaded=smollm2)
    got = _rankings(Searcher.open(tmp_path / "adi", loaded=smollm2), load_beir(ADI).queries)
    if os.environ.get("ALIGNIR_WRITE_REFERENCE") == "1":
        REFERENCE.write_text(json.dumps(got, separators=(",", ":")))
    want = json.loads(REFERENCE.read_text())
    assert set(got) == set(want)
    for mode in MODES:
        for q, hits in want[mode].items():
            assert [h[0] for h in got[mode][q]] == [h[0] for h in hits], (mode, q)
            assert [h[1] for h in got[mode][q]] == [h[1] for h in hits], (mode, q)
