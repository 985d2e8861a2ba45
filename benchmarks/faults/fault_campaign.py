"""Fault campaign on a real index: damage, kill and race an ADI index and count what
happened. A case is ``clear_error`` when alignir refused with one of its own errors (or an
OSError), ``silent_wrong`` when it ran without error but returned rankings different from the
expected ones, ``data_lost`` when a healthy index could no longer be opened afterwards.

    python -m benchmarks.faults.fault_campaign --index INDEX   # an ADI index built with alignir beir/build-index
    python -m benchmarks.faults.fault_campaign --index INDEX --attacks milvus,inputs   # no model needed

``--attacks``: ``folder`` (the index folder: damage, kills, concurrent writers; loads the model),
``milvus`` (the collection exported from it into Milvus Lite: benchmarks/faults/fault_milvus.py),
``milvus_engine`` (the same kinds of case against the Milvus 2.5 C++ engine as a loopback server) and ``inputs`` (qrels,
queries, corpus and training triples of ``--dataset`` mutated line by line:
benchmarks/faults/fault_inputs.py), ``adds`` (documents added to the index: killed, raced, against a
rebuild: benchmarks/faults/fault_add.py; loads the model) and ``serve`` (hostile requests to ``alignir serve``
on a copy of the index: benchmarks/faults/fault_serve.py; its server loads the model). Rows go to benchmarks/results/faults.json (the rows of attacks not
run are kept): attack, cases, silent_wrong, data_lost, clear_error.
Goal: silent_wrong = 0 and data_lost = 0 in every row.
"""
from __future__ import annotations

import argparse
import json
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from alignir.errors import AlignirError
from benchmarks.common import DATASETS

OUT = Path(__file__).resolve().parents[1] / "results" / "faults.json"
QUERIES = ["computer information retrieval", "indexing of documents", "automatic abstracting",
           "library catalog systems", "evaluation of retrieval"]
MODES = ("sparse", "dense", "bm25")


def rankings(index: Path, loaded) -> dict:
    from alignir import Searcher

    s = Searcher.open(index, loaded=loaded)
    return {m: [[h.id for h in hits] for hits in s.batch_search(QUERIES, k=10, mode=m)] for m in MODES}


def classify(index: Path, loaded, expected: list[dict]) -> str:
    """'ok' (rankings equal one of the expected versions), 'clear' (alignir refused) or 'wrong'."""
    try:
        got = rankings(index, loaded)
    except (AlignirError, OSError):
        return "clear"
    return "ok" if any(got == e for e in expected) else "wrong"


def damage_cases(index: Path):
    """(name, function that damages a copy) for every file: byte flips, truncation, deletion."""
    for f in sorted(p for p in index.rglob("*") if p.is_file()):
        rel = f.relative_to(index)
        size = f.stat().st_size
        for where in sorted({0, size // 2, max(0, size - 1)}):
            def flip(root: Path, rel=rel, where=where) -> None:
                p = root / rel
                b = bytearray(p.read_bytes())
                if b:
                    b[where] ^= 0x01
                p.write_bytes(bytes(b))
            yield "byte flip", flip
        yield "truncate", lambda root, rel=rel, size=size: (root / rel).write_bytes((root / rel).read_bytes()[: size // 2])
        yield "delete", lambda root, rel=rel: (root / rel).unlink()


def resparsify_cmd(index: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "alignir.retrieval.cli", "resparsify", "--index", str(index), *args]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--index", type=Path, required=True)
    ap.add_argument("--kills", type=int, default=8, help="kill points of a resparsify")
    ap.add_argument("--out", type=Path, default=OUT)
    ap.add_argument("--attacks", default="folder,milvus,inputs,adds,serve",
                    help="comma list of folder, milvus, milvus_engine, inputs, adds, serve")
    ap.add_argument("--dataset", type=Path, default=DATASETS / "adi", help="BEIR folder whose files the input attacks mutate")
    args = ap.parse_args()
    attacks = {a.strip() for a in args.attacks.split(",") if a.strip()}
    known = {"folder", "milvus", "milvus_engine", "inputs", "adds", "serve"}
    if not attacks <= known:
        ap.error(f"unknown attacks {sorted(attacks - known)}")
    rows: dict[str, dict] = {}

    def count(attack: str, outcome: str, lost: bool = False, **flags: bool) -> None:
        """One case of ``attack``; ``flags``: extra per-attack counters (e.g. how a case recovered)."""
        r = rows.setdefault(attack, {"attack": attack, "cases": 0, "silent_wrong": 0, "data_lost": 0, "clear_error": 0})
        r["cases"] += 1
        r["silent_wrong"] += outcome == "wrong"
        r["clear_error"] += outcome == "clear"
        r["data_lost"] += lost
        for name, hit in flags.items():
            r[name] = r.get(name, 0) + bool(hit)

    work = Path(tempfile.mkdtemp(prefix="alignir-faults-"))
    try:
        if "folder" in attacks:
            folder_attacks(args, work, count)
        if "milvus" in attacks:
            from benchmarks.faults import fault_milvus

            fault_milvus.run(args.index, work, count, kills=args.kills)
        if "milvus_engine" in attacks:
            from benchmarks.faults import fault_milvus

            fault_milvus.run_engine(args.index, work, count, kills=args.kills)
        if "inputs" in attacks:
            from benchmarks.faults import fault_inputs

            fault_inputs.run(args.dataset, work, count)
        if "adds" in attacks:
            from benchmarks.faults import fault_add
            from alignir.encoders.models import load_model
            from alignir.index.store import read_manifest

            loaded = load_model(read_manifest(args.index)["embedder"]["model"])
            fault_add.run(args.index, args.dataset, work, count, rankings, classify, loaded, kills=args.kills)
        if "serve" in attacks:
            from benchmarks.faults import fault_serve

            fault_serve.run(args.index, work, count)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    command = "python -m benchmarks.faults.fault_campaign " + " ".join(sys.argv[1:])
    out = [{**r, "command": command} for r in rows.values()]
    kept = json.loads(args.out.read_text()) if args.out.is_file() else []
    merged = [r for r in kept if r["attack"] not in rows] + out
    args.out.write_text(json.dumps(merged, indent=1) + "\n")
    print(json.dumps(out, indent=1))


def folder_attacks(args: argparse.Namespace, work: Path, count) -> None:
    """Damage, kill and race the index folder (loads its model)."""
    from alignir.encoders.models import load_model
    from alignir.index.store import read_manifest

    loaded = load_model(read_manifest(args.index)["embedder"]["model"])
    base = work / "base"
    shutil.copytree(args.index, base)
    subprocess.run(resparsify_cmd(base), check=True, capture_output=True)  # rewritten by this version
    expected = rankings(base, loaded)
    new = work / "new"  # the version a resparsify --doc-k 64 writes
    shutil.copytree(base, new)
    subprocess.run(resparsify_cmd(new, "--doc-k", "64"), check=True, capture_output=True)
    expected_new = rankings(new, loaded)

    for attack, hurt in damage_cases(base):  # damage: every file, the manifest included
        case = work / "case"
        shutil.rmtree(case, ignore_errors=True)
        shutil.copytree(base, case)
        hurt(case)
        count(attack, classify(case, loaded, [expected]))
    for i in range(args.kills):  # SIGKILL a resparsify at spread-out moments
        case = work / "case"
        shutil.rmtree(case, ignore_errors=True)
        shutil.copytree(base, case)
        proc = subprocess.Popen(resparsify_cmd(case, "--doc-k", "64"), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.5 + i * 1.5)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        outcome = classify(case, loaded, [expected, expected_new])
        count("kill during resparsify", outcome, lost=outcome == "clear")
    for _ in range(3):  # two writers at once
        case = work / "case"
        shutil.rmtree(case, ignore_errors=True)
        shutil.copytree(base, case)
        procs = [subprocess.Popen(resparsify_cmd(case, *a), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
                 for a in (["--doc-k", "64"], ["--fold"])]
        for p in procs:
            p.wait()
        folded = work / "folded"  # what --fold alone writes, for the outcome where it won
        if not folded.exists():
            shutil.copytree(base, folded)
            subprocess.run(resparsify_cmd(folded, "--fold"), check=True, capture_output=True)
        outcome = classify(case, loaded, [expected, expected_new, rankings(folded, loaded)])
        count("two concurrent writers", outcome, lost=outcome == "clear")
    case = work / "case"  # readers while a writer swaps versions in
    shutil.rmtree(case, ignore_errors=True)
    shutil.copytree(base, case)
    stop = threading.Event()

    def writer() -> None:
        for k in ("64", "256", "64", "256"):
            subprocess.run(resparsify_cmd(case, "--doc-k", k, "--wait"), capture_output=True)
        stop.set()

    t = threading.Thread(target=writer)
    t.start()
    while not stop.is_set():
        count("reader during writes", classify(case, loaded, [expected, expected_new]))
    t.join()


if __name__ == "__main__":
    main()
