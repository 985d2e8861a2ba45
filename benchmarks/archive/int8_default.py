"""Is int8 free for the default model? Its `alignir beir --precision int8` runs against the fp32 rows
of the same model recorded in training.json (`DATASET/smollm2-135m-alignir-v3`, made by the same
command without --precision), leg set by leg set.

The rule: int8 becomes the model's default precision only if every leg set of every collection is
within ``--tolerance`` nDCG@10 (0.005) of fp32. The rows and the verdict go to int8_quality.json
under ``default_model``.

    alignir beir ../shared/datasets/adi --precision int8 --index IDX --json > adi.json   # per collection
    python -m benchmarks.archive.int8_default adi.json med.json ...

Result file: benchmarks/results/int8_quality.json.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

RESULTS = Path(__file__).resolve().parents[1] / "results"
MODEL = "smollm2-135m-alignir-v3"
#: training.json field -> `alignir beir` mode
FIELDS = {"dense": "ndcg@10_dense", "sparse": "ndcg@10_sparse", "hybrid": "ndcg@10_hybrid",
          "dense+sparse+bm25": "ndcg@10_dense+sparse+bm25"}


def rows_for(run: dict, fp32: dict, command: str) -> list[dict]:
    out = []
    for mode, field in FIELDS.items():
        if mode not in run["metrics"] or fp32.get(field) is None:
            continue
        int8 = float(run["metrics"][mode]["ndcg@10"])
        out.append({"dataset": run["dataset"], "mode": mode, "model": MODEL, "ndcg10_fp32": fp32[field],
                    "ndcg10_int8": round(int8, 4), "delta": round(int8 - fp32[field], 4),
                    "command_int8": command.format(dataset=run["dataset"]), "command_fp32": fp32.get("command")})
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="+", help="alignir beir --precision int8 --json outputs")
    ap.add_argument("--tolerance", type=float, default=0.005)
    ap.add_argument("--command", default="alignir beir ../shared/datasets/{dataset} --precision int8 --json")
    args = ap.parse_args(argv)
    recorded = json.loads((RESULTS / "training.json").read_text())["runs"]
    rows = []
    for path in args.runs:
        run = json.loads(Path(path).read_text())
        fp32 = recorded.get(f"{run['dataset']}/{MODEL}")
        if fp32 is None:
            raise SystemExit(f"no fp32 row {run['dataset']}/{MODEL} in training.json")
        rows += rows_for(run, fp32, args.command)
    worst = min(rows, key=lambda r: r["delta"])
    verdict = {"tolerance": args.tolerance, "collections": sorted({r["dataset"] for r in rows}),
               "int8_default": all(r["delta"] >= -args.tolerance for r in rows),
               "worst": {k: worst[k] for k in ("dataset", "mode", "delta")}}
    out = RESULTS / "int8_quality.json"
    data = json.loads(out.read_text())
    data["default_model"] = {"rows": rows, "verdict": verdict}
    out.write_text(json.dumps(data, indent=1) + "\n")
    print(json.dumps(verdict))


if __name__ == "__main__":
    main()
