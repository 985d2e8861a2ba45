"""Seconds per LoRA training step on the CPU, fp32 against ``--dtype bf16``, in one run.

The same ``alignir train infonce`` command (the shipped adapter as the start, SciFact train pairs
with one BM25 negative, batch 8 × 128 tokens, seed 1) runs ``--steps`` steps in each dtype, one
after the other; a step's time is read from the trainer's loss log (``seconds`` per step, the
first step left out: it loads data and warms up). The losses of both runs are kept side by side:
the same batches in the same order, so they show what bf16 weights do to the objective. On a CPU
with bf16 matrix instructions (AVX512_BF16, AMX) torch runs bf16 matmuls through oneDNN at several
times its fp32 rate; elsewhere bf16 is emulated and slower.

    python -m benchmarks.archive.train_dtype --steps 6 --out benchmarks/results/train_dtype.json
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from alignir.environment import cpu_flags
from benchmarks.common import DATASETS

ROOT = Path(__file__).resolve().parents[2]
DATA = DATASETS / "scifact"


def train(dtype: str, steps: int, threads: int, work: Path) -> dict:
    out = work / dtype
    cmd = [str(Path(sys.executable).with_name("alignir")), "train", "infonce", "--init-adapter",
           "builtin:smollm2-135m-alignir-v3", "--data", str(DATA), "--negatives", "1", "--steps", str(steps),
           "--batch-size", "8", "--max-length", "128", "--lr", "5e-5", "--threads", str(threads), "--seed", "1",
           "--out", str(out)] + (["--dtype", dtype] if dtype != "fp32" else [])
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    log = [json.loads(x) for x in (out / "loss_log.jsonl").read_text().splitlines() if x.strip()]
    log = [r for r in log if "step" in r and "seconds" in r]
    step_s = [b["seconds"] - a["seconds"] for a, b in zip(log, log[1:])]
    return {"dtype": dtype, "steps": len(log), "seconds_per_step_median": statistics.median(step_s),
            "seconds_per_step": step_s, "losses": [r["loss"] for r in log],
            "command": " ".join(["alignir", *cmd[1:]]).replace(str(out), f"OUT/{dtype}")}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/train_dtype.json"))
    args = ap.parse_args(argv)
    load = [os.getloadavg()[0]]
    with tempfile.TemporaryDirectory() as tmp:
        rows = []
        for dtype in ("fp32", "bf16"):
            rows.append(train(dtype, args.steps, args.threads, Path(tmp)))
            load.append(os.getloadavg()[0])
    speedup = rows[0]["seconds_per_step_median"] / rows[1]["seconds_per_step_median"]
    result = {"rows": rows, "bf16_speedup": speedup, "threads": args.threads, "cpu_flags": cpu_flags(),
              "loadavg_1min": load, "machine": f"{os.uname().machine}, {os.cpu_count()} cores",
              "command": "python -m benchmarks.archive.train_dtype " + " ".join(sys.argv[1:] if argv is None else argv),
              "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({r["dtype"]: (round(r["seconds_per_step_median"], 2), [round(x, 3) for x in r["losses"]])
                      for r in rows}), f"bf16 {speedup:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
