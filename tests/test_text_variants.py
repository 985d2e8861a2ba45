"""Text-form variants of training pairs: a share of the queries read, with their pairs' texts, in
capitals (as text_form="auto" reads them) or in lower case without punctuation; held-out ones
untouched."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from alignir.encoders.text_form import fold_capitals, lower_without_punctuation
from alignir.encoders.train.base import in_batch_candidates
from alignir.encoders.train.data import Pair
from alignir.encoders.train.text_variants import (TEXT_VARIANTS, VARIANT_SIDES, capitals_as_read, vary_pair,
                                                  vary_text_forms)
from alignir.encoders.train.trainer import train
from alignir.errors import InvalidInputError
from conftest import train_config, train_log

PAIR = Pair("Does NASA fund Mars missions?", "The NASA budget, 2019: Mars.", ["Lunar rovers (1970)."],
            ("Mars sample return.",))


def test_the_forms_are_what_the_llm_reads_of_a_collection_written_that_way():
    assert capitals_as_read("Does NASA fund Mars missions? Yes.") == "Does nasa fund mars missions? Yes."
    assert capitals_as_read("x") == fold_capitals("X")
    assert lower_without_punctuation("The NASA budget, 2019: Mars.") == "the nasa budget 2019 mars"
    assert lower_without_punctuation("  A--B\t\tc!  ") == "a b c"
    assert sorted(TEXT_VARIANTS) == ["capitals", "lower"]


def test_each_side_varies_only_its_own_texts():
    q = vary_pair(PAIR, "lower", "query")
    assert q.query == "does nasa fund mars missions" and (q.positive, q.negatives, q.relevant) == (
        PAIR.positive, PAIR.negatives, PAIR.relevant)
    d = vary_pair(PAIR, "lower", "documents")
    assert d.query == PAIR.query
    assert d.positive == "the nasa budget 2019 mars" and d.negatives == ["lunar rovers 1970"]
    # the judged-relevant texts hold both forms, the pair's own positive among them
    assert set(d.relevant) == {"Mars sample return.", "The NASA budget, 2019: Mars.", "mars sample return",
                               "the nasa budget 2019 mars"}
    b = vary_pair(PAIR, "capitals", "both")
    assert b.query == "Does nasa fund mars missions?" and b.positive == "The nasa budget, 2019: mars."
    assert PAIR.query == "Does NASA fund Mars missions?"  # the input is not modified
    with pytest.raises(InvalidInputError, match="unknown text form"):
        vary_pair(PAIR, "upper", "query")
    with pytest.raises(InvalidInputError, match="unknown side"):
        vary_pair(PAIR, "lower", "corpus")


def test_the_share_is_drawn_per_query_with_the_seed():
    # 10 queries; query 0 has three pairs (three judged documents), which must get one variant
    pairs = [Pair(f"Topic {i}, part A.", f"Doc {i}-{k}.", [f"Neg {i}-{k}."], tuple(f"Doc {i}-{j}." for j in range(3)))
             for i in range(10) for k in range(3 if i == 0 else 1)]
    varied, desc = vary_text_forms(pairs, 0.5, seed=3)
    changed = {p.query for p, v in zip(pairs, varied) if p != v}
    assert len(changed) == 5 and desc["queries"] == 5 and desc["share"] == 0.5
    assert desc["pairs"] == sum(desc["by_form_and_side"].values()) == sum(p != v for p, v in zip(pairs, varied))
    for key in desc["by_form_and_side"]:
        form, side = key.split("/")
        assert form in TEXT_VARIANTS and side in VARIANT_SIDES
    first = [v for p, v in zip(pairs, varied) if p.query == "Topic 0, part A."]
    assert len({(v.query, v.positive == p.positive) for v, p in zip(first, pairs)}) == 1  # one variant per query
    assert vary_text_forms(pairs, 0.5, seed=3)[0] == varied
    assert vary_text_forms(pairs, 0.5, seed=4)[0] != varied
    assert vary_text_forms(pairs, 0.0, seed=3)[0] == pairs
    assert all(p != v for p, v in zip(pairs, vary_text_forms(pairs, 1.0, seed=3)[0]))
    with pytest.raises(InvalidInputError, match="text_forms"):
        vary_text_forms(pairs, -0.1, seed=3)


def test_a_varied_query_does_not_count_its_other_judged_documents_as_negatives():
    """Two pairs of one query in a batch, both varied on the documents' side: each one's positive is
    still a relevant document of the other, in its varied form."""
    a = Pair("Cells divide.", "Mitosis, a review.", [], ("Mitosis, a review.", "Meiosis: the basics."))
    b = Pair("Cells divide.", "Meiosis: the basics.", [], ("Mitosis, a review.", "Meiosis: the basics."))
    other = Pair("Stars form.", "Nebulae.", [], ("Nebulae.",))
    batch = [vary_pair(p, "lower", "documents") for p in (a, b)] + [other]
    cand = in_batch_candidates(batch, [p.positive for p in batch])
    assert cand is not None
    assert cand.tolist() == [[True, False, True], [False, True, True], [True, True, True]]


def test_a_run_varies_its_training_pairs_and_not_its_held_out_ones(tiny_model, data_files, tmp_path):
    kw = dict(steps=2, batch_size=2, eval_examples=2)
    plain = train(train_config(tmp_path / "plain", "infonce", "contrastive", data_files["pairs"], **kw), loaded=tiny_model)
    varied = train(train_config(tmp_path / "varied", "infonce", "contrastive", data_files["pairs"], text_forms=1.0, **kw),
                   loaded=tiny_model)
    assert train_log(varied["out"], "eval_log.jsonl")[0]["loss"] == pytest.approx(
        train_log(plain["out"], "eval_log.jsonl")[0]["loss"], rel=1e-6)
    assert train_log(varied["out"])[0]["loss"] != pytest.approx(train_log(plain["out"])[0]["loss"], rel=1e-6)
    meta = json.loads((Path(varied["out"]) / "alignir_train.json").read_text())
    assert meta["data"]["text_forms"]["pairs"] == meta["data"]["train"]
    assert "text_forms" not in json.loads((Path(plain["out"]) / "alignir_train.json").read_text())["data"]


def test_variants_are_refused_for_raw_text_stages(tiny_model, data_files, tmp_path):
    with pytest.raises(InvalidInputError, match="text-form variants apply to pair stages only"):
        train(train_config(tmp_path, "llm2comp", "ucl", data_files["texts"], text_forms=0.5, steps=1), loaded=tiny_model)
    with pytest.raises(InvalidInputError, match=r"text_forms must be a share in \[0, 1\]"):
        train(train_config(tmp_path, "infonce", "contrastive", data_files["pairs"], text_forms=2.0, steps=1),
              loaded=tiny_model)
