"""Re-record the three-leg ADI rows of the kept adapters in benchmarks/results/gpu_train.json
after a change of the fusion (e.g. the calibrated fusion's per-query guard,
retrieval/fusion_guard.py), by scoring each run again in gpu_train's harness on this CPU in fp32
with the product's fusion as it is (``benchmarks.gpu.gpu_train.score``; an interpolated run is
rebuilt from its kept sources first). Only the ``dense+sparse+bm25`` metrics are replaced; every
single leg must equal the recorded one within 1e-4 (the weights did not change), else the row is
left alone and reported. A row scored on a GPU (``GPU_ROWS``: gpu-distill-85's ADI row, fp32 on
an H100, recorded to 4 decimals) comes back on the CPU within 2e-3 only: its legs are checked
within that, and its new three-leg value is the CPU's. The row keeps its other fields and gains
``fusion_command`` (the command of the new value) and ``fusion_before`` (the ndcg@10 replaced; the
first one when a row is re-recorded again).

    nice -n 5 python -m benchmarks.training.record_gpu_fusion_rows                  # every run of RUNS
    nice -n 5 python -m benchmarks.training.record_gpu_fusion_rows --run v4-map-scifact-fw

The same for training.json from ``alignir beir`` results: record_fusion_rows.py.
"""
from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from benchmarks.common import DATASETS
from benchmarks.gpu.gpu_train import RESULTS, ROOT, _write

FUSED = "dense+sparse+bm25"
#: the runs whose ADI rows tests/test_kept_adapters.py re-scores from their kept adapters (their
#: weights, and those of a kept map's source adapter, stay in the tree: tests/test_repository_size.py)
KEPT_RUNS = ("gpu-distill-85", "v3-map-scifact", "v3-map-scifact-fw", "gemma3-map-scifact-fw", "v4-map-scifact-fw",
             "v4-map-scifact-fw3e-5", "long-base-gemma3-270m-1500-mined-1500-bio-200",
             "gemma3-bio-map-scifact-fw3e-5")
#: the interpolated runs it rebuilds from their kept sources and re-scores
INTERPOLATED_RUNS = ("cpu-interpolated-v3-gemma-teacher-050",)
RUNS = KEPT_RUNS + INTERPOLATED_RUNS
TOLERANCE = 1e-4
#: ADI rows scored on a GPU: how far their single legs may be from this CPU's
GPU_ROWS = {"gpu-distill-85": 2e-3}


def adi_row(run: dict) -> dict:
    """The run's one ADI row (under ``trained``, or ``interpolated`` for an interpolation)."""
    rows = [scores["adi"] for scores in run.get("scores", {}).values() if "adi" in scores]
    if len(rows) != 1:
        raise SystemExit(f"expected one ADI row, found {len(rows)}")
    return rows[0]


def interpolation_source(recorded: str) -> str:
    """An interpolation source as recorded: ``builtin:NAME`` as is, a repository path made absolute."""
    return recorded if recorded.startswith("builtin:") else str(ROOT / recorded)


def adapter_of(run: dict, work: Path) -> str:
    """The run's adapter: its kept folder, or the interpolation of its kept sources rebuilt in ``work``."""
    mix = run.get("interpolation")
    if not mix:
        return str(ROOT / run["kept_adapter"])
    from alignir.encoders.train.interpolate import interpolate_adapters

    return str(interpolate_adapters(interpolation_source(mix["start"]), interpolation_source(mix["end"]), mix["weight"], work / "adapter"))


def rerecord(results: Path, name: str, metrics: dict, command: str) -> dict[str, tuple[float, float]]:
    """Replace the three-leg metrics of run ``name``'s ADI row with ``metrics``' (a fresh score's);
    return the single legs that moved beyond the tolerance, {mode: (recorded, got)}: then the
    file is left alone."""
    data = json.loads(results.read_text())
    row = adi_row(data["runs"][name])
    recorded = row["metrics"]
    tol = GPU_ROWS.get(name, TOLERANCE)
    moved = {m: (v["ndcg@10"], metrics[m]["ndcg@10"]) for m, v in recorded.items()
             if m != FUSED and abs(v["ndcg@10"] - metrics[m]["ndcg@10"]) > tol}
    if moved:
        return moved
    row.setdefault("fusion_before", recorded[FUSED]["ndcg@10"])
    recorded[FUSED] = metrics[FUSED]
    row["fusion_command"] = command
    _write(results.parent, results.name, data)
    return {}


def main(argv: list[str] | None = None) -> int:
    from benchmarks.gpu.gpu_train import score

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--run", action="append", choices=RUNS, help="a run to re-record (repeatable; default: all)")
    args = ap.parse_args(argv)
    left = 0
    for name in args.run or RUNS:
        run = json.loads(RESULTS.read_text())["runs"][name]
        recorded = adi_row(run)["metrics"]
        with tempfile.TemporaryDirectory() as tmp:
            got = score(DATASETS / "adi", adapter_of(run, Path(tmp)), Path(tmp) / "work", device="cpu", dtype="fp32")
        moved = rerecord(RESULTS, name, got["metrics"], f"python -m benchmarks.training.record_gpu_fusion_rows --run {name}")
        left += bool(moved)
        legs = max(abs(v["ndcg@10"] - got["metrics"][m]["ndcg@10"]) for m, v in recorded.items() if m != FUSED)
        print(f"{name}: left alone, single legs moved {moved}" if moved
              else f"{name}: {FUSED} {recorded[FUSED]['ndcg@10']} -> {got['metrics'][FUSED]['ndcg@10']} "
                   f"(single legs within {legs:.1e})", flush=True)
    return 1 if left else 0


if __name__ == "__main__":
    raise SystemExit(main())
