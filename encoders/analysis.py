"""Embedding-token alignment analysis (“A Text is Worth Several Tokens” §3-4, App. D-E).

* Process 1 (§3.2): surface token sets T_s (tokenizer ids, deduplicated) and aligned rankings
  T̂_s (vocabulary sorted by e_tᵀh; only the top max(K, |T_s|) are needed).
* Metrics (§3.5): Hit@K (eq.6), Local Alignment Rate (eq.7), Global Alignment Rate (eq.8),
  exact (token ids) or also counting stem/lemma matches (the paper's "yellow" tokens, NLTK
  Snowball stemmer; WordNet lemmatizer when its data is installed, else skipped).
* Spectral analysis (§4): SVD basis U of base embeddings (eq.9), variation v_j (eq.10), first
  component vs rest contributions to the aligned logits (eq.11-12), PC1 adjustment sweep (eq.14).
* Output: matplotlib PNGs and a rich table of top aligned tokens marked literal / stem / novel.

Everything takes arrays (H, lm_head, id sets); a tokenizer is only needed for token strings.
"""
from __future__ import annotations

from alignir.checks import check_texts
from alignir.errors import InvalidInputError

import logging
import re
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import numpy as np
import torch

from alignir.encoders.aligned import adjust, project_topk, svd_basis, token_logits

log = logging.getLogger(__name__)

__all__ = [
    "surface_sets",
    "aligned_rankings",
    "TokenMatcher",
    "alignment_metrics",
    "hit_at_k",
    "local_alignment_rate",
    "global_alignment_rate",
    "variation",
    "v1_share",
    "pc_contributions",
    "lambda_sweep",
    "token_label",
    "alignment_table",
    "plot_spectrum",
    "plot_metrics",
    "plot_lambda_sweep",
    "plot_contributions",
    "wordnet_available",
    "AlignmentReport",
    "analyze_embeddings",
    "write_plots",
    "LAMBDA_FACTORS",
]

LITERAL, STEM, NOVEL = "literal", "stem", "novel"
MATCH_MODES = ("exact", "stem", "lemma", "stem+lemma")


# ----------------------------------------------------------------------------- Process 1


def surface_sets(texts: Sequence[str], tokenizer: Any, max_length: int | None = None,
                 exclude: Iterable[int] | None = None) -> list[np.ndarray]:
    """T_s for each text: its tokenizer ids without special tokens, deduplicated (sorted int32).

    ``max_length`` keeps only the first tokens (match what the embedder saw after truncation);
    ``exclude`` drops ids (e.g. special ids that literal control strings tokenize into).
    """
    ex = np.asarray(sorted(set(int(i) for i in exclude)) if exclude is not None else [], dtype=np.int64)
    out = []
    for t in check_texts(texts):
        ids = tokenizer(t, add_special_tokens=False)["input_ids"]
        if max_length is not None:
            ids = ids[:max_length]
        a = np.unique(np.asarray(ids, dtype=np.int64))
        if ex.size:
            a = a[~np.isin(a, ex)]
        out.append(a.astype(np.int32))
    return out


def aligned_rankings(H: np.ndarray, lm_head: torch.Tensor | np.ndarray, surface: Sequence[np.ndarray],
                     k: int = 10, mask_ids: Iterable[int] | np.ndarray | None = None,
                     chunk: int = 8192) -> np.ndarray:
    """T̂_s truncated to the first max(k, max_i |T_s_i|) tokens (Process 1, lines 5-10):
    int32 [n, width], each row in descending e_tᵀh order.  Masked ids never appear."""
    if len(surface) != np.asarray(H).shape[0]:
        raise InvalidInputError(f"got {len(surface)} surface sets for {np.asarray(H).shape[0]} embeddings")
    V = int(lm_head.shape[0])
    n_mask = 0 if mask_ids is None else int(np.unique(np.asarray(list(np.ravel(mask_ids)), dtype=np.int64)).size)
    width = max([int(k)] + [len(s) for s in surface])
    width = min(width, V - n_mask)
    ids, _ = project_topk(H, lm_head, width, mask_ids=mask_ids, chunk=chunk)
    return ids


# ----------------------------------------------------------------------------- matching


def wordnet_available() -> bool:
    """True when NLTK's WordNet data is installed (it is never downloaded here)."""
    try:
        import nltk

        nltk.data.find("corpora/wordnet")
        return True
    except LookupError:
        try:
            nltk.data.find("corpora/wordnet.zip")
            return True
        except LookupError:
            return False
    except ImportError:
        return False


class TokenMatcher:
    """Decides whether an aligned token is literal (id in T_s), a stem/lemma match (same
    normalised word as a surface token, “A Text is Worth Several Tokens” §3.4 "yellow"), or novel.

    ``mode``: "exact" (ids only), "stem" (NLTK Snowball, no data needed), "lemma" (WordNet)
    or "stem+lemma".  If WordNet data is missing, lemma matching is skipped with a warning
    and ``self.lemma`` is False.  Keys come from the token's decoded text, stripped and
    lower-cased; tokens without letters or digits get no key (exact matching only).
    """

    def __init__(self, tokenizer: Any = None, mode: str = "stem", language: str = "english") -> None:
        if mode not in MATCH_MODES:
            raise InvalidInputError(f"match mode must be one of {MATCH_MODES}, got {mode!r}")
        if mode != "exact" and tokenizer is None:
            raise InvalidInputError(f"match mode {mode!r} needs a tokenizer (token strings)")
        self.tokenizer = tokenizer
        self.mode = mode
        self.stem = "stem" in mode
        self.lemma = "lemma" in mode
        self._stemmer = self._lemmatizer = None
        if self.stem:
            from nltk.stem.snowball import SnowballStemmer

            self._stemmer = SnowballStemmer(language)
        if self.lemma:
            if wordnet_available():
                from nltk.stem import WordNetLemmatizer

                self._lemmatizer = WordNetLemmatizer()
            else:
                log.warning("NLTK WordNet data not installed: lemma matching skipped")
                self.lemma = False
        self._cache: dict[int, frozenset[str]] = {}

    @property
    def normalises(self) -> bool:
        return self.stem or self.lemma

    def keys(self, token_id: int) -> frozenset[str]:
        """Normalised word forms of one token (empty when it has no letters/digits)."""
        token_id = int(token_id)
        got = self._cache.get(token_id)
        if got is not None:
            return got
        keys: set[str] = set()
        if self.normalises:
            w = self.tokenizer.decode([token_id], skip_special_tokens=False,
                                      clean_up_tokenization_spaces=False).strip().lower()
            if w and any(c.isalnum() for c in w) and "\ufffd" not in w:
                if self._stemmer is not None:
                    keys.add("s:" + self._stemmer.stem(w))
                if self._lemmatizer is not None:
                    for pos in ("n", "v", "a"):
                        keys.add("s:" + self._lemmatizer.lemmatize(w, pos))
                    # lemma and stem keys share a namespace: "same after stemming or lemmatization"
        fk = frozenset(keys)
        self._cache[token_id] = fk
        return fk

    def surface_keys(self, surface: np.ndarray) -> set[str]:
        out: set[str] = set()
        if self.normalises:
            for t in surface.tolist():
                out |= self.keys(t)
        return out

    def status(self, token_id: int, surface: set[int], surface_keys: set[str]) -> str:
        if int(token_id) in surface:
            return LITERAL
        if self.normalises and self.keys(token_id) & surface_keys:
            return STEM
        return NOVEL


# ----------------------------------------------------------------------------- metrics (eq.6-8)


def _check_pairs(ranked: np.ndarray, surface: Sequence[np.ndarray]) -> np.ndarray:
    ranked = np.asarray(ranked)
    if ranked.ndim != 2 or ranked.shape[0] != len(surface):
        raise InvalidInputError(f"ranked must be [n, width] with n = {len(surface)} surface sets, got {ranked.shape}")
    return ranked


def _matched(ranked_row: np.ndarray, s: np.ndarray, matcher: TokenMatcher | None) -> tuple[np.ndarray, set[int]]:
    """(bool per aligned token: matched?, surface ids matched by some aligned token)."""
    sset = set(s.tolist())
    if matcher is None or not matcher.normalises:
        hit = np.fromiter((t in sset for t in ranked_row.tolist()), dtype=bool, count=len(ranked_row))
        return hit, sset & set(ranked_row.tolist())
    skeys = matcher.surface_keys(s)
    hit = np.zeros(len(ranked_row), dtype=bool)
    matched: set[int] = set()
    akeys: set[str] = set()
    for j, t in enumerate(ranked_row.tolist()):
        if t in sset:
            hit[j] = True
            matched.add(t)
        else:
            k = matcher.keys(t)
            if k & skeys:
                hit[j] = True
            akeys |= k
    if akeys:
        matched |= {t for t in sset if matcher.keys(t) & akeys}
    return hit, matched


def hit_at_k(ranked: np.ndarray, surface: Sequence[np.ndarray], k: int = 10,
             matcher: TokenMatcher | None = None) -> float:
    """Hit@K, “A Text is Worth Several Tokens” eq.6: share of texts whose top-K aligned tokens contain a surface token
    (or, with a normalising matcher, a stem/lemma match).  Texts with empty T_s are skipped."""
    ranked = _check_pairs(ranked, surface)
    if not 1 <= k <= ranked.shape[1]:
        raise InvalidInputError(f"k must be in [1, {ranked.shape[1]}] (ranking width), got {k}")
    vals = [bool(_matched(ranked[i, :k], s, matcher)[0].any()) for i, s in enumerate(surface) if len(s)]
    return float(np.mean(vals)) if vals else float("nan")


def local_alignment_rate(ranked: np.ndarray, surface: Sequence[np.ndarray],
                         matcher: TokenMatcher | None = None) -> float:
    """LAR, “A Text is Worth Several Tokens” eq.7: mean over texts of |T̂^{K_i} ∩ T_s| / K_i with K_i = |T_s|.
    With a normalising matcher the numerator counts aligned tokens that are literal or
    stem/lemma matches.  Texts with empty T_s are skipped."""
    ranked = _check_pairs(ranked, surface)
    vals = []
    for i, s in enumerate(surface):
        K = len(s)
        if K == 0:
            continue
        if K > ranked.shape[1]:
            raise InvalidInputError(f"ranking width {ranked.shape[1]} < |T_s| = {K} for text {i}")
        vals.append(_matched(ranked[i, :K], s, matcher)[0].sum() / K)
    return float(np.mean(vals)) if vals else float("nan")


def global_alignment_rate(ranked: np.ndarray, surface: Sequence[np.ndarray],
                          matcher: TokenMatcher | None = None) -> float:
    """GAR, “A Text is Worth Several Tokens” eq.8: |∪_i (T̂^{K_i} ∩ T_s_i)| / |∪_i T_s_i|.  With a normalising
    matcher a surface token counts as aligned when some top-K_i token matches it by
    stem/lemma."""
    ranked = _check_pairs(ranked, surface)
    num: set[int] = set()
    den: set[int] = set()
    for i, s in enumerate(surface):
        K = len(s)
        if K == 0:
            continue
        if K > ranked.shape[1]:
            raise InvalidInputError(f"ranking width {ranked.shape[1]} < |T_s| = {K} for text {i}")
        den |= set(s.tolist())
        num |= _matched(ranked[i, :K], s, matcher)[1]
    return len(num) / len(den) if den else float("nan")


def alignment_metrics(ranked: np.ndarray, surface: Sequence[np.ndarray], k: int = 10,
                      matcher: TokenMatcher | None = None) -> dict[str, float]:
    """Hit@k, LAR and GAR exactly (token ids), plus ``*_stem`` variants when ``matcher``
    normalises.  Also ``n_texts`` used (non-empty T_s) and ``mean_surface`` = mean |T_s|."""
    used = [len(s) for s in surface if len(s)]
    out: dict[str, float] = {
        f"hit@{k}": hit_at_k(ranked, surface, k),
        "lar": local_alignment_rate(ranked, surface),
        "gar": global_alignment_rate(ranked, surface),
        "n_texts": len(used),
        "mean_surface": float(np.mean(used)) if used else 0.0,
    }
    if matcher is not None and matcher.normalises:
        out[f"hit@{k}_stem"] = hit_at_k(ranked, surface, k, matcher)
        out["lar_stem"] = local_alignment_rate(ranked, surface, matcher)
        out["gar_stem"] = global_alignment_rate(ranked, surface, matcher)
    return out


# ----------------------------------------------------------------------------- spectral (§4)


def variation(H_hat: np.ndarray, H_base: np.ndarray, U: np.ndarray) -> np.ndarray:
    """v_j = E_i[(ĥ_i − h_i)ᵀ u_j] for every basis vector (“A Text is Worth Several Tokens” eq.10): float64 [d].
    Rows of H_hat and H_base must be the same texts in the same order."""
    A, B = np.asarray(H_hat, dtype=np.float64), np.asarray(H_base, dtype=np.float64)
    if A.shape != B.shape or A.ndim != 2:
        raise InvalidInputError(f"H_hat and H_base must have the same 2-D shape, got {A.shape} and {B.shape}")
    U = np.asarray(U, dtype=np.float64)
    if U.ndim != 2 or U.shape[0] != A.shape[1]:
        raise InvalidInputError(f"U must be [d, m] with d={A.shape[1]}, got {U.shape}")
    return (A - B).mean(axis=0) @ U


def v1_share(v: np.ndarray) -> float:
    """|v_1| / Σ_j |v_j|: how much of the change lies in the first principal component."""
    a = np.abs(np.asarray(v, dtype=np.float64))
    s = a.sum()
    return float(a[0] / s) if s > 0 else float("nan")


@dataclass
class Contributions:
    """Top-k aligned tokens of one h split by eq.12: total = first + rest."""

    ids: np.ndarray  # int32 [k]
    total: np.ndarray  # float32 [k]  C = E_g h
    first: np.ndarray  # float32 [k]  C^1st = E_g (u1ᵀh) u1
    rest: np.ndarray  # float32 [k]   C^rest = E_g h^rest


def pc_contributions(h: np.ndarray, lm_head: torch.Tensor | np.ndarray, u1: np.ndarray, k: int = 10,
                     mask_ids: Iterable[int] | np.ndarray | None = None) -> Contributions:
    """“A Text is Worth Several Tokens” eq.11-12 for one embedding: rank tokens by C = E_g·h and split each logit
    into the first principal component's part E_g·(u1ᵀh)u1 and the rest's E_g·h^rest."""
    h = np.asarray(h, dtype=np.float32).ravel()
    u = np.asarray(u1, dtype=np.float64).ravel()
    if u.size != h.size:
        raise InvalidInputError(f"u1 has {u.size} dims, h has {h.size}")
    ids, total = project_topk(h[None, :], lm_head, k, mask_ids=mask_ids)
    h1 = (float(u @ h) * u).astype(np.float32)
    first = token_logits(h1[None, :], lm_head, [ids[0]])[0]
    return Contributions(ids[0], total[0], first, (total[0] - first).astype(np.float32))


def lambda_sweep(H: np.ndarray, u1: np.ndarray, lm_head: torch.Tensor | np.ndarray,
                 lams: Sequence[float], surface: Sequence[np.ndarray] | None = None, k: int = 10,
                 mask_ids: Iterable[int] | np.ndarray | None = None,
                 matcher: TokenMatcher | None = None) -> list[dict[str, Any]]:
    """Aligned tokens of h + λ·u1 (“A Text is Worth Several Tokens” eq.14) for each λ: per λ the top-k ids and
    logits of every row, and (when ``surface`` is given) the alignment metrics."""
    out = []
    for lam in lams:
        Ha = adjust(H, u1, float(lam))
        ids, logits = project_topk(Ha, lm_head, k, mask_ids=mask_ids)
        rec: dict[str, Any] = {"lambda": float(lam), "ids": ids, "logits": logits}
        if surface is not None:
            ranked = aligned_rankings(Ha, lm_head, surface, k=k, mask_ids=mask_ids)
            rec["metrics"] = alignment_metrics(ranked, surface, k=k, matcher=matcher)
        out.append(rec)
    return out


# ----------------------------------------------------------------------------- display


def token_label(tokenizer: Any, token_id: int) -> str:
    """Readable token: its decoded text with a leading space shown as '_' (as the paper
    prints them) and control characters escaped."""
    t = tokenizer.decode([int(token_id)], skip_special_tokens=False, clean_up_tokenization_spaces=False)
    raw = tokenizer.convert_ids_to_tokens(int(token_id))
    if isinstance(raw, str) and raw[:1] in ("Ġ", "▁") and not t.startswith(" "):
        t = " " + t  # sentencepiece decoders drop the leading space of a lone token
    if t.startswith(" "):
        t = "_" + t[1:]
    t = t.encode("unicode_escape").decode("ascii") if not t.isprintable() else t
    return t or f"⟨{token_id}⟩"


_STYLE = {LITERAL: "green", STEM: "yellow", NOVEL: "red"}


def alignment_table(texts: Sequence[str], ranked: np.ndarray, surface: Sequence[np.ndarray], tokenizer: Any,
                    k: int = 10, matcher: TokenMatcher | None = None, title: str | None = None,
                    text_width: int = 60):
    """A rich Table: per text, its top-k aligned tokens coloured literal (green), stem/lemma
    match (yellow), novel (red) — “A Text is Worth Several Tokens” Table 2's colour code.  The markers [=], [~], [+]
    keep the classes readable without colour."""
    from rich.table import Table
    from rich.text import Text

    matcher = matcher or TokenMatcher(tokenizer, "stem")
    tbl = Table(title=title, show_lines=True)
    tbl.add_column("text", overflow="fold", max_width=text_width)
    tbl.add_column(f"top-{k} aligned tokens ([=] literal  [~] stem  [+] novel)", overflow="fold")
    mark = {LITERAL: "=", STEM: "~", NOVEL: "+"}
    for i, text in enumerate(texts):
        s = np.asarray(surface[i])
        sset, skeys = set(s.tolist()), matcher.surface_keys(s)
        cell = Text()
        for t in ranked[i, :k].tolist():
            st = matcher.status(t, sset, skeys)
            cell.append(f"{token_label(tokenizer, t)}[{mark[st]}]", style=_STYLE[st])
            cell.append("  ")
        short = text if len(text) <= 3 * text_width else text[: 3 * text_width] + "…"
        tbl.add_row(short, cell)
    return tbl


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_spectrum(vs: dict[str, np.ndarray], path: str, top: int | None = None) -> None:
    """v_j against j for each (base, embedder) pair (“A Text is Worth Several Tokens” Fig.3)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4))
    for name, v in vs.items():
        v = np.asarray(v)[:top] if top else np.asarray(v)
        ax.plot(np.arange(1, len(v) + 1), v, label=f"{name} (v1={v[0]:.2f}, share={v1_share(v):.2f})", lw=1)
    ax.axhline(0, color="grey", lw=0.5)
    ax.set_xscale("log")
    ax.set_xlabel("principal component j (SVD of base embeddings)")
    ax.set_ylabel("variation v_j (eq.10)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_metrics(results: dict[str, dict[str, float]], path: str, keys: Sequence[str] = ("hit@10", "lar", "gar")) -> None:
    """Grouped bars of Hit@K / LAR / GAR per embedder (“A Text is Worth Several Tokens” Fig.2)."""
    plt = _plt()
    names = list(results)
    fig, ax = plt.subplots(figsize=(max(5, 1.6 * len(names) + 2), 4))
    w = 0.8 / len(keys)
    for j, key in enumerate(keys):
        vals = [results[n].get(key, np.nan) for n in names]
        ax.bar(np.arange(len(names)) + (j - (len(keys) - 1) / 2) * w, vals, w, label=key)
    ax.set_xticks(np.arange(len(names)))
    ax.set_xticklabels(names, rotation=20, ha="right", fontsize=8)
    ax.set_ylim(0, 1)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_contributions(c: Contributions, tokenizer: Any, path: str, title: str = "") -> None:
    """Stacked bars of C^1st and C^rest for the top tokens (“A Text is Worth Several Tokens” Fig.4a, eq.12)."""
    plt = _plt()
    fig, ax = plt.subplots(figsize=(6, 0.3 * len(c.ids) + 1.5))
    y = np.arange(len(c.ids))[::-1]
    ax.barh(y + 0.2, c.first, height=0.4, color="tab:orange", label="C^1st (first PC)")
    ax.barh(y - 0.2, c.rest, height=0.4, color="tab:blue", label="C^rest")
    ax.scatter(c.total, y, color="k", s=10, zorder=3, label="total")
    ax.set_yticks(y)
    ax.set_yticklabels([token_label(tokenizer, t) for t in c.ids], fontsize=7)
    ax.axvline(0, color="grey", lw=0.5)
    ax.set_xlabel("logit contribution (eq.12)")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ----------------------------------------------------------------------------- one report

#: λ = factor · v1 (“A Text is Worth Several Tokens” Fig.4b uses 0.95, 1, 1.05)
LAMBDA_FACTORS = (0.0, 0.5, 0.9, 0.95, 1.0, 1.05, 1.1, 1.5)


@dataclass
class AlignmentReport:
    """JSON-able ``summary`` plus the arrays the plots need."""

    summary: dict[str, Any]
    rankings: dict[str, np.ndarray]
    surface: list[np.ndarray]
    spectra: dict[str, np.ndarray]
    sweep: list[dict[str, Any]] | None
    contributions: dict[str, Contributions]


def analyze_embeddings(texts: Sequence[str], embeddings: dict[str, np.ndarray], tokenizer: Any,
                       lm_head: torch.Tensor | np.ndarray, mask_ids: Iterable[int] | np.ndarray | None = None,
                       base: str | None = None, target: str | None = None, k: int = 10,
                       match: str = "stem", max_length: int | None = None,
                       lam_factors: Sequence[float] = LAMBDA_FACTORS, example: int = 0) -> AlignmentReport:
    """“A Text is Worth Several Tokens” §3-4 on one text set, for several embedders of the same LLM.

    ``embeddings``: name -> H [n, d] (rows = ``texts``).  For each embedder: Hit@k, LAR, GAR
    (exact and stem/lemma).  With two or more embedders, ``base`` (default: "last" if present,
    else the first) plays f and the others f̂: SVD basis of the base embeddings (eq.9),
    v_j (eq.10) and v1_share.  PC1 sweep (eq.14) on the base embeddings with
    λ = factor·v1 of (base → ``target``; default "prompteol" if present, else the first other
    embedder); with one embedder λ = −factor·mean(u1ᵀh) (removing that share of the common
    component).  Contributions (eq.11-12) for text ``example``.
    """
    names = list(embeddings)
    if not names:
        raise InvalidInputError("embeddings is empty")
    n = len(texts)
    for nm, H in embeddings.items():
        if np.asarray(H).shape[0] != n:
            raise InvalidInputError(f"embeddings[{nm!r}] has {np.asarray(H).shape[0]} rows for {n} texts")
    if not 0 <= example < n:
        raise InvalidInputError(f"example must index a text in [0, {n}), got {example}")
    mask = np.asarray(sorted(set(np.ravel(mask_ids).tolist())) if mask_ids is not None else [], dtype=np.int64)
    matcher = TokenMatcher(tokenizer, match) if match != "exact" else None
    surface = surface_sets(texts, tokenizer, max_length=max_length, exclude=mask)
    rankings: dict[str, np.ndarray] = {}
    per: dict[str, dict[str, Any]] = {}
    for nm in names:
        rankings[nm] = aligned_rankings(embeddings[nm], lm_head, surface, k=k, mask_ids=mask)
        per[nm] = alignment_metrics(rankings[nm], surface, k=k, matcher=matcher)
    summary: dict[str, Any] = {
        "n_texts": n, "k": k, "match": match, "lemma_used": bool(matcher and matcher.lemma),
        "embedders": per,
    }
    if base is None:
        base = "last" if "last" in embeddings else names[0]
    if base not in embeddings:
        raise InvalidInputError(f"base embedder {base!r} not among {names}")
    Hb = np.asarray(embeddings[base], dtype=np.float32)
    U, s = svd_basis(Hb)
    u1 = U[:, 0].astype(np.float32)
    spectra: dict[str, np.ndarray] = {}
    spec: dict[str, Any] = {"base": base, "singular_values_top": s[:10].tolist()}
    for nm in names:
        if nm == base:
            continue
        v = variation(embeddings[nm], Hb, U)
        spectra[f"{nm} - {base}"] = v
        spec[nm] = {"v1": float(v[0]), "v1_share": v1_share(v), "v_top": v[:10].tolist(),
                    "abs_v_rank_of_max": int(np.argmax(np.abs(v))) + 1}
        per[nm]["v1_share"] = spec[nm]["v1_share"]
    summary["spectral"] = spec
    others = [x for x in names if x != base]
    if target is None and others:
        target = "prompteol" if "prompteol" in others else others[0]
    if target is not None and target not in embeddings:
        raise InvalidInputError(f"target embedder {target!r} not among {names}")
    mean_proj = float((Hb @ u1).mean())
    if target is not None:
        unit = float(spectra[f"{target} - {base}"][0])
        how = f"factor * v1({target} - {base})"
    else:
        unit = -mean_proj
        how = "factor * (-mean u1·h)"
    lams = [f * unit for f in lam_factors]
    sweep = lambda_sweep(Hb, u1, lm_head, lams, surface=surface, k=k, mask_ids=mask, matcher=matcher)
    summary["pc1"] = {
        "base": base, "target": target, "lambda": how, "unit": unit, "mean_u1_projection": mean_proj,
        "sweep": [{"factor": f, "lambda": r["lambda"], **r["metrics"]} for f, r in zip(lam_factors, sweep)],
    }
    for r, f in zip(sweep, lam_factors):
        r["factor"] = f
    contrib = {nm: pc_contributions(embeddings[nm][example], lm_head, u1, k=k, mask_ids=mask) for nm in names}
    summary["contributions"] = {
        nm: [{"token": token_label(tokenizer, t), "total": float(a), "first": float(b), "rest": float(c)}
             for t, a, b, c in zip(cc.ids.tolist(), cc.total, cc.first, cc.rest)]
        for nm, cc in contrib.items()
    }
    return AlignmentReport(summary, rankings, surface, spectra, sweep, contrib)


def write_plots(report: AlignmentReport, tokenizer: Any, out_dir: str, prefix: str = "",
                example: int = 0, k: int = 10) -> list[str]:
    """PNG files for a report: metrics bars, v_j spectrum, λ sweep, contributions."""
    import os

    os.makedirs(out_dir, exist_ok=True)
    paths = []
    p = os.path.join(out_dir, f"{prefix}alignment_metrics.png")
    plot_metrics(report.summary["embedders"], p, keys=(f"hit@{k}", "lar", "gar"))
    paths.append(p)
    if report.spectra:
        p = os.path.join(out_dir, f"{prefix}spectrum.png")
        plot_spectrum(report.spectra, p)
        paths.append(p)
    if report.sweep:
        p = os.path.join(out_dir, f"{prefix}lambda_sweep.png")
        # the left panel shows every λ; the token panels only 0 and the paper's 0.95, 1, 1.05 × v1
        pick = [r for r in report.sweep if r.get("factor") in (0.0, 0.95, 1.0, 1.05)] or report.sweep
        plot_lambda_sweep(report.sweep, pick, tokenizer, p, report.surface[example], example, k,
                          f"λ  ({report.summary['pc1']['lambda']})")
        paths.append(p)
    for nm, c in report.contributions.items():
        safe = re.sub(r"[^\w.\-]+", "_", nm).strip("_") or "embedder"
        p = os.path.join(out_dir, f"{prefix}contributions_{safe}.png")
        plot_contributions(c, tokenizer, p, title=f"{nm}: eq.12 split, text #{example}")
        paths.append(p)
    return paths


def plot_lambda_sweep(all_rows: list[dict[str, Any]], token_rows: list[dict[str, Any]], tokenizer: Any,
                      path: str, surface: np.ndarray, row: int = 0, k: int = 10, label: str = "λ") -> None:
    """Left: Hit@k / LAR / GAR of h + λ·u1 against λ (``all_rows`` from :func:`lambda_sweep`
    with metrics).  Right: the top-k tokens of text ``row`` with their logits at each λ of
    ``token_rows`` (“A Text is Worth Several Tokens” Fig.4b), coloured literal / stem / novel."""
    plt = _plt()
    fig, axes = plt.subplots(1, 1 + len(token_rows), figsize=(4 + 2.6 * len(token_rows), 4.2),
                             gridspec_kw={"width_ratios": [1.6] + [1] * len(token_rows)})
    ax = axes[0]
    xs = [r["lambda"] for r in all_rows]
    for key in (f"hit@{k}", "lar", "gar"):
        ax.plot(xs, [r["metrics"].get(key, np.nan) for r in all_rows], marker="o", label=key)
    ax.set_xlabel(label, fontsize=8)
    ax.set_ylim(0, 1)
    ax.legend(fontsize=8)
    ax.set_title("alignment of h + λ·u1 (eq.14)", fontsize=9)
    m = TokenMatcher(tokenizer, "stem")
    sset, skeys = set(np.asarray(surface).tolist()), m.surface_keys(np.asarray(surface))
    color = {LITERAL: "tab:green", STEM: "gold", NOVEL: "tab:red"}
    for ax, r in zip(axes[1:], token_rows):
        ids, lg = r["ids"][row], r["logits"][row]
        y = np.arange(len(ids))[::-1]
        ax.barh(y, lg, color=[color[m.status(t, sset, skeys)] for t in ids.tolist()])
        ax.set_yticks(y)
        ax.set_yticklabels([token_label(tokenizer, t) for t in ids], fontsize=7)
        ax.set_title(f"{r.get('factor', 0):g}·v1 (λ={r['lambda']:.3g})", fontsize=8)
        ax.tick_params(axis="x", labelsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
