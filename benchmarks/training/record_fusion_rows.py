"""Re-record the fused rows of shipped models in benchmarks/results/training.json after a change
of the fusion (e.g. its guard), from fresh ``alignir beir --json`` results: only the three-leg
field (``ndcg@10_dense+sparse+bm25``) is replaced; the single legs must equal the recorded ones
within 1e-4 (the encoders did not change), else the row is left alone and reported. The
row keeps its other fields and gains ``fusion_command`` (the beir command of the new value) and
``fusion_before`` (the value replaced).

    alignir beir ../shared/datasets/adi --model NAME --index DIR --json > adi-NAME.json
    python -m benchmarks.training.record_fusion_rows adi-NAME.json --run NAME \\
        --command "alignir beir ../shared/datasets/adi --model NAME --json"

Result file: benchmarks/results/training.json (rows DATASET/RUN).
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from benchmarks.training.record_beir_run import FIELDS, OUT, _write

FUSED = "ndcg@10_dense+sparse+bm25"
SINGLE = [f for f in FIELDS if f != FUSED]


def rerecord(result: dict, run: str, command: str, out: Path = OUT) -> dict:
    """Replace the three-leg value of row ``DATASET/run`` with ``result``'s (see the module docstring)."""
    data = json.loads(out.read_text())
    key = f"{result['dataset']}/{run}"
    row = data["runs"].get(key)
    if row is None:
        raise SystemExit(f"no recorded row {key} in {out}")
    new = {f: round(result["metrics"][m]["ndcg@10"], 4) for f, m in FIELDS.items() if m in result["metrics"]}
    moved = {f: (row[f], new[f]) for f in SINGLE if f in row and f in new and abs(row[f] - new[f]) > 1e-4}
    if moved:
        raise SystemExit(f"{key}: single legs differ from the recorded ones {moved}; re-record the whole row")
    row["fusion_before"] = row.get("fusion_before", row[FUSED])
    row[FUSED] = new[FUSED]
    row["fusion_command"] = command
    _write(data, out)
    return row


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("result", help="the JSON printed by `alignir beir --json`")
    ap.add_argument("--run", required=True)
    ap.add_argument("--command", required=True, help="the alignir beir command that produced RESULT")
    args = ap.parse_args(argv)
    row = rerecord(json.loads(Path(args.result).read_text()), args.run, args.command)
    print(f"{args.run}: {FUSED} {row['fusion_before']} -> {row[FUSED]}")


if __name__ == "__main__":
    main()
