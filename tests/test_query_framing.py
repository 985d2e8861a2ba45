"""Query framing: a share of the training queries rewritten as requests, held-out ones untouched."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from alignir.encoders.train.data import Pair
from alignir.encoders.train.framing import QUERY_FRAMES, frame_queries, frame_query
from alignir.encoders.train.trainer import train
from alignir.errors import InvalidInputError
from conftest import train_config, train_log


def test_a_query_keeps_its_words_inside_the_frame():
    assert frame_query("Aspirin lowers the risk of stroke.", "Describe {}.") == "Describe aspirin lowers the risk of stroke."
    assert frame_query("  Why do cells divide? ", "What is known about {}?") == "What is known about why do cells divide?"
    # acronyms and names with inner capitals keep their case
    assert frame_query("DNA repair is slow", "Tell me about {}.") == "Tell me about DNA repair is slow."
    assert frame_query("iPhone batteries", "Tell me about {}.") == "Tell me about iPhone batteries."
    assert frame_query("?", "Tell me about {}.") == "?"  # nothing to frame


def test_the_share_of_framed_queries_is_drawn_with_the_seed():
    pairs = [Pair(f"Topic {i}.", f"doc {i}", [f"neg {i}"], (f"doc {i}",)) for i in range(10)]
    framed, desc = frame_queries(pairs, 0.5, seed=3)
    changed = [i for i, (a, b) in enumerate(zip(pairs, framed)) if a.query != b.query]
    assert len(changed) == 5 and desc == {"share": 0.5, "framed": 5, "frames": len(QUERY_FRAMES)}
    for i in changed:
        assert framed[i].query in {f.format(f"topic {i}") for f in QUERY_FRAMES}
    # documents, negatives and the judged-relevant texts are the pair's own; the input is not modified
    assert [(p.positive, p.negatives, p.relevant) for p in framed] == [(p.positive, p.negatives, p.relevant) for p in pairs]
    assert all(p.query == f"Topic {i}." for i, p in enumerate(pairs))
    assert frame_queries(pairs, 0.5, seed=3)[0] == framed
    assert frame_queries(pairs, 0.5, seed=4)[0] != framed
    assert frame_queries(pairs, 0.0, seed=3)[0] == pairs
    assert all(a.query != b.query for a, b in zip(pairs, frame_queries(pairs, 1.0, seed=3)[0]))
    with pytest.raises(InvalidInputError, match="query_frames"):
        frame_queries(pairs, 1.5, seed=3)


def test_a_run_frames_its_training_queries_and_not_its_held_out_ones(tiny_model, data_files, tmp_path):
    kw = dict(steps=2, batch_size=2, eval_examples=2)
    plain = train(train_config(tmp_path / "plain", "infonce", "contrastive", data_files["pairs"], **kw), loaded=tiny_model)
    framed = train(train_config(tmp_path / "framed", "infonce", "contrastive", data_files["pairs"], query_frames=1.0, **kw),
                   loaded=tiny_model)
    # the same held-out examples, unframed: the same held-out loss before the first step
    assert train_log(framed["out"], "eval_log.jsonl")[0]["loss"] == pytest.approx(
        train_log(plain["out"], "eval_log.jsonl")[0]["loss"], rel=1e-6)
    # the training batches differ from the first step on
    assert train_log(framed["out"])[0]["loss"] != pytest.approx(train_log(plain["out"])[0]["loss"], rel=1e-6)
    meta = json.loads((Path(framed["out"]) / "alignir_train.json").read_text())
    assert meta["data"]["query_frames"]["framed"] == meta["data"]["train"]
    assert "query_frames" not in json.loads((Path(plain["out"]) / "alignir_train.json").read_text())["data"]


def test_framing_is_refused_for_raw_text_stages(tiny_model, data_files, tmp_path):
    with pytest.raises(InvalidInputError, match="query framing applies to pair stages only"):
        train(train_config(tmp_path, "llm2comp", "ucl", data_files["texts"], query_frames=0.5, steps=1), loaded=tiny_model)
    with pytest.raises(InvalidInputError, match=r"query_frames must be a share in \[0, 1\]"):
        train(train_config(tmp_path, "infonce", "contrastive", data_files["pairs"], query_frames=2.0, steps=1),
              loaded=tiny_model)
