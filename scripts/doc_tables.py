"""Headline tables rendered from the committed result files, for the task pages.

``standing()`` is the table of docs/models.md (every shipped model and the anchors a user would
build instead: nDCG@10 on the five collections, and the indexing cost); ``goals()`` the goal
count of each shipped model. ``scripts/gen_results.py`` puts both on docs/results.md, and
tests/test_doc_tables.py checks that docs/models.md carries the standing table as rendered.
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
COLLECTIONS = (("scifact", "SciFact"), ("med", "MED"), ("cisi", "CISI"), ("cran", "Cranfield"), ("adi", "ADI"))
THREE = "dense+sparse+bm25"
#: the anchors of quality.json shown beside the shipped models: (label, model, method)
ANCHORS = (("BM25 alone (alignir's BM25 leg)", "alignir-bm25", "bm25"),
           ("all-MiniLM-L6-v2 + BM25 (z-score 0.5/0.5)", "all-MiniLM-L6-v2", "dense+bm25-zscore-0.5"),
           ("EmbeddingGemma-300M + BM25 (z-score 0.5/0.5)", "embeddinggemma-300m", "dense+bm25-zscore-0.5"))


def _load(name: str):
    return json.loads((RESULTS / name).read_text())


def _ship_rule():
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    from benchmarks.decisions import ship_rule
    return ship_rule


def current(command: str) -> str:
    """A recorded command with its benchmark script at today's path: ``python benchmarks/NAME.py``
    and ``python -m benchmarks.NAME`` (recorded before the scripts had folders) become
    ``python -m benchmarks.FOLDER.NAME``; the arguments are kept as recorded."""
    def move(m: re.Match) -> str:
        found = sorted(ROOT.glob(f"benchmarks/*/{m.group(2)}.py"))
        return f"{m.group(1)} -m benchmarks.{found[0].parent.name}.{m.group(2)}" if len(found) == 1 else m.group(0)
    return re.sub(r"(python3?)\s+(?:-m\s+benchmarks\.|benchmarks/)(\w+)(?:\.py)?(?=\s|$)", move, command)


def shipped_models() -> list[str]:
    """The shipped models with product rows: the default first, then the newest registered first."""
    from alignir.encoders.shipped import DEFAULT_MODEL, SHIPPED
    have = _ship_rule().shipped_names(_load("training.json"))
    newest_first = [m for m in reversed(list(SHIPPED)) if m in have]
    return sorted(newest_first, key=lambda m: m != DEFAULT_MODEL)


def _index_seconds(gpu: dict, model: str) -> str:
    source = _ship_rule().SHIPPED_FROM.get(model)
    score = gpu["runs"].get(source, {}).get("scores", {}).get("trained", {}).get("scifact", {}) if source else {}
    return f"{score['build_seconds']:,.0f} s" if "build_seconds" in score else "–"


def standing() -> str:
    """nDCG@10 three legs / dense of each shipped model, the anchors below them, and the SciFact
    index build time recorded for the model's source run (2 CPU cores)."""
    from alignir.encoders.shipped import DEFAULT_MODEL, SHIPPED
    rule = _ship_rule()
    training, gpu = _load("training.json"), _load("gpu_train.json")
    head = ["model", "base"] + [label for _, label in COLLECTIONS] + ["SciFact index (2 CPU cores)"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for model in shipped_models():
        rows = rule.shipped_rows(training, gpu, model)
        cells = [f"{rows[c][THREE]:.3f} / {rows[c]['dense']:.3f}" if c in rows else "–" for c, _ in COLLECTIONS]
        name = f"`{model}`" + (" (default)" if model == DEFAULT_MODEL else "")
        lines.append("| " + " | ".join([name, SHIPPED[model].base_model] + cells + [_index_seconds(gpu, model)])
                     + " |")
    quality = {(r["dataset"], r["model"], r["method"]): r["ndcg@10"] for r in _load("quality.json")}
    for label, model, method in ANCHORS:
        cells = [f"{quality[(c, model, method)]:.3f}" if (c, model, method) in quality else "–"
                 for c, _ in COLLECTIONS]
        lines.append("| " + " | ".join([label, "–"] + cells + ["–"]) + " |")
    return "\n".join(lines)


def goals() -> str:
    """Goals met, missed and unmeasured of each model judged in goals.json (its command first)."""
    data = _load("goals.json")
    lines = [f"`{current(data['command'])}`", "", "| model | goals met | missed | unmeasured | stretch goals met |",
             "|---|---|---|---|---|"]
    for model, s in data["summary"].items():
        lines.append(f"| `{model}` | {s['met']} | {s['missed']} | {s['unmeasured']} | {s['stretch_met']} |")
    return "\n".join(lines)


#: the setups of end_to_end.json: (key, label)
SETUPS = (("alignir_three_legs", "alignir, three legs (ONNX Runtime, the default)"),
          ("alignir_three_legs_torch", "alignir, three legs (torch)"),
          ("alignir_bm25_only", "alignir, BM25 leg only"),
          ("minilm_plus_bm25s", "all-MiniLM-L6-v2 + bm25s"))


def cost() -> str:
    """Indexing documents/s and query latency of the default model against a MiniLM + BM25
    pipeline, from end_to_end.json (its command and the load it ran under first)."""
    data = _load("end_to_end.json")
    load = ", ".join(f"{x:.1f}" for x in data.get("load_average_before", []))
    lines = [f"`{current(data['command'])}` ({data.get('machine', '')}, load average before: {load})", "",
             "| collection | setup | documents/s (index) | query p50 ms | query p99 ms |", "|---|---|---|---|---|"]
    for row in data["rows"]:
        for key, label in SETUPS:
            r = row.get(key)
            if r:
                docs = f"{r['documents_per_s']:.1f}" if "documents_per_s" in r else "–"
                lines.append(f"| {row['dataset']} | {label} | {docs} | {r['query']['p50_ms']:.1f} | "
                             f"{r['query']['p99_ms']:.1f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(standing())
