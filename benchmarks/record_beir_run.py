"""Record one ``alignir beir --json`` result as a run of benchmarks/results/training.json
(issue 19's layout: key ``DATASET/RUN``; ``scifact`` is the full test set).

    alignir beir ../shared/datasets/adi --model smollm2-135m-alignir --json > adi.json
    python benchmarks/record_beir_run.py adi.json --run smollm2-135m-alignir --method infonce \
        --steps 360 --shipped --command "alignir beir ../shared/datasets/adi --model smollm2-135m-alignir --json"

Every number comes from the given JSON; nothing is typed by hand.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

OUT = Path(__file__).resolve().parent / "results" / "training.json"
#: training.json field -> search mode of `alignir beir`
FIELDS = {"ndcg@10_dense": "dense", "ndcg@10_sparse": "sparse", "ndcg@10_hybrid": "hybrid",
          "ndcg@10_dense+sparse+bm25": "dense+sparse+bm25", "ndcg@10_bm25": "bm25"}


def record(result: dict, run: str, method: str, steps: int, command: str, shipped: bool = False,
           extra: dict | None = None, out: Path = OUT) -> dict:
    data = json.loads(out.read_text()) if out.exists() else {"runs": {}, "setups": {}}
    metrics = result["metrics"]
    row = {"method": method, "steps": steps, "dataset": result["dataset"], "queries": result["queries"],
           **{f: round(metrics[m]["ndcg@10"], 4) for f, m in FIELDS.items() if m in metrics},
           # `alignir beir`'s seconds.encode is the query encoding of its search phase (the index
           # was built before it, its document encoding is not in the result)
           "query_encode_seconds": round(result.get("seconds", {}).get("encode", 0.0), 1),
           "harness": "alignir beir (product defaults: centred cosine dense, index-default sparse, fusions)",
           "command": command, **(extra or {})}
    if shipped:
        row["shipped"] = True
    data.setdefault("runs", {})[f"{result['dataset']}/{run}"] = row
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    tmp.replace(out)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("result", help="the JSON printed by `alignir beir --json`")
    ap.add_argument("--run", required=True)
    ap.add_argument("--method", required=True)
    ap.add_argument("--steps", type=int, default=0)
    ap.add_argument("--command", required=True, help="the alignir beir command that produced RESULT")
    ap.add_argument("--shipped", action="store_true")
    ap.add_argument("--train-command", default=None)
    args = ap.parse_args()
    extra = {"train_command": args.train_command} if args.train_command else None
    row = record(json.loads(Path(args.result).read_text()), args.run, args.method, args.steps, args.command,
                 args.shipped, extra)
    print(json.dumps(row, indent=1))


if __name__ == "__main__":
    main()
