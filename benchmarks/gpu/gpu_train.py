"""Train an InfoNCE adapter on a GPU and score it in the product's harness, in one run.

Made for a lent GPU machine that can fetch nothing (benchmarks/gpu/gpu_train.sh sets it up from
carried files: the SmolLM2 GGUF, the wheels the machine lacks, the collections, the teacher's
weights); with ``--device cpu`` it scores on a CPU (the encoder on ONNX Runtime fp32, as
``alignir beir``). Two steps, each written to ``--out`` as soon as it is done:

1. **Train** (``--train``): ``alignir train infonce`` with the given arguments, stopped by SIGTERM
   after ``--train-seconds`` if it has not finished (the trainer checkpoints the step in flight;
   the checkpoint is then the adapter scored). The adapter is packaged in fp16
   (``scripts/package_adapter.py``'s function) into ``OUT/adapter.tar`` with the loss log.
2. **Score** (``--score``): every collection as ``alignir beir --model smollm2-135m-alignir-v3``
   scores the shipped model (its family, 512 tokens, passages "auto", the v3 fusion defaults),
   with the trained adapter in place of v3's, on the base model the adapter records (SmolLM2 for
   v3's descendants, Gemma3-270M for an adapter trained on it): the modes dense, sparse, hybrid,
   dense+sparse+bm25 and bm25. The model runs in fp32 on the GPU for documents and queries
   (the same vectors as the CPU rows to about 1e-7 cosine: benchmarks/results/gpu_check.json),
   so the rows compare with the CPU rows of v3. ``--score-adapter NAME=PATH`` scores other
   adapters too (v3 itself, to check the harness against its CPU rows).

    python -m benchmarks.gpu.gpu_train --out OUT --train-seconds 330 --train "--data D/scifact ..." \\
        --score D/adi --score D/med --score-adapter v3=.gpu_carry/v3

``--record RUN`` merges the report into ``runs[RUN]`` of benchmarks/results/gpu_train.json (a run
scored over several calls accumulates its rows: :func:`record_run`); ``--kept-adapter DIR`` names
the fp16 copy kept in the repository (scripts/package_adapter.py ``--dest``).
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from dataclasses import replace
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

MODES = ("dense", "sparse", "hybrid", "dense+sparse+bm25", "bm25")
SHIPPED_NAME = "smollm2-135m-alignir-v3"  # whose harness (base model, family, fusion) scores the adapters


RESULTS = Path(__file__).resolve().parents[1] / "results" / "gpu_train.json"
ROOT = RESULTS.parents[2]


def portable_command(argv: list[str], root: Path = ROOT) -> str:
    """The recorded call, its paths under the checkout or beside it (``../shared``, ``../runs``)
    written relative to the checkout, so that the command reads the same on any machine."""
    root = Path(root)
    prefixes = ((f"{root}/../", "../"), (f"{root}/", ""), (f"{root.parent}/", "../"))

    def short(arg: str) -> str:
        for full, rel in prefixes:
            arg = arg.replace(full, rel)
        return arg

    return "python -m benchmarks.gpu.gpu_train " + " ".join(shlex.quote(short(a)) for a in argv)


def record_run(results: Path, name: str, report: dict, command: str, kept_adapter: str | None = None) -> dict:
    """Merge one call's ``report`` into ``results``' ``runs[name]`` and return the run.

    A run may be scored over several calls (the long collection in one, the rest in another):
    each adapter's rows accumulate (a collection scored again replaces its row), the calls'
    commands are joined with `` && ``, ``started`` stays the first call's and ``finished`` becomes
    this one's; the training record and the device are this call's when it has them.
    ``kept_adapter``: the repository folder that keeps the scored adapter."""
    data = json.loads(results.read_text()) if results.is_file() else {"runs": {}}
    run = data.setdefault("runs", {}).setdefault(name, {})
    if not _lists_call(run.get("command") or "", command):  # the same call run again is not listed twice
        run["command"] = " && ".join(c for c in (run.get("command"), command) if c)
    run.setdefault("started", report.get("started"))
    for key in ("finished", "device", "torch", "train"):
        if report.get(key) is not None:
            run[key] = report[key]
    for adapter, rows in report.get("scores", {}).items():
        run.setdefault("scores", {}).setdefault(adapter, {}).update(rows)
    if kept_adapter:
        run["kept_adapter"] = kept_adapter
    _write(results.parent, results.name, data)
    return run


def _lists_call(joined: str, command: str) -> bool:
    """Whether ``joined`` (calls joined by `` && ``) has ``command`` as whole calls; a call may
    itself hold `` && `` (a preparation step and the scoring), so the joined text is not split."""
    sep = " && "
    return joined == command or joined.startswith(command + sep) or joined.endswith(sep + command) \
        or (sep + command + sep) in joined


def _write(out: Path, name: str, obj: object) -> None:
    tmp = out / f".{name}.tmp"
    tmp.write_text(json.dumps(obj, indent=1, sort_keys=True))
    tmp.replace(out / name)


def train(args: argparse.Namespace, out: Path, run_dir: Path) -> dict:
    """Run the trainer in a child process; SIGTERM it at the deadline (it checkpoints and exits)."""
    cmd = [sys.executable, "-m", "alignir.retrieval.cli", "train", "infonce", "--out", str(run_dir),
           *shlex.split(args.train)]
    t0 = time.perf_counter()
    with open(out / "train.log", "w") as log:
        child = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
        try:
            rc = child.wait(timeout=args.train_seconds)
            stopped = False
        except subprocess.TimeoutExpired:
            child.send_signal(signal.SIGTERM)
            rc = child.wait()
            stopped = True
    seconds = time.perf_counter() - t0
    final = (run_dir / "adapter_model.safetensors").is_file()
    source = run_dir if final else run_dir / "checkpoint"
    state = {}
    if not final and (source / "trainer_state.json").is_file():
        state = json.loads((source / "trainer_state.json").read_text())
    record = {"command": "alignir train infonce --out RUN " + args.train, "returncode": rc, "seconds": round(seconds, 1),
              "stopped_at_deadline": stopped, "finished": final, "adapter_from": source.name,
              "steps_done": state.get("step"), "argv": cmd[1:]}
    if not (source / "adapter_model.safetensors").is_file():
        record["error"] = "no adapter written (see train.log)"
        return record
    from alignir.encoders.train.adapter import package_adapter

    packaged = run_dir.parent / "adapter-fp16"
    shutil.rmtree(packaged, ignore_errors=True)
    package_adapter(source, packaged)
    with tarfile.open(out / "adapter.tar", "w") as tar:
        tar.add(packaged, arcname="adapter")
        if (run_dir / "loss_log.jsonl").is_file():
            tar.add(run_dir / "loss_log.jsonl", arcname="loss_log.jsonl")
    record["adapter"] = str(packaged)
    return record


def adapter_base_model(adapter: str) -> str:
    """The registered base model an adapter was trained on (its ``alignir_train.json``), or the
    shipped model's base when the adapter does not record one."""
    from alignir.encoders.embedders.adapters import read_meta
    from alignir.encoders.shipped import SHIPPED

    return (read_meta(adapter).get("base_model") or {}).get("name") or SHIPPED[SHIPPED_NAME].base_model


def index_folder(folder: Path, adapter: str, work: Path) -> Path:
    """Where :func:`score` builds a collection's index for an adapter: one folder per collection
    and adapter path (as given), so a re-score of the same adapter rebuilds in place."""
    return work / f"{folder.name}-{hashlib.sha256(adapter.encode()).hexdigest()[:10]}"


def adapter_build_options(adapter: str) -> dict:
    """``build_index`` keywords that index with ``adapter`` as ``alignir beir`` indexes with the
    shipped model whose harness scores the adapters: that model's family, 512 tokens and fusion
    defaults, on the base model the adapter was trained on (``loaded`` not included)."""
    from alignir.encoders.shipped import SHIPPED
    from alignir.retrieval.config import IndexConfig

    shipped = SHIPPED[SHIPPED_NAME]
    cfg = IndexConfig()
    fusion = cfg.fusion if shipped.hybrid is None else replace(cfg.fusion, method=shipped.hybrid[0],
                                                                alpha=shipped.hybrid[1])
    cfg = replace(cfg, fusion=replace(fusion, leg_sets=dict(shipped.leg_sets)))
    return {"model": adapter_base_model(adapter), "embedder": shipped.family,
            "embedder_options": {"adapter": adapter, "max_length": 512}, "config": cfg}


def build_scored_index(folder: Path, adapter: str, work: Path, device: str, dtype: str) -> Path:
    """Build one collection's index as ``alignir beir`` does for the shipped model whose harness
    scores the adapters (:func:`adapter_build_options`); the dense vectors are cached in ``work/cache``."""
    from alignir.encoders.models import load_model
    from alignir.retrieval.indexer import build_index

    options = adapter_build_options(adapter)
    target = index_folder(folder, adapter, work)
    build_index(folder, target, **options, device=device, loaded=load_model(options["model"], device=device, dtype=dtype),
                cache_dir=work / "cache", progress=False)
    return target


def score(folder: Path, adapter: str, work: Path, device: str, dtype: str) -> dict:
    """One collection through the product's build + search + pytrec_eval, as ``alignir beir`` does,
    on the base model the adapter was trained on."""
    from alignir.encoders.models import load_model
    from alignir.retrieval.beir import load_beir
    from alignir.retrieval.evaluation import timed_eval
    from alignir.retrieval.searcher import Searcher

    base = adapter_base_model(adapter)
    t0 = time.perf_counter()
    target = build_scored_index(folder, adapter, work, device, dtype)
    built = time.perf_counter() - t0
    data = load_beir(folder, split="test")
    # a fresh copy of the base model: the build's copy carries the adapter's LoRA layers
    searcher = Searcher.open(target, loaded=load_model(base, device=device, dtype=dtype))
    try:
        out = timed_eval(searcher, data, MODES, k=100, progress=False)
    finally:
        searcher.close()
    return {"dataset": data.name, "base_model": base, "queries": len(data.queries), "build_seconds": round(built, 1),
            "metrics": out["metrics"], "search_seconds": out["seconds"]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--work", type=Path, default=None, help="run and index folder (default: OUT/../gpu-train-work)")
    ap.add_argument("--train", default=None, help="arguments of `alignir train infonce` (one string), no --out")
    ap.add_argument("--train-seconds", type=float, default=330.0)
    ap.add_argument("--score", action="append", type=Path, default=[], help="a BEIR folder to score (repeatable)")
    ap.add_argument("--score-adapter", action="append", default=[], help="NAME=PATH: score this adapter too")
    ap.add_argument("--device", default="auto")
    ap.add_argument("--dtype", default="fp32", help="the scoring encoder's dtype (training: --train's --dtype)")
    ap.add_argument("--record", default=None, metavar="RUN",
                    help=f"merge the report into runs[RUN] of {RESULTS.relative_to(RESULTS.parents[2])} when done")
    ap.add_argument("--kept-adapter", default=None, metavar="DIR",
                    help="with --record: the repository folder that keeps the scored adapter (fp16)")
    args = ap.parse_args(argv)
    import torch

    torch.backends.cuda.matmul.allow_tf32 = False  # fp32 scoring means fp32
    torch.backends.cudnn.allow_tf32 = False
    out = args.out
    out.mkdir(parents=True, exist_ok=True)
    work = args.work or out.parent / "gpu-train-work"
    work.mkdir(parents=True, exist_ok=True)
    report: dict = {"device": torch.cuda.get_device_name(0) if torch.cuda.is_available() else "cpu",
                    "torch": torch.__version__, "started": time.strftime("%Y-%m-%d %H:%M:%S"), "scores": {}}
    adapters = dict(a.split("=", 1) for a in args.score_adapter)
    if args.train:
        # one folder per training command: the same command resumes its run, another starts its own
        run_dir = work / ("run-" + hashlib.sha256(args.train.encode()).hexdigest()[:10])
        report["train"] = train(args, out, run_dir)
        _write(out, "gpu_train.json", report)
        if "adapter" in report["train"]:
            adapters = {"trained": report["train"]["adapter"], **adapters}
    for name, path in adapters.items():
        for folder in args.score:
            t0 = time.perf_counter()
            try:
                row = score(folder, path, work, args.device, args.dtype)
            except Exception as e:  # keep the other rows; say what failed
                row = {"error": f"{type(e).__name__}: {e}"}
            row["seconds"] = round(time.perf_counter() - t0, 1)
            report["scores"].setdefault(name, {})[folder.name] = row
            _write(out, "gpu_train.json", report)
            print(name, folder.name, json.dumps({m: v.get("ndcg@10") for m, v in row.get("metrics", {}).items()}),
                  flush=True)
    report["finished"] = time.strftime("%Y-%m-%d %H:%M:%S")
    _write(out, "gpu_train.json", report)
    if args.record:
        command = portable_command(argv or sys.argv[1:])
        record_run(RESULTS, args.record, report, command, kept_adapter=args.kept_adapter)
    return 0


if __name__ == "__main__":
    sys.exit(main())
