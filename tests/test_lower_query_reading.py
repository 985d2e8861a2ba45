"""The two readings of queries typed without capitals that benchmarks/quality/lower_query_reading.py
measures: they touch only text without capitals, change only letter case, and pick what they say."""
from __future__ import annotations

from benchmarks.quality.lower_query_reading import fewest_tokens, sentence_case


def test_sentence_case_capitalises_sentence_starts_only():
    assert sentence_case("what is dna. the helix? (yes) it is") == "What is dna. The helix? (Yes) it is"
    assert sentence_case("1 000 genomes project") == "1 000 genomes project"  # no letter starts it
    assert sentence_case("Already has one") == "Already has one"
    assert sentence_case("dna of mice, NASA") == "dna of mice, NASA"  # any capital: as typed
    for text in ("", "a", "ünïcode words here. ok"):
        out = sentence_case(text)
        assert len(out) == len(text) and out.lower() == text.lower()


class PiecesTokenizer:
    """Cuts " word" into one piece when the form is in ``vocab``, else one piece per letter."""

    def __init__(self, vocab: set[str]) -> None:
        self.vocab = vocab

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict:
        word = text.strip()
        return {"input_ids": [0] if word in self.vocab else list(range(len(word)))}


def test_fewest_tokens_picks_the_form_cut_least_and_lower_on_a_tie():
    read = fewest_tokens(PiecesTokenizer({"DNA", "Paris", "the", "The", "mice"}))
    assert read("the dna of paris mice") == "the DNA of Paris mice"  # "the"/"The" tie: lower
    assert read("The dna") == "The dna"  # a capital anywhere: as typed
    assert read("x-ray 42 ab") == "x-ray 42 ab"  # every form one letter a piece: lower


def test_fewest_tokens_with_a_trained_tokenizer_changes_case_only(tiny_tokenizer):
    read = fewest_tokens(tiny_tokenizer)
    text = "the quick brown fox jumps over the lazy dog near paris"
    out = read(text)
    assert len(out) == len(text) and out.lower() == text
