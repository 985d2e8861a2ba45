"""Query-encoding latency under OpenMP's two wait policies, on a quiet or a busy machine.

torch's CPU kernels run on OpenMP worker threads. By default (``OMP_WAIT_POLICY`` unset: libgomp spins
for a while before it sleeps) a worker that finishes its share spins waiting for the next parallel region; when the
machine has more runnable threads than cores, a spinning worker holds a core that the thread it
waits for needs, and a forward pass made of many short parallel regions slows down by one or two
orders of magnitude. ``PASSIVE`` makes waiting workers sleep at once (which costs every parallel
region a wake-up on a quiet machine); ``GOMP_SPINCOUNT`` bounds the spin before a worker sleeps.
alignir sets ``GOMP_SPINCOUNT=10000`` on import unless the user set either variable
(src/alignir/__init__.py).

The same question for ONNX Runtime, the default runtime on a CPU (encoders.onnx_runtime): its own
thread pool, whose idle threads sleep at once in alignir (``allow_spinning`` 0) or spin first.

Each setting runs in its own process (the policy is read when the OpenMP runtime starts): the
shipped model's query encoder (``alignir.Encoder``), two warm-up queries, then ``--repeats`` passes
over ten short queries one at a time; p50 / p99 / max seconds per query, with the 1-minute load
average before and after. ``--competitors N`` makes the machine busy in a reproducible way: N
processes of back-to-back 2-thread torch matrix products at the same priority, running for the
whole measurement. E.g. a quiet machine, then a busy one:

    python -m benchmarks.archive.omp_wait_policy --label quiet --out benchmarks/results/omp_wait_policy.json
    python -m benchmarks.archive.omp_wait_policy --label busy-3 --competitors 3 --out benchmarks/results/omp_wait_policy.json
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

QUERIES = ["effects of light on plant growth", "central bank interest rates and stock prices",
           "heat transfer in supersonic flow", "ranking documents by relevance", "how proteins fold",
           "a fox and a dog", "vitamin d deficiency and bone density", "boundary layer transition at high mach numbers",
           "information retrieval evaluation measures", "gene expression in yeast"]

#: (name, threads, environment of the OpenMP runtime: {} = its own default, runtime of the encoder)
SETTINGS = [("1 thread", 1, {}, "torch"), ("2 threads, OpenMP default wait", 2, {}, "torch"),
            ("2 threads, OMP_WAIT_POLICY=PASSIVE", 2, {"OMP_WAIT_POLICY": "PASSIVE"}, "torch"),
            ("2 threads, GOMP_SPINCOUNT=10000 (alignir default)", 2, {"GOMP_SPINCOUNT": "10000"}, "torch"),
            ("ONNX Runtime, 1 thread", 1, {"GOMP_SPINCOUNT": "10000"}, "onnx"),
            ("ONNX Runtime, 2 threads, idle threads sleep (alignir default)", 2, {"GOMP_SPINCOUNT": "10000"}, "onnx"),
            ("ONNX Runtime, 2 threads, idle threads spin", 2, {"GOMP_SPINCOUNT": "10000"}, "onnx-spin")]
OMP_VARS = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")

COMPETITOR = """
import torch
torch.set_num_threads(2)
a, w = torch.randn(64, 576), torch.randn(576, 1536)
while True:
    (a @ w).relu_()
"""


def child(threads: int, repeats: int, model: str, runtime: str = "torch") -> dict:
    import torch

    torch.set_num_threads(threads)
    from alignir import Encoder

    enc = Encoder.from_pretrained(model, device="cpu", runtime=runtime.split("-")[0])
    if runtime == "onnx-spin":
        from alignir.encoders.onnx_runtime import OnnxBackbone

        enc.embedder._backbone = OnnxBackbone(enc.embedder._backbone.path, threads=threads, spinning=True)
    enc.encode_queries(QUERIES[:2])
    times = []
    for _ in range(repeats):
        for q in QUERIES:
            t = time.perf_counter()
            enc.encode_queries([q])
            times.append(time.perf_counter() - t)
    times.sort()
    return {"queries": len(times), "p50_s": round(statistics.median(times), 4),
            "p99_s": round(times[min(len(times) - 1, int(0.99 * len(times)))], 4), "max_s": round(times[-1], 4)}


def _measure(args: argparse.Namespace, name: str, threads: int, omp: dict[str, str], runtime: str) -> dict:
    # the child imports torch before alignir, so alignir's own default does not reach the rows
    # that leave the runtime's default in place
    env = {k: v for k, v in os.environ.items() if k not in OMP_VARS}
    env.update(omp)
    load_before = os.getloadavg()[0]
    out = subprocess.run([sys.executable, __file__, "--label", args.label, "--repeats", str(args.repeats),
                          "--model", args.model, "--child", str(threads), "--child-runtime", runtime],
                         env=env, capture_output=True, text=True, check=True)
    row = {"setting": name, "threads": threads, "omp_env": omp, "runtime": runtime, "load_1min_before": round(load_before, 1),
           "load_1min_after": round(os.getloadavg()[0], 1), **json.loads(out.stdout.strip().splitlines()[-1])}
    print(json.dumps(row), flush=True)
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--label", required=True, help="the machine's state, e.g. quiet or busy")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--model", default="smollm2-135m-alignir-v3")
    ap.add_argument("--out", type=Path, default=None)
    ap.add_argument("--competitors", type=int, default=0, help="busy the machine with N torch processes")
    ap.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    ap.add_argument("--child-runtime", default="torch", help=argparse.SUPPRESS)
    ap.add_argument("--only", default="", help="run only the settings whose name contains this text")
    args = ap.parse_args(argv)
    if args.child is not None:
        print(json.dumps(child(args.child, args.repeats, args.model, args.child_runtime)))
        return 0
    competitors = [subprocess.Popen([sys.executable, "-c", COMPETITOR]) for _ in range(args.competitors)]
    try:
        if competitors:
            time.sleep(10)  # let the load average see them
        rows = [_measure(args, name, threads, omp, runtime) for name, threads, omp, runtime in SETTINGS
                if args.only in name]
    finally:
        for c in competitors:
            c.kill()
    result = {"label": args.label, "cores": os.cpu_count(), "model": args.model, "rows": rows,
              "competitors": args.competitors,
              "command": f"python -m benchmarks.archive.omp_wait_policy --label {args.label} --repeats {args.repeats}"
                         + (f" --competitors {args.competitors}" if args.competitors else "")
                         + (f" --out {args.out}" if args.out else "")}
    if args.out:
        data = json.loads(args.out.read_text()) if args.out.is_file() else {}
        if args.only and args.label in data:  # a partial run adds its rows to the label's
            kept = [r for r in data[args.label]["rows"] if r["setting"] not in {x["setting"] for x in rows}]
            result = {**data[args.label], "rows": kept + rows,
                      "command_" + args.only.replace(" ", "_"): result["command"] + f" --only '{args.only}'"}
        data[args.label] = result
        args.out.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
