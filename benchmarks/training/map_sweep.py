"""Choose an aligned-token map's settings without a second labelled collection.

``alignir train sparse-map`` fits a d×d map before the LM head on one collection's train queries
(retrieval.sparse_map_fit). Its settings trade what the map gains there against what it costs
elsewhere: ``function_weight`` holds the map near the identity in what it does to other corpora's
token logits (too small: the map learns the fitted collection's vocabulary at the cost of every
other; too large: it gains nothing), ``breadth`` spends a share of its steps on title→text pairs of
other corpora. This sweep fits one map per setting (the same seed, steps and reference texts) and
records, for each, the two numbers the fit itself measures:

* the held-out train queries' aligned-token nDCG@10 (what the map gains where it was fitted), and
* the title→text aligned-token nDCG@10 on pairs of each ``--corpus`` folder the fit never saw
  (``transfer_pairs``; what it costs elsewhere), averaged over the folders.

The rule, fixed before any map is scored on a test collection: of the settings whose mean transfer
nDCG@10 after the map is at least the one before it (the map costs nothing elsewhere, on average),
the one with the largest held-out gain (the first given, on a tie); if none qualifies, the one
whose mean transfer falls least. No test collection enters the choice.

    python -m benchmarks.training.map_sweep --init-adapter builtin:smollm2-135m-alignir-v4 \\
        --model smollm2-135m --data ../shared/datasets/scifact --corpus /work/corpora/wordnet ... \\
        --setting function_weight=1e-5 --setting function_weight=3e-5,breadth=0.5 ... \\
        --work ../runs/map-sweep --out benchmarks/results/map_sweep.json

A setting whose map is already in ``--work`` (folder: the setting, '=' and ',' dropped) is read,
not fitted again.
"""
from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path
from typing import Any, Sequence

RECORD = "alignir_sparse_map.json"
#: the SparseMapConfig fields a setting may name
SWEPT = ("function_weight", "breadth", "identity_weight")


def parse_setting(text: str) -> dict[str, float]:
    """``"function_weight=3e-5,breadth=0.5"`` -> {"function_weight": 3e-05, "breadth": 0.5}."""
    out: dict[str, float] = {}
    for part in text.split(","):
        key, eq, value = part.strip().partition("=")
        if not eq or key not in SWEPT:
            raise ValueError(f"setting {text!r}: give KEY=VALUE pairs with KEY one of {', '.join(SWEPT)}")
        out[key] = float(value)
    return out


def folder_name(text: str) -> str:
    """The fit folder of a setting: ``function_weight=3e-5,breadth=0.5`` -> ``function_weight3e-5-breadth0.5``."""
    return "-".join(p.strip().replace("=", "") for p in text.split(","))


def _transfer_change(record: dict[str, Any]) -> float:
    t = record["transfer_ndcg@10"]
    return t["after"]["mean"] - t["before"]["mean"]


def _held_gain(record: dict[str, Any]) -> float:
    h = record["held_out_ndcg@10"]
    return h["after"] - h["before"]


def choose(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The rule above over fit records (``alignir_sparse_map.json`` of each setting, in the order
    given): the chosen record's index and settings, with why."""
    if not records:
        raise ValueError("no fit records to choose from")
    for r in records:
        if not r.get("transfer_ndcg@10"):
            raise ValueError(f"the fit with {r['config']} has no transfer measure (fit with --set transfer_pairs=N)")
    keep = [i for i, r in enumerate(records) if _transfer_change(r) >= 0]
    if keep:
        best = max(keep, key=lambda i: (_held_gain(records[i]), -i))
        why = "the largest held-out gain of the settings whose mean transfer nDCG@10 does not fall"
    else:
        best = max(range(len(records)), key=lambda i: (_transfer_change(records[i]), -i))
        why = "every setting lowers the mean transfer nDCG@10: the one that lowers it least"
    return {"index": best, "settings": {k: records[best]["config"][k] for k in SWEPT}, "why": why}


def summary_row(record: dict[str, Any]) -> dict[str, Any]:
    """One setting's line of the sweep: held-out gain, transfer change (mean and per corpus)."""
    held, t = record["held_out_ndcg@10"], record["transfer_ndcg@10"]
    return {**{k: record["config"][k] for k in SWEPT},
            "held_out_before": held["before"], "held_out_after": held["after"],
            "held_out_gain": round(_held_gain(record), 4),
            "transfer_change": {k: round(t["after"][k] - t["before"][k], 4) for k in t["after"]},
            "identity_distance": record["identity_distance"], "seconds": record["seconds"]}


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--init-adapter", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--data", required=True, help="the BEIR folder whose train split the map is fitted on")
    p.add_argument("--corpus", action="append", required=True, help="reference, breadth and transfer folders")
    p.add_argument("--setting", action="append", required=True, help="KEY=VALUE[,KEY=VALUE] (repeatable)")
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--transfer-pairs", type=int, default=200)
    p.add_argument("--work", required=True, help="one fit folder per setting")
    p.add_argument("--out", help="write the sweep here (JSON)")
    args = p.parse_args(argv)

    from alignir.encoders.embedders.adapters import adapter_dir, read_meta
    from alignir.encoders.train.sparse_map import SparseMapConfig
    from alignir.retrieval.sparse_map_fit import fit_sparse_map

    settings = [parse_setting(s) for s in args.setting]
    family = read_meta(adapter_dir(args.init_adapter)).get("method") or "infonce"
    records = []
    for text, setting in zip(args.setting, settings):
        folder = Path(args.work) / folder_name(text)
        if not (folder / RECORD).is_file():
            fit_sparse_map(args.data, folder, model=args.model, family=family, adapter=args.init_adapter,
                           corpora=args.corpus, transfer_pairs=args.transfer_pairs,
                           config=SparseMapConfig(steps=args.steps, **setting))
        record = json.loads((folder / RECORD).read_text())
        if any(record["config"][k] != v for k, v in setting.items()):
            raise SystemExit(f"{folder}: its fit has {record['config']}, not {text}")
        records.append(record)
    out = {"command": "python -m benchmarks.training.map_sweep " + " ".join(shlex.quote(a) for a in (
               argv if argv is not None else sys.argv[1:])),
           "source_adapter": args.init_adapter, "data": args.data, "corpora": args.corpus,
           "transfer_pairs": records[0]["transfer_ndcg@10"]["pairs_per_corpus"],
           "rule": "of the settings whose mean title->text transfer nDCG@10 does not fall, the largest held-out gain",
           "chosen": choose(records), "settings": [summary_row(r) for r in records], "fits": records}
    text = json.dumps(out, indent=1)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
