"""nDCG@10 of the default model encoded on a runtime (default: ONNX Runtime fp32, what
``--runtime auto`` picks on a CPU) against the recorded torch rows of the same model.

For each collection: ``alignir beir DATASET --runtime RUNTIME --json`` into a fresh index and a
fresh embedding cache (the cache is keyed by the encoder fingerprint, which the runtime does not
change: a shared cache would hand back torch's vectors), then every mode's nDCG@10 beside the
row ``DATASET/MODEL`` of benchmarks/results/training.json (torch fp32, with its command). The
verdict: every mode within ``--tolerance`` (0.005, the bar a precision change must meet).

    python -m benchmarks.quality.runtime_quality --datasets adi med cisi cran scifact \\
        --out benchmarks/results/runtime_quality.json
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.common import DATASETS

ROOT = Path(__file__).resolve().parents[2]
MODES = ("dense", "sparse", "hybrid", "dense+sparse+bm25", "bm25")


def reference(dataset: str, model: str) -> dict:
    """The recorded torch row of ``model`` on ``dataset`` (benchmarks/results/training.json)."""
    runs = json.loads((ROOT / "benchmarks/results/training.json").read_text())["runs"]
    row = runs.get(f"{dataset}/{model}")
    if row is None:
        raise SystemExit(f"no recorded row {dataset}/{model} in training.json")
    return row


def run_beir(dataset: str, model: str, runtime: str, work: Path) -> tuple[dict, float]:
    cmd = [str(Path(sys.executable).with_name("alignir")), "beir", str(DATASETS / dataset), "--model", model,
           "--runtime", runtime, "--json", "--index", str(work / "index"), "--cache-dir", str(work / "cache")]
    t0 = time.perf_counter()
    out = subprocess.run(cmd, check=True, capture_output=True, text=True)
    return json.loads(out.stdout), time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--datasets", nargs="+", default=["adi", "med", "cisi", "cran", "scifact"])
    ap.add_argument("--model", default="smollm2-135m-alignir-v3")
    ap.add_argument("--runtime", default="onnx")
    ap.add_argument("--tolerance", type=float, default=0.005)
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/runtime_quality.json"))
    args = ap.parse_args(argv)
    out = Path(args.out)
    result = json.loads(out.read_text()) if out.is_file() else {"rows": []}
    for dataset in args.datasets:
        ref = reference(dataset, args.model)
        with tempfile.TemporaryDirectory() as tmp:
            got, seconds = run_beir(dataset, args.model, args.runtime, Path(tmp))
        result["rows"] = [r for r in result["rows"] if (r["dataset"], r["runtime"]) != (dataset, args.runtime)]
        for mode in MODES:
            have = got["metrics"].get(mode, {}).get("ndcg@10")
            want = ref.get(f"ndcg@10_{mode}")
            if have is None or want is None:
                continue
            result["rows"].append({"dataset": dataset, "model": args.model, "runtime": args.runtime, "mode": mode,
                                   "ndcg@10": have, "ndcg@10_torch": want, "delta": have - want,
                                   "recall@100": got["metrics"][mode].get("recall@100"),
                                   "seconds": round(seconds, 1), "torch_command": ref.get("command"),
                                   "command": f"alignir beir ../shared/datasets/{dataset} --model {args.model} "
                                              f"--runtime {args.runtime} --json (fresh index and cache)"})
        print(dataset, {m: round(got["metrics"][m]["ndcg@10"] - ref[f"ndcg@10_{m}"], 4)
                        for m in MODES if m in got["metrics"] and f"ndcg@10_{m}" in ref}, f"{seconds:.0f}s", flush=True)
        worst = max(abs(r["delta"]) for r in result["rows"])
        result.update({"tolerance": args.tolerance, "max_abs_delta": worst, "passes": worst <= args.tolerance,
                       "command": "python -m benchmarks.quality.runtime_quality " + " ".join(sys.argv[1:] if argv is None else argv),
                       "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                       "load_note": "run beside a niced training job (quality only; its seconds are not a timing)",
                       "machine": f"{os.uname().machine}, {os.cpu_count()} cores"})
        out.write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
