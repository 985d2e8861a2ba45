"""Record one ``alignir beir --json`` result as a run of benchmarks/results/training.json
(key ``DATASET/RUN``; ``scifact`` is the full test set).

    alignir beir ../shared/datasets/adi --model smollm2-135m-alignir --json > adi.json
    python -m benchmarks.training.record_beir_run adi.json --run smollm2-135m-alignir --method infonce \
        --adapter builtin:smollm2-135m-alignir --shipped \
        --command "alignir beir ../shared/datasets/adi --model smollm2-135m-alignir --json"

Every number comes from the given JSON and, with ``--adapter``, from the adapter's saved training
record (steps, examples seen and CPU-seconds summed over its stages); nothing is typed by hand.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

OUT = Path(__file__).resolve().parents[1] / "results" / "training.json"
#: training.json field -> search mode of `alignir beir`
FIELDS = {"ndcg@10_dense": "dense", "ndcg@10_sparse": "sparse", "ndcg@10_hybrid": "hybrid",
          "ndcg@10_dense+sparse+bm25": "dense+sparse+bm25", "ndcg@10_bm25": "bm25"}


def _write(data: dict, out: Path) -> None:
    """Replace ``out`` with ``data`` atomically (a half-written results file is never left)."""
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    tmp.replace(out)


def cost_fields(adapter: str, steps: int | None) -> dict:
    """The row fields of an adapter's training cost (alignir's ``training_cost``); ``steps``, when
    given, must be the adapter's total (a mismatch means the wrong folder)."""
    from alignir.encoders.embedders.adapters import training_cost

    cost = training_cost(adapter)
    if steps is not None and cost["steps"] is not None and steps != cost["steps"]:
        raise SystemExit(f"--steps {steps} but the adapter {adapter} trained {cost['steps']} steps")
    cpu = cost["cpu_seconds"]
    return {"steps": cost["steps"], "examples_seen": cost["examples_seen"],
            "train_cpu_seconds": None if cpu is None else round(cpu),
            "train_stages": [f"{s['stage']}:{s['steps']}:{s['data']}" for s in cost["stages"]]}


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
    _write(data, out)
    return row


def add_cost(keys: list[str], adapter: str, out: Path = OUT) -> dict[str, dict]:
    """Add ``adapter``'s training cost to already recorded runs (their steps must agree)."""
    data = json.loads(out.read_text())
    missing = [k for k in keys if k not in data["runs"]]
    if missing:
        raise SystemExit(f"no recorded runs {missing} in {out}")
    for k in keys:
        cost = cost_fields(adapter, data["runs"][k]["steps"])
        cost.pop("steps")
        data["runs"][k].update(cost)
    _write(data, out)
    return {k: data["runs"][k] for k in keys}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("result", nargs="?", help="the JSON printed by `alignir beir --json`")
    ap.add_argument("--run")
    ap.add_argument("--method")
    ap.add_argument("--steps", type=int, default=None, help="training steps (default: the adapter's, else 0)")
    ap.add_argument("--adapter", default=None, help="the adapter folder (or builtin:NAME) the run read through: "
                                                    "records its steps, examples seen and CPU-seconds")
    ap.add_argument("--command", help="the alignir beir command that produced RESULT")
    ap.add_argument("--cost-of", nargs="+", metavar="KEY", default=None,
                    help="instead of recording a result: add --adapter's training cost to these recorded runs "
                         "(DATASET/RUN keys)")
    ap.add_argument("--shipped", action="store_true")
    ap.add_argument("--train-command", default=None)
    args = ap.parse_args()
    if args.cost_of:
        if not args.adapter:
            ap.error("--cost-of needs --adapter")
        print(json.dumps(add_cost(args.cost_of, args.adapter), indent=1))
        return
    if not (args.result and args.run and args.method and args.command):
        ap.error("RESULT, --run, --method and --command are required")
    extra = {"train_command": args.train_command} if args.train_command else {}
    steps = args.steps
    if args.adapter:
        cost = cost_fields(args.adapter, args.steps)
        steps = cost.pop("steps")
        extra.update(cost)
    row = record(json.loads(Path(args.result).read_text()), args.run, args.method, steps or 0, args.command,
                 args.shipped, extra)
    print(json.dumps(row, indent=1))


if __name__ == "__main__":
    main()
