"""Text-form benchmark: how a model's legs (the default's unless ``--model``) hold when a
collection's text comes in capitals or lower case without punctuation, with the LLM's text form "auto" (runs of capitals
read in sentence case, encoders.text_form) and "off" (text read as given).

Five settings per collection (corpus form / query form):

- ``original``: both as published;
- ``queries-capitals``: the queries in capitals;
- ``both-capitals``: corpus and queries in capitals;
- ``lower-corpus-capital-queries``: the corpus lower-cased without punctuation, the queries in capitals;
- ``both-lower``: both lower-cased without punctuation.

Each is scored by nDCG@10 of BM25, dense, sparse and the three legs (dense+sparse+bm25, the
default fusion) through the product: ``build_index`` on the variant corpus (fusion calibrated
on its pseudo-queries), then ``Searcher``, which reads capital queries through the index's word
forms under "auto" (encoders.word_forms; a row's ``word_forms`` counts them, 0 for a corpus in
capitals or under "off"). Goals: three legs >= BM25 and within 0.02 of the
original; dense within 0.05 of the original (the original of the same model and text form).

One embedding cache (``--work``/cache; ``--work`` defaults to a folder per model) serves every build: the cache keys vectors by the text
the transformer reads, so a setting whose read text equals an earlier one's encodes nothing
(the lower-case corpus under either form; the natural corpus under "auto" and "off"). Each
setting's leg lists (top ``--k`` of each leg, and of the calibration pseudo-queries, in the
format of benchmarks/quality/dump_leg_lists.py plus ``setting`` and ``text_form``) go to
``--work``/lists/COLLECTION-SETTING-FORM.json.gz, outside git, for offline fusion rules.

Result file: benchmarks/results/text_form.json (rows merged by model, collection, form and
setting, so collections and models can be run one at a time). Each row names its ``model``; a
row without one (written before rows named it) is the file's top-level ``model``, the default's.

    nice -n 10 python -m benchmarks.quality.text_form --collections adi
    nice -n 10 python -m benchmarks.quality.text_form --collections med
    nice -n 10 python -m benchmarks.quality.text_form --collections adi --model gemma3-270m-alignir
    nice -n 10 python -m benchmarks.quality.text_form --collections adi --adapter benchmarks/results/adapters/RUN
"""
from __future__ import annotations

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

from alignir.encoders.text_form import lower_without_punctuation
from benchmarks.common import DATASETS

ROOT = Path(__file__).resolve().parents[2]
RESULT = ROOT / "benchmarks" / "results" / "text_form.json"
WORK = Path("/work/scratch/text_form")
#: the model of rows that name none (the default when rows began to name their model)
LEGACY_MODEL = "smollm2-135m-alignir-v4"
THREE = "dense+sparse+bm25"
MODES = ("bm25", "dense", "sparse", THREE)
LEGS = ("dense", "sparse", "bm25")
#: setting -> (corpus form, query form)
SETTINGS: dict[str, tuple[str, str]] = {
    "original": ("natural", "natural"),
    "queries-capitals": ("natural", "capitals"),
    "both-capitals": ("capitals", "capitals"),
    "lower-corpus-capital-queries": ("lower", "capitals"),
    "both-lower": ("lower", "lower"),
}
PASS_ORDER = [("natural", "auto"), ("natural", "off"), ("capitals", "auto"), ("lower", "auto"), ("lower", "off"),
              ("capitals", "off")]
GOALS = {"three_legs_vs_bm25": 0.0, "three_legs_vs_original": 0.02, "dense_vs_original": 0.05}

FORMS: dict[str, Callable[[str], str]] = {"natural": lambda t: t, "capitals": str.upper,
                                          "lower": lower_without_punctuation}


def write_variant(src: Path, dst: Path, corpus_form: str, query_form: str) -> Path:
    """A BEIR folder at ``dst``: ``src`` with its corpus (title and text) and queries in the given forms."""
    dst.mkdir(parents=True, exist_ok=True)
    for name, form in (("corpus.jsonl", corpus_form), ("queries.jsonl", query_form)):
        fn = FORMS[form]
        with open(src / name, encoding="utf-8") as f, open(dst / name, "w", encoding="utf-8") as out:
            for line in f:
                if not line.strip():
                    continue
                rec = json.loads(line)
                for key in ("title", "text"):
                    if isinstance(rec.get(key), str):
                        rec[key] = fn(rec[key])
                out.write(json.dumps(rec, ensure_ascii=False) + "\n")
    if (dst / "qrels").exists():
        shutil.rmtree(dst / "qrels")
    shutil.copytree(src / "qrels", dst / "qrels")
    return dst


def cached_rows(cache: Path) -> int:
    """Document vectors held by the embedding cache (every fingerprint)."""
    return sum(int(np.load(p)["keys"].shape[0]) for p in cache.glob("*/document/*.npz"))


def load_avg() -> list[float]:
    return [float(x) for x in Path("/proc/loadavg").read_text().split()[:3]]


def score_setting(collection: str, setting: str, form: str, args: argparse.Namespace) -> dict[str, Any]:
    """Build (or reuse from the cache) the index of one setting and score its legs."""
    from alignir.retrieval.beir import load_beir
    from alignir.retrieval.evaluation import evaluate_runs, run_queries
    from alignir.retrieval.indexer import build_index
    from alignir.retrieval.searcher import Searcher

    from benchmarks.quality.dump_leg_lists import _by_id, _pseudo

    corpus_form, query_form = SETTINGS[setting]
    work = Path(args.work)
    folder = write_variant(Path(args.data) / collection, work / "data" / collection / setting, corpus_form, query_form)
    index = work / "indexes" / f"{collection}-{corpus_form}-{form}"
    cache = work / "cache"
    before, t0 = cached_rows(cache) if cache.exists() else 0, time.perf_counter()
    if index not in args.built:  # settings of one corpus form share its index (queries differ)
        build_index(folder, index, **args.build_options, cache_dir=cache, text_form=form, progress=False,
                    on_stage=lambda s: print(f"  [{collection} {setting} {form}] {s}", file=sys.stderr, flush=True))
        args.built.add(index)
    build_s = time.perf_counter() - t0
    encoded = cached_rows(cache) - before
    ds = load_beir(folder)
    s = Searcher.open(index)
    try:
        t1 = time.perf_counter()
        runs, _ = run_queries(s, ds.queries, MODES, k=100, progress=False)
        metrics = evaluate_runs(ds.qrels, runs, ("ndcg@10",))
        qids = list(ds.queries)
        lists = s.leg_lists([ds.queries[q] for q in qids], LEGS, k=args.k)
        legs = {leg: {q: _by_id(s, run) for q, run in zip(qids, lists[leg])} for leg in LEGS}
        dump = {"dataset": collection, "setting": setting, "text_form": form, "corpus_form": corpus_form,
                "query_form": query_form, "index": str(index), "model": s.index.manifest.get("embedder", {}),
                "k": args.k, "qrels": ds.qrels, "legs": legs, **_pseudo(s, ds)}
        plan = s.plan(THREE).to_dict()
        word_forms = 0 if s.word_forms is None else len(s.word_forms)
        search_s = time.perf_counter() - t1
    finally:
        s.close()
    out = work / "lists" / f"{collection}-{setting}-{form}.json.gz"
    out.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(out, "wt") as f:
        json.dump(dump, f)
    ndcg = {m: round(float(metrics[m]["ndcg@10"]), 4) for m in MODES}
    return {"model": args.model, "collection": collection, "setting": setting, "text_form": form, "corpus_form": corpus_form,
            "query_form": query_form, "queries": len(ds.queries), "word_forms": word_forms, "ndcg@10": ndcg,
            "new_document_vectors": encoded, "build_seconds": round(build_s, 1),
            "search_seconds": round(search_s, 1), "load_avg": load_avg(), "lists": str(out), "plan": plan}


def goals(row: dict[str, Any], original: dict[str, Any] | None) -> dict[str, Any]:
    """The goals of one row against the original setting of its model, collection and form."""
    n = row["ndcg@10"]
    out: dict[str, Any] = {"three_legs_ge_bm25": n[THREE] >= n["bm25"] - GOALS["three_legs_vs_bm25"]}
    if original is not None:
        o = original["ndcg@10"]
        out["three_legs_within_0.02_of_original"] = n[THREE] >= o[THREE] - GOALS["three_legs_vs_original"]
        out["dense_within_0.05_of_original"] = n["dense"] >= o["dense"] - GOALS["dense_vs_original"]
        out["delta_vs_original"] = {m: round(n[m] - o[m], 4) for m in MODES}
    out["met"] = all(v for k, v in out.items() if isinstance(v, bool))
    return out


def row_key(row: dict[str, Any]) -> tuple[str, str, str, str]:
    """(model, collection, text form, setting): what names a row (``model`` set by :func:`merge`)."""
    return row["model"], row["collection"], row["text_form"], row["setting"]


def merge(result: dict[str, Any], row: dict[str, Any]) -> None:
    """Put ``row`` into ``result`` (replacing the row of the same model, collection, form and
    setting) and recompute every row's goals against the original of its model. Rows without a
    model get the file's ``model``; the file's model's rows come first."""
    default = result.setdefault("model", LEGACY_MODEL)
    for r in result["rows"]:
        r.setdefault("model", default)
    row.setdefault("model", default)
    rows = [r for r in result["rows"] if row_key(r) != row_key(row)] + [row]
    order = list(SETTINGS)
    rows.sort(key=lambda r: (r["model"] != default, r["model"], r["collection"], r["text_form"],
                             order.index(r["setting"])))
    originals = {row_key(r)[:3]: r for r in rows if r["setting"] == "original"}
    for r in rows:
        r["goals"] = goals(r, originals.get(row_key(r)[:3]))
    result["rows"] = rows


def write_result(out: Path, default_model: str, run: dict[str, Any], rows: list[dict[str, Any]]) -> None:
    """Merge this run's rows and command into the result file as it is now on disk (another run
    may have written other collections or models meanwhile), atomically. The file's ``model``
    (the model of rows that name none) is kept; a new file takes ``default_model``."""
    result = json.loads(out.read_text()) if out.exists() else {}
    result.setdefault("model", default_model)
    result.update(description=__doc__.split("\n\n")[0].replace("\n", " "), goals=GOALS,
                  settings={k: {"corpus": c, "queries": q} for k, (c, q) in SETTINGS.items()})
    result.setdefault("rows", [])
    for row in rows:
        merge(result, row)
    result["commands"] = [c for c in result.get("commands", []) if c.get("command") != run["command"]] + [run]
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps(result, indent=1) + "\n")
    tmp.replace(out)


def work_folder(model: str, default_model: str) -> Path:
    """The default ``--work`` of ``model``: one per model, so no two models share indexes or leg lists."""
    return WORK if model == default_model else WORK.with_name(f"{WORK.name}-{Path(model).name}")


def commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main(argv: list[str] | None = None) -> None:
    from alignir.encoders.shipped import DEFAULT_MODEL

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--collections", default="adi", help="comma-separated folders under --data")
    ap.add_argument("--forms", default="auto,off", help="text forms to score: auto, off")
    ap.add_argument("--settings", default=",".join(SETTINGS), help="comma-separated settings")
    ap.add_argument("--model", default=DEFAULT_MODEL)
    ap.add_argument("--adapter", default=None, help="a trained adapter folder in place of --model, indexed as the "
                    "training harness scores adapters (benchmarks.gpu.gpu_train); its rows name the folder")
    ap.add_argument("--data", default=str(DATASETS))
    ap.add_argument("--work", default=None, help="variant folders, indexes, cache and leg lists (outside git; "
                    f"default {WORK} for the default model, {WORK}-MODEL for another)")
    ap.add_argument("--k", type=int, default=1000, help="depth of the leg lists written")
    ap.add_argument("--out", default=str(RESULT))
    args = ap.parse_args(argv)
    args.built = set()
    args.build_options = {"model": args.model}
    if args.adapter is not None:
        from benchmarks.gpu.gpu_train import adapter_build_options

        args.build_options = adapter_build_options(args.adapter)
        args.model = Path(args.adapter).name
    if args.work is None:
        args.work = str(work_folder(args.model, DEFAULT_MODEL))
    settings = [s for s in args.settings.split(",") if s]
    forms = [f for f in args.forms.split(",") if f]
    unknown = [s for s in settings if s not in SETTINGS] + [f for f in forms if f not in ("auto", "off")]
    if unknown:
        ap.error(f"unknown setting or form: {', '.join(unknown)}")
    out = Path(args.out)
    command = "nice -n 10 python -m benchmarks.quality.text_form " + " ".join(argv if argv is not None else sys.argv[1:])
    run = {"command": command.strip(), "commit": commit(), "started": time.strftime("%Y-%m-%d %H:%M:%S"),
           "load_avg_start": load_avg()}
    mine: list[dict[str, Any]] = []
    # one corpus pass per (corpus form, text form), in the order that answers the goals first: the
    # natural corpus (auto and off read nearly the same), capitals read by "auto", the lower-case
    # corpus (read the same under both), and last capitals read as given
    by_corpus = sorted(((c, s, f) for c in args.collections.split(",") if c for s in settings for f in forms),
                       key=lambda t: (t[0], PASS_ORDER.index((SETTINGS[t[1]][0], t[2])), list(SETTINGS).index(t[1])))
    for collection, setting, form in by_corpus:
        row = score_setting(collection, setting, form, args)
        mine.append(row)
        run["load_avg_end"] = load_avg()
        write_result(out, DEFAULT_MODEL, run, mine)
        n = row["ndcg@10"]
        print(f"{args.model} {collection} {setting:30s} {form:4s} bm25 {n['bm25']:.4f} dense {n['dense']:.4f} "
              f"sparse {n['sparse']:.4f} three {n[THREE]:.4f} new vectors {row['new_document_vectors']} "
              f"build {row['build_seconds']}s load {row['load_avg'][0]}", flush=True)


if __name__ == "__main__":
    main()
